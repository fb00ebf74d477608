#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace hetps::testing {

std::string BinaryPath(const std::string& relative) {
  // Not the working directory: a test binary run by hand from anywhere finds the programs built
  // beside it.
  const char* dir = std::getenv("HETPS_BINARY_DIR");
  return std::string(dir != nullptr ? dir : HETPS_BUILD_DIR) + "/" + relative;
}

std::string SourcePath(const std::string& relative) {
  return std::string(HETPS_SOURCE_DIR) + "/" + relative;
}

ScopedTempDir::ScopedTempDir() {
  const char* base = std::getenv("TMPDIR");
  path_ = std::string(base != nullptr ? base : "/tmp") + "/hetps-test-XXXXXX";
  if (mkdtemp(path_.data()) == nullptr) path_.clear();
}

ScopedTempDir::~ScopedTempDir() {
  if (path_.empty() || std::getenv("HETPS_KEEP_TEST_FILES") != nullptr) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::string& output_path,
                       const std::vector<std::string>& env) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  // The child's environment, built before fork (the child may only exec).
  // A variable in `env` replaces the inherited one of that name.
  std::vector<char*> envp;
  for (char** var = environ; *var != nullptr; ++var) {
    const std::string_view inherited(*var);
    const std::string_view name = inherited.substr(0, inherited.find('=') + 1);
    bool replaced = false;
    for (const std::string& mine : env) replaced = replaced || mine.rfind(name, 0) == 0;
    if (!replaced) envp.push_back(*var);
  }
  for (const std::string& var : env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // Die with the test, whatever happens to it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
}

Subprocess::~Subprocess() {
  if (!started() || exit_code_.has_value()) return;
  Signal(SIGTERM);
  if (!Wait(absl::Seconds(5)).has_value()) {
    Signal(SIGKILL);
    Wait(absl::Seconds(5));
  }
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value() || !started()) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (done < 0 || absl::Now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Subprocess::Signal(int signal) {
  if (started() && !exit_code_.has_value()) kill(pid_, signal);
}

bool Subprocess::running() { return started() && !Wait(absl::ZeroDuration()).has_value(); }

bool Subprocess::Stop(absl::Duration timeout) {
  Signal(SIGSTOP);
  const absl::Time give_up = absl::Now() + timeout;
  auto stopped = [this] {
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid_, "/stat"));
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
  };
  while (!stopped()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

uint64_t Subprocess::ResidentBytes() const {
  const std::string status = ReadFile(absl::StrCat("/proc/", pid_, "/status"));
  const size_t at = status.find("VmRSS:");
  if (at == std::string::npos) return 0;
  uint64_t kib = 0;
  const size_t end = status.find('\n', at);
  absl::string_view field = absl::StripAsciiWhitespace(
      absl::string_view(status).substr(at + 6, end == std::string::npos ? end : end - at - 6));
  if (absl::ConsumeSuffix(&field, "kB")) field = absl::StripAsciiWhitespace(field);
  return absl::SimpleAtoi(field, &kib) ? kib * 1024 : 0;
}

}  // namespace hetps::testing
