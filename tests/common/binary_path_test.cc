// The test harness finds the project's programs (tests/testing/subprocess.h) whatever the
// working directory, also when a test binary is run by hand, without ctest's environment.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace hetps::testing {
namespace {

// Sets $HETPS_BINARY_DIR (nullopt: unsets it) and the working directory for one test, then
// puts both back.
class ScopedRunner {
 public:
  ScopedRunner(std::optional<std::string> binary_dir, const std::string& working_directory)
      : working_directory_(std::filesystem::current_path()) {
    if (const char* value = std::getenv(kVariable); value != nullptr) binary_dir_ = value;
    SetBinaryDir(binary_dir);
    std::filesystem::current_path(working_directory);
  }
  ~ScopedRunner() {
    std::filesystem::current_path(working_directory_);
    SetBinaryDir(binary_dir_);
  }

 private:
  static constexpr char kVariable[] = "HETPS_BINARY_DIR";
  static void SetBinaryDir(const std::optional<std::string>& dir) {
    if (dir.has_value()) {
      setenv(kVariable, dir->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(kVariable);
    }
  }
  const std::filesystem::path working_directory_;
  std::optional<std::string> binary_dir_;
};

TEST(BinaryPathTest, ARunByHandFindsTheProgramsFromAnyWorkingDirectory) {
  ScopedRunner by_hand(/*binary_dir=*/std::nullopt, "/");
  const std::string server = BinaryPath("server/ps-server");
  EXPECT_EQ(access(server.c_str(), X_OK), 0) << server << ": no such program";
}

TEST(BinaryPathTest, TheEnvironmentNamesTheBuildToUse) {
  ScopedRunner other_build("/elsewhere", "/");
  EXPECT_EQ(BinaryPath("server/ps-server"), "/elsewhere/server/ps-server");
}

}  // namespace
}  // namespace hetps::testing
