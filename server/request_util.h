// Small helpers for decoding request headers and encoding response headers.
#ifndef HETPS_SERVER_REQUEST_UTIL_H_
#define HETPS_SERVER_REQUEST_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "proto/ps.pb.h"
#include "transport/transport.h"

namespace hetps::server {

// Parses `bytes` into `message`; InvalidArgument when they are not a `Message`.
template <typename Message>
absl::Status ParseHeaderInto(const std::string& bytes, Message& message) {
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->name(), " header"));
  }
  return absl::OkStatus();
}

template <typename Message>
absl::StatusOr<Message> ParseHeader(const std::string& bytes) {
  Message message;
  if (absl::Status status = ParseHeaderInto(bytes, message); !status.ok()) return status;
  return message;
}

// The element format of a wire dtype; InvalidArgument for an unknown one.
inline absl::StatusOr<FloatFormat> FormatOf(hetps::v1::DType dtype) {
  switch (dtype) {
    case hetps::v1::DTYPE_FP32:
      return FloatFormat::kFp32;
    case hetps::v1::DTYPE_BF16:
      return FloatFormat::kBf16;
    case hetps::v1::DTYPE_FP16:
      return FloatFormat::kFp16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", dtype));
  }
}

template <typename Message>
transport::Response HeaderResponse(const Message& message) {
  transport::Response response;
  response.header = message.SerializeAsString();
  return response;
}

}  // namespace hetps::server

#endif  // HETPS_SERVER_REQUEST_UTIL_H_
