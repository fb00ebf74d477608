// UcxFrame: the header of one UCX frame (one active message; the payload is the message's data).
// A fixed 40-byte record, little-endian, then the method's own header bytes (requests and
// successful responses) or the status message (failed responses):
//
//   u64 call_id | u64 connection_id | i64 timeout_us | u64 payload_bytes | u32 method |
//   i32 status_code | text
//
// Not protobuf (gRPC frames use FrameHeader): building and parsing a FrameHeader cost about
// 100 and 120 ns a side on the project's VM, where a 4 KiB round trip over shared memory takes
// a few microseconds. Peers agree on kUcxFrameVersion at bootstrap (proto/frame.proto).
//
//   std::string bytes(EncodedUcxFrameSize(frame), '\0');
//   EncodeUcxFrameTo(frame, bytes.data());
//   absl::StatusOr<UcxFrame> decoded = DecodeUcxFrame(bytes.data(), bytes.size());
#ifndef HETPS_TRANSPORT_UCX_UCX_FRAME_H_
#define HETPS_TRANSPORT_UCX_UCX_FRAME_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/frame.pb.h"

namespace hetps::transport::ucx_internal {

// Raised whenever the layout above changes; a bootstrap between different versions fails.
inline constexpr uint32_t kUcxFrameVersion = 1;
inline constexpr size_t kUcxFrameFixedBytes = 40;

struct UcxFrame {
  // Chosen by the caller; a response carries the id of the request it answers.
  uint64_t call_id = 0;
  // Requests: the sender's connection as the server numbered it; responses: as the client did.
  uint64_t connection_id = 0;
  // Requests: microseconds until the caller stops waiting (0: no deadline).
  int64_t timeout_us = 0;
  uint64_t payload_bytes = 0;
  // Requests: the method (hetps.v1.Method, or a transport's own).
  uint32_t method = 0;
  // Responses: absl::StatusCode of the outcome (0: OK).
  int32_t status_code = 0;
  // The method's header, or the status message of a failed response. Decoded frames point
  // into the bytes they were decoded from.
  absl::string_view text;
};

// The frame's size encoded, and its encoding into `out` (that many bytes).
inline size_t EncodedUcxFrameSize(const UcxFrame& frame) {
  return kUcxFrameFixedBytes + frame.text.size();
}
void EncodeUcxFrameTo(const UcxFrame& frame, char* out);
// INVALID_ARGUMENT if `length` is shorter than the fixed part.
absl::StatusOr<UcxFrame> DecodeUcxFrame(const void* data, size_t length);

// UCX reads a worker address with assertions, not errors: one of an unknown format version
// aborts the process. INVALID_ARGUMENT for bytes that cannot be a worker address of this UCX
// (see the .cc). A crafted address can still pass: UCX's ports must not face untrusted networks.
absl::Status CheckWorkerAddress(absl::string_view address);

// Decodes and checks a bootstrap request (the header of kBootstrapMethod, over gRPC) before any
// of it reaches UCX: INVALID_ARGUMENT if malformed or its address cannot be one,
// FAILED_PRECONDITION for another frame version. An address with the worker id of
// `own_address` (the server's own, sent back with bytes changed) is refused: UCX asserts on it.
absl::StatusOr<hetps::v1::UcxBootstrapRequest> ParseBootstrapRequest(absl::string_view header,
                                                                     absl::string_view own_address);

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_FRAME_H_
