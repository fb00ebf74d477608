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

// Shorter than UCX 1.13's header (1 byte) and worker id (8 bytes).
constexpr size_t kShortestAddress = 9;

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

absl::Status CheckWorkerAddress(absl::string_view address) {
  // Too short, or of a version other than v1 and v2 (the low 4 bits of the first byte).
  constexpr unsigned kNewestAddressVersion = 1;
  if (address.size() < kShortestAddress ||
      (static_cast<unsigned char>(address[0]) & 0x0F) > kNewestAddressVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a UCX worker address of %d bytes that this UCX cannot read", address.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<hetps::v1::UcxBootstrapRequest> ParseBootstrapRequest(
    absl::string_view header, absl::string_view own_address) {
  hetps::v1::UcxBootstrapRequest bootstrap;
  if (!bootstrap.ParseFromArray(header.data(), static_cast<int>(header.size())) ||
      (bootstrap.worker_address().empty() && !bootstrap.address_only())) {
    return absl::InvalidArgumentError("malformed UCX bootstrap request");
  }
  if (bootstrap.address_only()) return bootstrap;  // a probe: nothing reaches UCX
  if (bootstrap.frame_version() != kUcxFrameVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the client speaks UCX frame version %d, this server %d (mixed hetps "
                        "versions?)",
                        bootstrap.frame_version(), kUcxFrameVersion));
  }
  if (absl::Status address = CheckWorkerAddress(bootstrap.worker_address()); !address.ok()) {
    return address;
  }
  // Bytes 1 to 8: the worker id (see CheckWorkerAddress).
  if (own_address.size() >= kShortestAddress &&
      bootstrap.worker_address().substr(1, 8) == own_address.substr(1, 8)) {
    return absl::InvalidArgumentError("a UCX bootstrap with the server's own worker id");
  }
  return bootstrap;
}

}  // namespace hetps::transport::ucx_internal
