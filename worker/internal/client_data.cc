// The data path of the worker client (worker/internal/client_impl.h): push, pull and push-pull
// cut into per-shard messages, sent, and their replies scattered into the caller's memory.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/partitioning.h"
#include "common/status_macros.h"
#include "proto/ps.pb.h"
#include "proto/reused_message.h"
#include "transport/internal/call_scope.h"
#include "worker/internal/client_impl.h"
#include "worker/internal/operation_state.h"
#include "worker/internal/wire_format.h"

namespace hetps::internal {
namespace {

// Describes `piece` in a data request's `item`; a push's gradient goes onto `payload`.
void AddItem(hetps::v1::Method method, const Piece& piece, hetps::v1::PartitionItem* item,
             transport::Payload& payload, BufferPool& buffers) {
  item->set_tensor_key(piece.tensor_key);
  item->set_partition(piece.partition);
  if (method == hetps::v1::METHOD_PULL) {
    item->set_dtype(WireDType(piece.pull_format));
    return;
  }
  item->set_dtype(WireDType(piece.push_format));
  if (method == hetps::v1::METHOD_PUSH_PULL && piece.pull_format != piece.push_format) {
    item->set_pull_dtype(WireDType(piece.pull_format));
  }
  item->set_num_bytes(piece.elements * BytesPerElement(piece.push_format));
  payload.Append(GradientPayload(piece, buffers));
}

// Whether building `message` converts gradients into their wire format (CPU time spent between
// two sends).
bool ConvertsGradients(const PlannedMessage& message) {
  return std::any_of(message.pieces.begin(), message.pieces.end(), [](const Piece& piece) {
    return piece.gradient != nullptr && piece.gradient_format != piece.push_format;
  });
}

// The partitions a PartitionSpan selects, and where their elements begin.
struct PartitionRun {
  uint32_t first = 0;
  uint32_t end = 0;  // one past the last
  uint64_t begin = 0;
  uint64_t elements = 0;
};

absl::StatusOr<PartitionRun> SelectPartitions(const DeclaredTensor& tensor, PartitionSpan span) {
  const uint32_t total = tensor.layout.num_partitions();
  if (span.first >= total || span.count == 0 ||
      (span.count != PartitionSpan::kAll && span.count > total - span.first)) {
    return absl::OutOfRangeError(
        absl::StrFormat("tensor '%s' has %d partitions; partitions %d..+%d were asked for",
                        tensor.name, total, span.first, span.count));
  }
  PartitionRun run;
  run.first = span.first;
  run.end = span.count == PartitionSpan::kAll ? total : span.first + span.count;
  run.begin = tensor.layout.partition(run.first).begin;
  const PartitionRange last = tensor.layout.partition(run.end - 1);
  run.elements = last.begin + last.size - run.begin;
  return run;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<Piece>>> ClientImpl::PlanPieces(
    hetps::v1::Method method, absl::Span<const PushItem> gradients,
    absl::Span<const PullItem> weights) {
  const bool push = method != hetps::v1::METHOD_PULL;
  const bool pull = method != hetps::v1::METHOD_PUSH;
  if (push && pull && gradients.size() != weights.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("push-pull of %d gradients into %d weights",
                                                      gradients.size(), weights.size()));
  }
  const size_t count = push ? gradients.size() : weights.size();
  const uint32_t num_shards = static_cast<uint32_t>(options_.servers.size());
  std::vector<std::vector<Piece>> pieces(num_shards);
  for (size_t i = 0; i < count; ++i) {
    const TensorId id = push ? gradients[i].tensor : weights[i].tensor;
    if (push && pull && weights[i].tensor != id) {
      return absl::InvalidArgumentError(
          "push-pull: the weights must name the same tensors as the gradients, in order");
    }
    HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
    const PartitionSpan span = push ? gradients[i].partitions : weights[i].partitions;
    if (push && pull &&
        (weights[i].partitions.first != span.first || weights[i].partitions.count != span.count)) {
      return absl::InvalidArgumentError(
          "push-pull: the weights must name the same partitions as the gradients");
    }
    HETPS_ASSIGN_OR_RETURN(const PartitionRun run, SelectPartitions(*tensor, span));
    const size_t given = push ? gradients[i].gradient.size() : weights[i].weights.size();
    const size_t other = push && pull ? weights[i].weights.size() : given;
    if (given != run.elements || other != run.elements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor '%s': %d elements expected (partitions %d..%d of %d), %d were given",
          tensor->name, run.elements, run.first, run.end - 1, tensor->layout.num_partitions(),
          given != run.elements ? given : other));
    }
    for (uint32_t p = run.first; p < run.end; ++p) {
      const PartitionRange range = tensor->layout.partition(p);
      const uint64_t offset = range.begin - run.begin;
      Piece piece{id, p, range.size};
      size_t element_bytes = 0;
      if (push) {
        const ConstTensorView& view = gradients[i].gradient;
        piece.gradient_format = FormatOf(view.dtype());
        piece.gradient = static_cast<const uint8_t*>(view.data()) +
                         offset * BytesPerElement(piece.gradient_format);
        piece.push_format = tensor->push_format;
        element_bytes = BytesPerElement(piece.push_format);
      }
      if (pull) {
        const TensorView& view = weights[i].weights;
        piece.weights_format = FormatOf(view.dtype());
        piece.weights =
            static_cast<uint8_t*>(view.data()) + offset * BytesPerElement(piece.weights_format);
        piece.pull_format = tensor->pull_format;
        element_bytes = std::max(element_bytes, BytesPerElement(piece.pull_format));
      }
      piece.bytes = range.size * element_bytes;
      pieces[ShardOfPartition(id, p, num_shards)].push_back(piece);
    }
  }
  return pieces;
}

