#include "worker/internal/wire_format.h"

#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/partitioning.h"
#include "proto/reused_message.h"

namespace hetps::internal {

FloatFormat FormatOf(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return FloatFormat::kBf16;
    case DType::kFp16:
      return FloatFormat::kFp16;
    case DType::kFp32:
      break;
  }
  return FloatFormat::kFp32;
}

hetps::v1::DType WireDType(FloatFormat format) {
  switch (format) {
    case FloatFormat::kBf16:
      return hetps::v1::DTYPE_BF16;
    case FloatFormat::kFp16:
      return hetps::v1::DTYPE_FP16;
    case FloatFormat::kFp32:
      break;
  }
  return hetps::v1::DTYPE_FP32;
}

absl::Status ValidateOptions(const ClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no servers given");
  if (options.world_size == 0) return absl::InvalidArgumentError("world_size must be >= 1");
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metrics_port must be -1 (none), 0 (any) or a port, not %d", options.metrics_port));
  }
  if (options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d is out of range for world_size %d",
                                                      options.rank, options.world_size));
  }
  if (options.partition_bytes == 0 ||
      options.partition_bytes % (kPartitionAlignElements * sizeof(float)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("partition_bytes %d is not a positive multiple of %d",
                        options.partition_bytes, kPartitionAlignElements * sizeof(float)));
  }
  if (options.partition_bytes + kHeaderAllowance > options.max_message_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("partition_bytes %d leaves no room for headers in messages of %d bytes "
                        "(max_message_bytes must be at least partition_bytes + 1 MiB)",
                        options.partition_bytes, options.max_message_bytes));
  }
  if (options.call_timeout <= absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("call_timeout and connect_timeout must be positive");
  }
  return absl::OkStatus();
}

hetps::v1::Initializer InitializerProto(const Initializer& init, bool with_values) {
  hetps::v1::Initializer proto;
  if (with_values) {
    proto.set_kind(hetps::v1::INIT_KIND_VALUES);
    return proto;
  }
  switch (init.kind) {
    case Initializer::Kind::kConstant:
      proto.set_kind(hetps::v1::INIT_KIND_CONSTANT);
      break;
    case Initializer::Kind::kUniform:
      proto.set_kind(hetps::v1::INIT_KIND_UNIFORM);
      break;
    case Initializer::Kind::kNormal:
      proto.set_kind(hetps::v1::INIT_KIND_NORMAL);
      break;
  }
  proto.set_a(init.a);
  proto.set_b(init.b);
  proto.set_seed(init.seed);
  return proto;
}

ShardStats StatsFromProto(const hetps::v1::StatsResponse& proto) {
  ShardStats stats;
  stats.shard_index = proto.shard_index();
  stats.num_tensors = proto.num_tensors();
  stats.num_partitions = proto.num_partitions();
  stats.parameter_bytes = proto.parameter_bytes();
  stats.optimizer_state_bytes = proto.optimizer_state_bytes();
  stats.data_requests = proto.data_requests();
  stats.push_items = proto.push_items();
  stats.pull_items = proto.pull_items();
  stats.payload_bytes_received = proto.payload_bytes_received();
  stats.payload_bytes_sent = proto.payload_bytes_sent();
  stats.failed_requests = proto.failed_requests();
  stats.pushes_refused = proto.pushes_refused();
  stats.tensors_dropped = proto.tensors_dropped();
  stats.requests_waiting = proto.requests_waiting();
  stats.checkpoints_waiting = proto.checkpoints_waiting();
  stats.last_checkpoint = proto.last_checkpoint();
  stats.backup_partitions = proto.backup_partitions();
  stats.replication_resends = proto.replication_resends();
  stats.min_version = proto.min_version();
  stats.max_version = proto.max_version();
  return stats;
}

absl::Status ScatterPulled(const std::vector<Piece>& pieces,
                           absl::StatusOr<transport::Response> result) {
  if (!result.ok()) return result.status();
  ReusedMessage<hetps::v1::PullResponse> reused;
  hetps::v1::PullResponse& response = *reused;
  if (!response.ParseFromString(result->header)) {
    return absl::InternalError("malformed pull response");
  }
  if (static_cast<size_t>(response.items_size()) != pieces.size()) {
    return absl::InternalError(absl::StrFormat("pull response has %d items, %d were asked",
                                               response.items_size(), pieces.size()));
  }
  size_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const hetps::v1::PartitionItem& item = response.items(static_cast<int>(i));
    const Piece& piece = pieces[i];
    const size_t bytes = piece.elements * BytesPerElement(piece.pull_format);
    if (item.tensor_key() != piece.tensor_key || item.partition() != piece.partition ||
        item.num_bytes() != bytes || item.dtype() != WireDType(piece.pull_format)) {
      return absl::InternalError("pull response does not match the request");
    }
    offset += bytes;
  }
  if (offset != result->payload.size()) {
    return absl::InternalError(absl::StrFormat("pull response carries %d bytes, %d expected",
                                               result->payload.size(), offset));
  }
  // A transport that received straight into the destinations (the request's response sink)
  // leaves nothing to copy.
  const auto& segments = result->payload.segments();
  bool in_place = segments.size() == pieces.size();
  for (size_t i = 0; in_place && i < pieces.size(); ++i) {
    in_place = segments[i].data() == static_cast<const uint8_t*>(pieces[i].weights) &&
               pieces[i].weights_format == pieces[i].pull_format;
  }
  if (in_place) return absl::OkStatus();
  offset = 0;
  for (const Piece& piece : pieces) {
    result->payload.ConvertTo(offset, piece.pull_format, piece.weights, piece.weights_format,
                              piece.elements);
    offset += piece.elements * BytesPerElement(piece.pull_format);
  }
  return absl::OkStatus();
}

transport::Payload GradientPayload(const Piece& piece, BufferPool& buffers) {
  const size_t bytes = piece.elements * BytesPerElement(piece.push_format);
  if (piece.gradient_format == piece.push_format) {
    return transport::Payload::Borrow(
        transport::ByteSpan(static_cast<const uint8_t*>(piece.gradient), bytes));
  }
  // Uninitialised: the conversion writes every byte.
  std::shared_ptr<uint8_t[]> converted = buffers.Take(bytes);
  ConvertFloats(piece.gradient, piece.gradient_format, converted.get(), piece.push_format,
                piece.elements);
  const transport::ByteSpan span(converted.get(), bytes);
  return transport::Payload::Shared(span, std::move(converted));
}

hetps::v1::HelloRequest MakeHello(const ClientOptions& options, uint32_t shard, uint32_t num_shards,
                                  uint64_t incarnation, absl::string_view auth_token) {
  hetps::v1::HelloRequest hello;
  hello.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
  hello.set_job_id(options.job_id);
  hello.set_worker_rank(options.rank);
  hello.set_world_size(options.world_size);
  hello.set_shard_index(shard);
  hello.set_num_shards(num_shards);
  hello.set_incarnation(incarnation);
  hello.set_admin(options.admin);
  if (!auth_token.empty()) hello.set_auth_token(std::string(auth_token));
  return hello;
}

}  // namespace hetps::internal
