// The UCX transport's binary frame header, which both ends decode from every active message.
// Property: a decoded header encodes and decodes back to itself.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"
#include "transport/ucx/ucx_frame.h"

using hetps::transport::ucx_internal::DecodeUcxFrame;
using hetps::transport::ucx_internal::EncodedUcxFrameSize;
using hetps::transport::ucx_internal::EncodeUcxFrameTo;
using hetps::transport::ucx_internal::UcxFrame;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<UcxFrame> frame = DecodeUcxFrame(data, size);
  if (!frame.ok()) {
    HETPS_FUZZ_CHECK(frame.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  std::string bytes(EncodedUcxFrameSize(*frame), '\0');
  EncodeUcxFrameTo(*frame, bytes.data());
  absl::StatusOr<UcxFrame> again = DecodeUcxFrame(bytes.data(), bytes.size());
  HETPS_FUZZ_CHECK(again.ok());
  HETPS_FUZZ_CHECK(again->call_id == frame->call_id);
  HETPS_FUZZ_CHECK(again->connection_id == frame->connection_id);
  HETPS_FUZZ_CHECK(again->timeout_us == frame->timeout_us);
  HETPS_FUZZ_CHECK(again->payload_bytes == frame->payload_bytes);
  HETPS_FUZZ_CHECK(again->method == frame->method);
  HETPS_FUZZ_CHECK(again->status_code == frame->status_code);
  HETPS_FUZZ_CHECK(again->text == frame->text);
  return 0;
}

std::vector<std::string> HetpsFuzzSeeds() {
  std::vector<std::string> seeds;
  UcxFrame frame;
  frame.call_id = 7;
  frame.connection_id = 3;
  frame.timeout_us = 1000000;
  frame.payload_bytes = 4096;
  frame.method = 5;
  frame.text = "push header";
  for (int status : {0, 5}) {
    frame.status_code = status;
    std::string bytes(EncodedUcxFrameSize(frame), '\0');
    EncodeUcxFrameTo(frame, bytes.data());
    seeds.push_back(bytes);
  }
  return seeds;
}
