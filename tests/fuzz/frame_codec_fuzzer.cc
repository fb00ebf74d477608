// The gRPC transport's frame decoder, which both ends run on every message they receive. The
// first byte of an input says how the rest is cut into slices (as gRPC may hand it over).
// Property: a decoded frame encodes and decodes back to itself.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"
#include "transport/grpc/frame_codec.h"

namespace {

using hetps::transport::Payload;
using hetps::transport::grpc_internal::DecodeError;
using hetps::transport::grpc_internal::DecodeFrame;
using hetps::transport::grpc_internal::EncodeFrame;
using hetps::transport::grpc_internal::Frame;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] == 0 ? size : data[0];
  std::vector<grpc::Slice> slices;
  for (size_t at = 1; at < size; at += piece) {
    slices.emplace_back(data + at, std::min(piece, size - at));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  DecodeError error;
  absl::StatusOr<Frame> frame = DecodeFrame(buffer, &error);
  if (!frame.ok()) {
    HETPS_FUZZ_CHECK(frame.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const std::string header = frame->header.SerializeAsString();
  const std::string payload = frame->payload.ToString();
  DecodeError again_error;
  absl::StatusOr<Frame> again =
      DecodeFrame(EncodeFrame(frame->header, frame->payload), &again_error);
  HETPS_FUZZ_CHECK(again.ok());
  HETPS_FUZZ_CHECK(again->header.SerializeAsString() == header);
  HETPS_FUZZ_CHECK(again->payload.ToString() == payload);
  if (frame->header.is_response()) {
    (void)hetps::transport::grpc_internal::ResponseFromFrame(*std::move(frame));
  }
  return 0;
}

std::vector<std::string> HetpsFuzzSeeds() {
  std::vector<std::string> seeds;
  const std::string payload_bytes(300, 'p');
  for (int kind = 0; kind < 3; ++kind) {
    hetps::v1::FrameHeader header;
    header.set_call_id(42 + kind);
    if (kind == 0) {  // a request with a payload
      header.set_method(5);
      header.set_timeout_us(1000000);
      header.set_header(std::string("\x08\x01\x10\x02", 4));
    } else if (kind == 1) {  // an OK response with a payload
      header.set_is_response(true);
    } else {  // an error response
      header.set_is_response(true);
      header.set_status_code(5);
      header.set_status_message("no such tensor");
    }
    const Payload payload =
        kind == 2
            ? Payload()
            : Payload::Copy(hetps::transport::ByteSpan(
                  reinterpret_cast<const uint8_t*>(payload_bytes.data()), payload_bytes.size()));
    const std::string frame = Flatten(EncodeFrame(header, payload));
    for (char piece : {'\0', '\x07', '\x40'}) seeds.push_back(piece + frame);
  }
  return seeds;
}