Operation ClientImpl::StartData(hetps::v1::Method method, absl::Span<const PushItem> gradients,
                                absl::Span<const PullItem> weights, uint64_t step_or_version,
                                DoneCallback done) {
  transport::internal::CallScope scope;  // `done` never runs inside this call
  const internal::ClientMetrics::Op op =
      method == hetps::v1::METHOD_PUSH   ? internal::ClientMetrics::kPush
      : method == hetps::v1::METHOD_PULL ? internal::ClientMetrics::kPull
                                         : internal::ClientMetrics::kPushPull;
  // Refused before anything is sent: counted now.
  auto refuse = [&](const absl::Status& status) {
    if (metrics_ != nullptr) metrics_->Completed(op, status, CycleClock::Now());
    return OperationState::Failed(status, std::move(done), timers_.get());
  };
  absl::StatusOr<std::shared_ptr<const ChannelList>> channels = Channels();
  if (!channels.ok()) return refuse(channels.status());
  absl::StatusOr<std::vector<std::vector<Piece>>> pieces = PlanPieces(method, gradients, weights);
  if (!pieces.ok()) return refuse(pieces.status());
  std::vector<PlannedMessage> messages =
      internal::PackMessages(*std::move(pieces), options_.partition_bytes);

  auto operation = std::make_shared<OperationState>(messages.size(), std::move(done));
  operation->DriveWith(transport_);
  if (metrics_ != nullptr) operation->MeasureIn(metrics_, op);
  const absl::Time deadline = Now() + options_.call_timeout;
  const bool push = method != hetps::v1::METHOD_PULL;
  const uint64_t sequence = push ? next_sequence_.fetch_add(1) : 0;
  // What the operation moves to or from each shard at once (transport::Request::burst_bytes).
  absl::InlinedVector<size_t, 16> bytes_to_shard((**channels).size(), 0);
  for (const PlannedMessage& message : messages) bytes_to_shard[message.shard] += message.bytes;
  for (size_t m = 0; m < messages.size(); ++m) {
    PlannedMessage& message = messages[m];
    // The items go into the header message directly, one the thread reuses (see
    // ReusedMessage): building it allocates nothing after the first operations.
    transport::Payload payload;
    auto add_items = [&](google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem>& items) {
      for (const Piece& piece : message.pieces) {
        AddItem(method, piece, items.Add(), payload, *conversion_buffers_);
      }
    };
    std::string header;
    if (push) {
      ReusedMessage<hetps::v1::PushRequest> request;
      add_items(*request->mutable_items());
      request->set_worker_rank(options_.rank);
      request->set_step(step_or_version);
      request->set_sequence(sequence);
      request->set_incarnation(incarnation_);
      request->set_shard_incarnation((**channels)[message.shard]->shard_incarnation());
      request->SerializeToString(&header);
    } else {
      ReusedMessage<hetps::v1::PullRequest> request;
      add_items(*request->mutable_items());
      request->set_worker_rank(options_.rank);
      request->set_min_version(step_or_version);
      request->set_shard_incarnation((**channels)[message.shard]->shard_incarnation());
      request->SerializeToString(&header);
    }
    const bool pull = method != hetps::v1::METHOD_PUSH;
    // Pulled bytes already in the caller's format may land straight in the caller's memory.
    transport::ResponseSink sink;
    for (const Piece& piece : message.pieces) {
      if (!pull || piece.weights_format != piece.pull_format) {
        sink.clear();
        break;
      }
      sink.emplace_back(static_cast<uint8_t*>(piece.weights),
                        piece.elements * BytesPerElement(piece.pull_format));
    }
    if (metrics_ != nullptr) metrics_->sent_bytes.fetch_add(payload.size());
    (**channels)[message.shard]->Call(
        method, std::move(header), std::move(payload), deadline,
        [operation, pull, metrics = metrics_.get(),
         pieces = std::move(message.pieces)](absl::StatusOr<transport::Response> result) {
          if (metrics != nullptr && result.ok()) {
            metrics->received_bytes.fetch_add(result->payload.size());
          }
          operation->MessageDone(pull ? ScatterPulled(pieces, std::move(result)) : result.status());
        },
        std::move(sink), bytes_to_shard[message.shard]);
    // Converting the next message keeps this thread on its CPU, where the transport's thread
    // would have to send this one: send it from here now, and handle what came back, so the
    // shard works on it meanwhile (traced: the shard saw none of 16 messages until all were
    // converted).
    if (m + 1 < messages.size() && ConvertsGradients(messages[m + 1])) transport_->Progress();
  }
  return Operation(operation);
}

absl::StatusOr<std::vector<TensorPartition>> ClientImpl::Partitions(TensorId id) {
  HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
  std::vector<TensorPartition> partitions;
  const auto num_shards = static_cast<uint32_t>(options_.servers.size());
  for (uint32_t p = 0; p < tensor->layout.num_partitions(); ++p) {
    const PartitionRange range = tensor->layout.partition(p);
    partitions.push_back({range.begin, range.size, ShardOfPartition(id, p, num_shards)});
  }
  return partitions;
}

}  // namespace hetps::internal
