#include "transport/ucx/ucx_frame.h"

#include <cstring>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace hetps::transport::ucx_internal {
namespace {

// The fields are copied in host order: the wire order is little-endian.
static_assert(ABSL_IS_LITTLE_ENDIAN, "the UCX frame layout assumes a little-endian host");

template <typename Field>
char* Put(char* at, Field value) {
  std::memcpy(at, &value, sizeof(value));
  return at + sizeof(value);
}

template <typename Field>
const char* Get(const char* at, Field* value) {
  std::memcpy(value, at, sizeof(*value));
  return at + sizeof(*value);
}

}  // namespace

void EncodeUcxFrameTo(const UcxFrame& frame, char* out) {
  char* at = out;
  at = Put(at, frame.call_id);
  at = Put(at, frame.connection_id);
  at = Put(at, frame.timeout_us);
  at = Put(at, frame.payload_bytes);
  at = Put(at, frame.method);
  at = Put(at, frame.status_code);
  if (!frame.text.empty()) std::memcpy(at, frame.text.data(), frame.text.size());
}

absl::StatusOr<UcxFrame> DecodeUcxFrame(const void* data, size_t length) {
  if (length < kUcxFrameFixedBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("UCX frame header of %d bytes is shorter than its %d fixed bytes", length,
                        kUcxFrameFixedBytes));
  }
  UcxFrame frame;
  const char* at = static_cast<const char*>(data);
  at = Get(at, &frame.call_id);
  at = Get(at, &frame.connection_id);
  at = Get(at, &frame.timeout_us);
  at = Get(at, &frame.payload_bytes);
  at = Get(at, &frame.method);
  at = Get(at, &frame.status_code);
  frame.text = absl::string_view(at, length - kUcxFrameFixedBytes);
  return frame;
}

}  // namespace hetps::transport::ucx_internal
