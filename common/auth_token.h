// The job's shared secret: shards started with one admit only connections that present it.
// It is read from a file or the environment, never taken as a flag value (flags show in `ps`),
// and never written to a log or an error message.
#ifndef HETPS_COMMON_AUTH_TOKEN_H_
#define HETPS_COMMON_AUTH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps {

// The environment variable a token is read from when no file is named.
inline constexpr char kAuthTokenEnvironment[] = "HETPS_AUTH_TOKEN";

// The token in `file` (surrounding whitespace and the final newline removed) when `file` is
// not empty, else $HETPS_AUTH_TOKEN when set, else "" (no token: authentication off).
// InvalidArgument for a file that cannot be read or holds an empty token, or an empty variable;
// the message names the file or variable, never the token.
absl::StatusOr<std::string> LoadAuthToken(const std::string& file);

// Whether `presented` equals `expected`, in time that depends on their lengths only, not on
// where they first differ.
bool AuthTokensEqual(absl::string_view presented, absl::string_view expected);

}  // namespace hetps

#endif  // HETPS_COMMON_AUTH_TOKEN_H_
