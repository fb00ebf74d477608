// Subprocess: a child process for multi-process tests. The child gets SIGKILL if the test
// process dies (PR_SET_PDEATHSIG), so nothing outlives a crashed test; the destructor ends a
// child that is still running.
//
//   Subprocess server({BinaryPath("server/ps-server"), "--port_file", file}, log_path);
//   ASSERT_TRUE(server.started());
//   std::optional<int> code = server.Wait(absl::Seconds(30));
#ifndef HETPS_TESTS_TESTING_SUBPROCESS_H_
#define HETPS_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace hetps::testing {

// The path of a program built by this project, e.g. "server/ps-server": in $HETPS_BINARY_DIR
// (ctest sets it), else in the build directory the tests were built in.
std::string BinaryPath(const std::string& relative);

// The path of a file of the source tree, e.g. "deploy/tls/make_certs.sh".
std::string SourcePath(const std::string& relative);

// A fresh, empty directory for one test's files, removed with everything in it when this goes
// out of scope (kept if HETPS_KEEP_TEST_FILES is set, for debugging).
class ScopedTempDir {
 public:
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Subprocess {
 public:
  // Starts argv[0] with the given arguments; stdout and stderr go to `output_path`. `env`
  // ("NAME=value") is added to this process's environment for the child, replacing variables of
  // the same names.
  Subprocess(const std::vector<std::string>& argv, const std::string& output_path,
             const std::vector<std::string>& env = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // The exit code (128 + signal if it was killed), or nullopt if still running at the timeout.
  std::optional<int> Wait(absl::Duration timeout);
  void Signal(int signal);
  bool running();
  // SIGSTOP, and waits (bounded) until the process is stopped: the signal takes effect
  // asynchronously. False if it was not stopped within `timeout`.
  bool Stop(absl::Duration timeout = absl::Seconds(10));
  // The process's resident memory (VmRSS), 0 if it cannot be read.
  uint64_t ResidentBytes() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

std::string ReadFile(const std::string& path);

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_SUBPROCESS_H_
