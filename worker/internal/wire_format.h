// How the worker client's public types and planned pieces map to the wire (proto/ps.proto): the
// options' checks, element types, initializers, stats, and the payloads of pushes and pulls.
#ifndef HETPS_WORKER_INTERNAL_WIRE_FORMAT_H_
#define HETPS_WORKER_INTERNAL_WIRE_FORMAT_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/buffer_pool.h"
#include "common/half.h"
#include "proto/ps.pb.h"
#include "transport/transport.h"
#include "worker/internal/message_plan.h"
#include "worker/options.h"

namespace hetps::internal {

// Room for a message's header beside partition_bytes of payload.
inline constexpr size_t kHeaderAllowance = 1 << 20;

// InvalidArgument for options no client can work with.
absl::Status ValidateOptions(const ClientOptions& options);

// What a worker tells shard `shard` of `num_shards` when it connects (the connection's greeting,
// transport::ConnectOptions) and in its Hello call.
hetps::v1::HelloRequest MakeHello(const ClientOptions& options, uint32_t shard, uint32_t num_shards,
                                  uint64_t incarnation, absl::string_view auth_token);

FloatFormat FormatOf(DType dtype);
hetps::v1::DType WireDType(FloatFormat format);

// The declaration's initializer (`with_values`: the workers send the values).
hetps::v1::Initializer InitializerProto(const Initializer& init, bool with_values);

ShardStats StatsFromProto(const hetps::v1::StatsResponse& proto);

// Copies a pull response into the pieces' destinations, after checking that it answers exactly
// what was asked.
absl::Status ScatterPulled(const std::vector<Piece>& pieces,
                           absl::StatusOr<transport::Response> result);

// A piece's gradient as it goes on the wire: the caller's memory itself, or a converted copy
// (in a buffer from `buffers`) when the tensor travels in another format.
transport::Payload GradientPayload(const Piece& piece, BufferPool& buffers);

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_WIRE_FORMAT_H_
