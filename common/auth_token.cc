#include "common/auth_token.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hetps {

absl::StatusOr<std::string> LoadAuthToken(const std::string& file) {
  std::string token;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the token file ", file));
    std::ostringstream bytes;
    bytes << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(bytes.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the token file ", file, " is empty"));
    }
    return token;
  }
  const char* value = std::getenv(kAuthTokenEnvironment);
  if (value == nullptr) return token;
  token = std::string(absl::StripAsciiWhitespace(value));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kAuthTokenEnvironment, " is set but empty (unset it for no token)"));
  }
  return token;
}

bool AuthTokensEqual(absl::string_view presented, absl::string_view expected) {
  // Every byte of `presented` is looked at, whatever matched before it.
  unsigned char differ = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char want =
        expected.empty() ? 0 : static_cast<unsigned char>(expected[i % expected.size()]);
    differ |= static_cast<unsigned char>(presented[i]) ^ want;
  }
  return differ == 0 && !expected.empty();
}

}  // namespace hetps
