#include "common/auth_token.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"

namespace hetps {
namespace {

class AuthTokenTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv(kAuthTokenEnvironment); }
  void TearDown() override { unsetenv(kAuthTokenEnvironment); }

  // In a directory of this test's own: the tests run side by side.
  std::string WriteFile(const std::string& contents) {
    const std::string path = dir_.path() + "/token";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    return path;
  }

  const testing::ScopedTempDir dir_;
};

TEST_F(AuthTokenTest, AFileWinsOverTheEnvironmentAndLosesItsNewline) {
  setenv(kAuthTokenEnvironment, "from-environment", 1);
  absl::StatusOr<std::string> token = LoadAuthToken(WriteFile("from-file\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "from-file");
}

TEST_F(AuthTokenTest, TheEnvironmentServesWithoutAFileAndNothingMeansNoToken) {
  absl::StatusOr<std::string> none = LoadAuthToken("");
  ASSERT_OK(none);
  EXPECT_EQ(*none, "");
  setenv(kAuthTokenEnvironment, "from-environment", 1);
  EXPECT_EQ(*LoadAuthToken(""), "from-environment");
}

TEST_F(AuthTokenTest, EmptyOrMissingTokensAreRefusedWithoutShowingAnything) {
  EXPECT_EQ(LoadAuthToken(WriteFile(" \n")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadAuthToken("/nonexistent/token").status().code(),
            absl::StatusCode::kInvalidArgument);
  setenv(kAuthTokenEnvironment, "", 1);
  EXPECT_EQ(LoadAuthToken("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AuthTokensEqualTest, OnlyTheSameBytesMatch) {
  EXPECT_TRUE(AuthTokensEqual("s3cret", "s3cret"));
  EXPECT_FALSE(AuthTokensEqual("s3creT", "s3cret"));
  EXPECT_FALSE(AuthTokensEqual("s3cre", "s3cret"));
  EXPECT_FALSE(AuthTokensEqual("s3cret-and-more", "s3cret"));
  EXPECT_FALSE(AuthTokensEqual("", "s3cret"));
  EXPECT_FALSE(AuthTokensEqual("", "")) << "an empty expected token matches nothing";
}

}  // namespace
}  // namespace hetps
