// The UCX bootstrap request (over gRPC, before any UCX endpoint exists): what a shard decodes
// and checks before a peer's worker address may reach UCX, which asserts on bad ones.
// Property: whatever passes is of this frame version with an address UCX can read.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"
#include "transport/ucx/ucx_frame.h"

using hetps::transport::ucx_internal::CheckWorkerAddress;
using hetps::transport::ucx_internal::kUcxFrameVersion;
using hetps::transport::ucx_internal::ParseBootstrapRequest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view header(reinterpret_cast<const char*>(data), size);
  // A server's own address (version 1, worker id 1..8): a request naming it is refused.
  static const std::string own_address("\x01\x01\x02\x03\x04\x05\x06\x07\x08rest", 13);
  absl::StatusOr<hetps::v1::UcxBootstrapRequest> request =
      ParseBootstrapRequest(header, own_address);
  if (!request.ok()) {
    HETPS_FUZZ_CHECK(request.status().code() == absl::StatusCode::kInvalidArgument ||
                     request.status().code() == absl::StatusCode::kFailedPrecondition);
    return 0;
  }
  if (request->address_only()) return 0;
  HETPS_FUZZ_CHECK(request->frame_version() == kUcxFrameVersion);
  HETPS_FUZZ_CHECK(CheckWorkerAddress(request->worker_address()).ok());
  HETPS_FUZZ_CHECK(request->worker_address().substr(1, 8) != own_address.substr(1, 8));
  return 0;
}

std::vector<std::string> HetpsFuzzSeeds() {
  std::vector<std::string> seeds;
  hetps::v1::UcxBootstrapRequest request;
  // A version-1 address: header byte, 8-byte worker id, then device records.
  std::string address("\x01", 1);
  address += std::string("\x11\x22\x33\x44\x55\x66\x77\x88", 8);
  address += "lo\x00\x05sysv\x00posix";
  request.set_worker_address(address);
  request.set_connection_id(9);
  request.set_frame_version(kUcxFrameVersion);
  seeds.push_back(request.SerializeAsString());
  request.set_frame_version(kUcxFrameVersion + 1);
  seeds.push_back(request.SerializeAsString());
  hetps::v1::UcxBootstrapRequest probe;
  probe.set_address_only(true);
  seeds.push_back(probe.SerializeAsString());
  return seeds;
}
