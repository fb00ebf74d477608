// CapturedStderr: what the process writes to stderr (file descriptor 2, where hetps logs)
// while it lives goes to a file of its own instead, for tests of what is logged. One at a time.
#ifndef HETPS_TESTS_TESTING_CAPTURED_STDERR_H_
#define HETPS_TESTS_TESTING_CAPTURED_STDERR_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace hetps::testing {

class CapturedStderr {
 public:
  CapturedStderr() {
    std::string path = ::testing::TempDir() + "/hetps-stderr-XXXXXX";
    file_ = mkstemp(path.data());
    if (file_ < 0) return;
    unlink(path.c_str());
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    if (saved_ >= 0) dup2(file_, STDERR_FILENO);
  }
  ~CapturedStderr() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
    }
    if (file_ >= 0) close(file_);
  }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;

  // False if stderr could not be redirected (the test cannot see what is logged).
  bool active() const { return saved_ >= 0; }

  // Everything written so far.
  std::string Text() const {
    std::string text;
    char chunk[4096];
    for (off_t offset = 0;;) {
      const ssize_t n = pread(file_, chunk, sizeof(chunk), offset);
      if (n <= 0) break;
      text.append(chunk, static_cast<size_t>(n));
      offset += n;
    }
    return text;
  }

 private:
  int file_ = -1;
  int saved_ = -1;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_CAPTURED_STDERR_H_
