// Small helpers for decoding request headers and encoding response headers.
#ifndef HETPS_SERVER_REQUEST_UTIL_H_
#define HETPS_SERVER_REQUEST_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "transport/transport.h"

namespace hetps::server {

// InvalidArgument when `bytes` is not a `Message`.
template <typename Message>
absl::StatusOr<Message> ParseHeader(const std::string& bytes) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->name(), " header"));
  }
  return message;
}

template <typename Message>
transport::Response HeaderResponse(const Message& message) {
  transport::Response response;
  response.header = message.SerializeAsString();
  return response;
}

}  // namespace hetps::server

#endif  // HETPS_SERVER_REQUEST_UTIL_H_
