#include "transport/grpc/frame_codec.h"

#include <grpc/grpc.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hetps::transport::grpc_internal {
namespace {

constexpr size_t kLengthPrefixBytes = 4;

// Keeps a Payload's owners alive until gRPC releases the last slice that points into it.
struct SliceKeepAlive {
  std::atomic<size_t> refs;
  Payload payload;
};

void ReleaseKeepAlive(void* arg) {
  auto* keep = static_cast<SliceKeepAlive*>(arg);
  if (keep->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete keep;
}

}  // namespace

size_t EncodedFrameSize(const hetps::v1::FrameHeader& header, const Payload& payload) {
  hetps::v1::FrameHeader sized = header;
  sized.set_payload_bytes(payload.size());
  return kLengthPrefixBytes + sized.ByteSizeLong() + payload.size();
}

grpc::ByteBuffer EncodeFrame(hetps::v1::FrameHeader header, const Payload& payload) {
  header.set_payload_bytes(payload.size());
  std::string prefix(kLengthPrefixBytes, '\0');
  const uint32_t header_bytes = static_cast<uint32_t>(header.ByteSizeLong());
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    prefix[i] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  }
  header.AppendToString(&prefix);

  std::vector<grpc::Slice> slices;
  slices.reserve(1 + payload.segments().size());
  slices.emplace_back(prefix);
  if (!payload.empty()) {
    auto* keep = new SliceKeepAlive{{payload.segments().size()}, payload};
    for (const ByteSpan& segment : payload.segments()) {
      slices.emplace_back(const_cast<uint8_t*>(segment.data()), segment.size(), &ReleaseKeepAlive,
                          keep);
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::StatusOr<Frame> DecodeFrame(const grpc::ByteBuffer& buffer, DecodeError* error) {
  auto fail = [error](absl::Status status) {
    error->status = status;
    return status;
  };
  auto slices = std::make_shared<std::vector<grpc::Slice>>();
  if (!buffer.Dump(slices.get()).ok()) return fail(absl::InvalidArgumentError("unreadable frame"));
  std::vector<ByteSpan> segments;
  segments.reserve(slices->size());
  for (const grpc::Slice& slice : *slices) segments.emplace_back(slice.begin(), slice.size());
  const Payload all = Payload::FromSegments(segments, slices);
  if (all.size() < kLengthPrefixBytes) {
    return fail(absl::InvalidArgumentError(
        absl::StrFormat("frame of %d bytes is shorter than its length prefix", all.size())));
  }
  uint8_t prefix[kLengthPrefixBytes];
  all.CopyTo(0, absl::MakeSpan(prefix));
  const uint32_t header_bytes =
      static_cast<uint32_t>(prefix[0]) | static_cast<uint32_t>(prefix[1]) << 8 |
      static_cast<uint32_t>(prefix[2]) << 16 | static_cast<uint32_t>(prefix[3]) << 24;
  if (header_bytes > all.size() - kLengthPrefixBytes) {
    return fail(absl::InvalidArgumentError(
        absl::StrFormat("frame truncated: header of %d bytes announced, %d bytes follow",
                        header_bytes, all.size() - kLengthPrefixBytes)));
  }
  std::string header_data(header_bytes, '\0');
  all.CopyTo(kLengthPrefixBytes,
             absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(header_data.data()), header_bytes));
  Frame frame;
  if (!frame.header.ParseFromString(header_data)) {
    return fail(absl::InvalidArgumentError("frame header does not parse"));
  }
  error->call_id = frame.header.call_id();
  const size_t available = all.size() - kLengthPrefixBytes - header_bytes;
  if (frame.header.payload_bytes() != available) {
    return fail(absl::InvalidArgumentError(
        absl::StrFormat("frame %s: header announces %d payload bytes, %d arrived",
                        frame.header.payload_bytes() > available ? "truncated" : "too long",
                        frame.header.payload_bytes(), available)));
  }
  frame.payload = all.Subrange(kLengthPrefixBytes + header_bytes, available);
  return frame;
}

hetps::v1::FrameHeader ResponseHeader(uint64_t call_id, const absl::StatusOr<Response>& result) {
  hetps::v1::FrameHeader header;
  header.set_call_id(call_id);
  header.set_is_response(true);
  if (result.ok()) {
    header.set_header(result->header);
  } else {
    header.set_status_code(static_cast<int32_t>(result.status().code()));
    header.set_status_message(std::string(result.status().message()));
  }
  return header;
}

absl::StatusOr<Response> ResponseFromFrame(Frame frame) {
  if (frame.header.status_code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(frame.header.status_code()),
                        frame.header.status_message());
  }
  Response response;
  response.header = std::move(*frame.header.mutable_header());
  response.payload = std::move(frame.payload);
  return response;
}

namespace {

int Milliseconds(absl::Duration duration) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(duration), 1, INT_MAX));
}

}  // namespace

std::vector<std::pair<const char*, int>> KeepaliveArguments(const TransportOptions& options,
                                                            bool server) {
  std::vector<std::pair<const char*, int>> args = {
      {GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(options.keepalive_interval)},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Milliseconds(options.keepalive_timeout)},
      // A connection idle between training phases is still checked.
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
  };
  if (server) {
    // The peer pings as often as this end does; gRPC's default would answer that with GOAWAY.
    args.push_back({GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                    Milliseconds(options.keepalive_interval / 2)});
    args.push_back({GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0});
    if (options.idle_timeout != absl::InfiniteDuration()) {
      // A TCP connection that never finishes its handshake, or never opens a stream.
      args.push_back({GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                      Milliseconds(std::min(options.idle_timeout, absl::Minutes(2)))});
      args.push_back({GRPC_ARG_MAX_CONNECTION_IDLE_MS, Milliseconds(options.idle_timeout)});
    }
  }
  return args;
}

std::pair<const char*, int> BandwidthProbeArgument(bool bulk) {
  return {GRPC_ARG_HTTP2_BDP_PROBE, bulk ? 0 : 1};
}

}  // namespace hetps::transport::grpc_internal
