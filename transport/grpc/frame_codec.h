// Frames on the gRPC stream (layout in proto/frame.proto): encoding a header and a Payload into a
// grpc::ByteBuffer without copying the payload (its segments become slices that keep the
// Payload's owners alive), and decoding a received ByteBuffer into a header and a Payload that
// refers to the received slices.
#ifndef HETPS_TRANSPORT_GRPC_FRAME_CODEC_H_
#define HETPS_TRANSPORT_GRPC_FRAME_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/frame.pb.h"
#include "transport/payload.h"
#include "transport/transport.h"

namespace hetps::transport::grpc_internal {

struct Frame {
  hetps::v1::FrameHeader header;
  Payload payload;
};

// The method name of the one stream every connection opens.
inline constexpr char kStreamMethod[] = "/hetps.v1.Transport/Stream";
// The stream's metadata entry that carries the client's greeting (ConnectOptions::greeting).
inline constexpr char kGreetingMetadata[] = "hetps-greeting-bin";
// The server's initial metadata entry that names its bulk port (TransportOptions::grpc_bulk_port).
inline constexpr char kBulkPortMetadata[] = "hetps-bulk-port";
// Bursts of calls (Request::burst_bytes) that move at least this many bytes one way take the
// bulk connection.
inline constexpr size_t kBulkBurstBytes = 16 << 20;

// gRPC channel arguments for TransportOptions' keepalive and idle settings, on either end.
std::vector<std::pair<const char*, int>> KeepaliveArguments(const TransportOptions& options,
                                                            bool server);

// gRPC's bandwidth-delay probe: on for the first connection, off for the bulk one.
std::pair<const char*, int> BandwidthProbeArgument(bool bulk);

// Sets header.payload_bytes and lays the frame out.
grpc::ByteBuffer EncodeFrame(hetps::v1::FrameHeader header, const Payload& payload);

// Size of the encoded frame, for checking limits before encoding.
size_t EncodedFrameSize(const hetps::v1::FrameHeader& header, const Payload& payload);

struct DecodeError {
  absl::Status status;
  // Set when the header could be read, so the error can be answered to that call.
  std::optional<uint64_t> call_id;
};

// InvalidArgument for frames that are truncated, too long or whose header does not parse.
absl::StatusOr<Frame> DecodeFrame(const grpc::ByteBuffer& buffer, DecodeError* error);

// Response frames: the status travels in the header, the response (if OK) as header + payload.
hetps::v1::FrameHeader ResponseHeader(uint64_t call_id, const absl::StatusOr<Response>& result);
absl::StatusOr<Response> ResponseFromFrame(Frame frame);

}  // namespace hetps::transport::grpc_internal

#endif  // HETPS_TRANSPORT_GRPC_FRAME_CODEC_H_
