// The worker client behind worker/client.h.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth_token.h"
#include "common/clock.h"
#include "common/cycle_clock.h"
#include "common/http_endpoint.h"
#include "common/partitioning.h"
#include "common/random_id.h"
#include "common/runtime.h"
#include "common/status_macros.h"
#include "common/timer_queue.h"
#include "proto/ps.pb.h"
#include "proto/reused_message.h"
#include "transport/internal/call_scope.h"
#include "worker/client.h"
#include "worker/internal/client_metrics.h"
#include "worker/internal/message_plan.h"
#include "worker/internal/operation_state.h"
#include "worker/internal/rpc.h"
#include "worker/internal/shard_channel.h"
#include "worker/internal/wire_format.h"

namespace hetps {
namespace {

using internal::FormatOf;
using internal::GradientPayload;
using internal::InitializerProto;
using internal::kHeaderAllowance;
using internal::OperationState;
using internal::Piece;
using internal::PlannedMessage;
using internal::ScatterPulled;
using internal::ShardChannel;
using internal::StatsFromProto;
using internal::ValidateOptions;
using internal::WireDType;

// Describes `piece` in a data request's `item`; a push's gradient goes onto `payload`.
void AddItem(hetps::v1::Method method, const Piece& piece, hetps::v1::PartitionItem* item,
             transport::Payload& payload) {
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
  payload.Append(GradientPayload(piece));
}

struct DeclaredTensor {
  std::string name;
  uint64_t num_elements;
  PartitionLayout layout;
  FloatFormat push_format;
  FloatFormat pull_format;
};

bool SameDeclaration(const DeclaredTensor& a, const DeclaredTensor& b) {
  return a.num_elements == b.num_elements &&
         a.layout.max_partition_elements() == b.layout.max_partition_elements() &&
         a.push_format == b.push_format && a.pull_format == b.pull_format;
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

class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options, std::shared_ptr<transport::Transport> transport,
             std::string auth_token)
      : options_(options),
        transport_(std::move(transport)),
        auth_token_(std::move(auth_token)),
        timers_(std::make_unique<TimerQueue>()),
        incarnation_(NewRandomId()) {}

  ~ClientImpl() override {
    Shutdown();
    timers_.reset();
  }

  absl::Status Connect();
  // With ClientOptions::metrics_port: counts from now on, and serves the counts.
  absl::Status StartMetrics() {
    CycleClock::Calibrate();
    metrics_ = std::make_shared<internal::ClientMetrics>();
    HETPS_ASSIGN_OR_RETURN(metrics_endpoint_,
                           internal::ServeClientMetrics(&options_, metrics_.get()));
    return absl::OkStatus();
  }
  const std::shared_ptr<internal::ClientMetrics>& metrics() const { return metrics_; }
  std::string metrics_address() const override {
    return metrics_endpoint_ != nullptr ? metrics_endpoint_->address() : "";
  }

  absl::StatusOr<TensorId> Declare(const TensorSpec& spec,
                                   absl::Span<const float> initial_values) override;
  Operation Push(absl::Span<const PushItem> gradients, uint64_t step, DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PUSH, gradients, {}, step, std::move(done));
  }
  Operation Pull(absl::Span<const PullItem> weights, uint64_t min_version,
                 DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PULL, {}, weights, min_version, std::move(done));
  }
  Operation PushPull(absl::Span<const PushItem> gradients, absl::Span<const PullItem> weights,
                     uint64_t step, DoneCallback done) override {
    return StartData(hetps::v1::METHOD_PUSH_PULL, gradients, weights, step, std::move(done));
  }
  const ClientOptions& options() const override { return options_; }
  absl::StatusOr<std::vector<TensorPartition>> Partitions(TensorId tensor) override;
  absl::Status SetHyperparameters(TensorId tensor, uint64_t from_step,
                                  const std::map<std::string, double>& changes) override;
  absl::StatusOr<TensorState> ReadState(TensorId tensor) override {
    return ReadStateOf(tensor, /*backup=*/false);
  }
  absl::StatusOr<TensorState> ReadBackupState(TensorId tensor) override {
    return ReadStateOf(tensor, /*backup=*/true);
  }
  absl::StatusOr<TensorState> ReadStateOf(TensorId tensor, bool backup);
  absl::Status WriteState(TensorId tensor, const TensorState& state) override;
  absl::Status Barrier() override;
  uint64_t ResumeStep() const override { return resume_step_; }
  absl::Status Checkpoint(uint64_t step) override;
  absl::StatusOr<DropResult> Drop(absl::Span<const std::string> names) override;
  absl::StatusOr<DropResult> DropAll() override;
  absl::Status StopShard(uint32_t shard) override;
  absl::StatusOr<std::vector<ShardStats>> Stats() override;
  void Shutdown() override;

 private:
  using ChannelList = std::vector<std::shared_ptr<ShardChannel>>;
  // The shard channels, by shard (set once by Connect, so callers share the list instead of
  // copying it), or FailedPrecondition before Connect and once shut down.
  absl::StatusOr<std::shared_ptr<const ChannelList>> Channels();
  absl::StatusOr<const DeclaredTensor*> FindTensor(TensorId id);
  // Cuts the items into per-shard pieces, checking each against its declaration.
  absl::StatusOr<std::vector<std::vector<Piece>>> PlanPieces(hetps::v1::Method method,
                                                             absl::Span<const PushItem> gradients,
                                                             absl::Span<const PullItem> weights);
  // After a declaration: DataLoss when some shards created the tensor's partitions while others
  // had applied steps to theirs (those shards restarted without their state; they are told to
  // mark the tensor lost, for every worker).
  absl::Status CheckNoShardForgot(const ChannelList& channels, hetps::v1::DeclareRequest request,
                                  const std::vector<uint32_t>& message_shards,
                                  const std::vector<transport::Response>& responses);
  Operation StartData(hetps::v1::Method method, absl::Span<const PushItem> gradients,
                      absl::Span<const PullItem> weights, uint64_t step_or_version,
                      DoneCallback done);

  const ClientOptions options_;
  const std::shared_ptr<transport::Transport> transport_;
  const std::string auth_token_;  // the job's secret, or empty
  std::unique_ptr<TimerQueue> timers_;
  // This run of the worker (see HelloRequest.incarnation); its pushes are numbered from 1.
  const uint64_t incarnation_;
  std::atomic<uint64_t> next_sequence_{1};
  uint64_t resume_step_ = 0;  // set by Connect
  uint32_t replicas_ = 1;     // copies of each partition the shards keep; set by Connect

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const ChannelList> channels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TensorId, std::unique_ptr<DeclaredTensor>> tensors_ ABSL_GUARDED_BY(mu_);
  // Dropped declarations: kept, as an operation started before the drop may still read them.
  std::vector<std::unique_ptr<DeclaredTensor>> dropped_tensors_ ABSL_GUARDED_BY(mu_);
  // With ClientOptions::metrics_port (else null): counted here, served by the endpoint.
  std::shared_ptr<internal::ClientMetrics> metrics_;
  std::unique_ptr<HttpEndpoint> metrics_endpoint_;
  uint64_t barrier_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status ClientImpl::Connect() {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  const auto num_shards = static_cast<uint32_t>(options_.servers.size());
  std::vector<std::shared_ptr<ShardChannel>> channels;
  std::vector<std::string> headers;
  for (uint32_t shard = 0; shard < num_shards; ++shard) {
    const std::string& address = options_.servers[shard];
    // The hello goes twice: as the greeting of every connection (the shard admits each on it)
    // and as the Hello call, which also makes this run the rank's current one and tells the
    // shard where its peers are.
    hetps::v1::HelloRequest hello =
        internal::MakeHello(options_, shard, num_shards, incarnation_, auth_token_);
    transport::ConnectOptions connect;
    connect.greeting = hello.SerializeAsString();
    for (const std::string& server : options_.servers) hello.add_servers(server);
    headers.push_back(hello.SerializeAsString());
    absl::StatusOr<std::unique_ptr<transport::Connection>> connection =
        transport_->Connect(address, deadline, connect);
    if (!connection.ok()) {
      return absl::Status(
          connection.status().code(),
          absl::StrFormat("shard %d (%s): %s", shard, address, connection.status().message()));
    }
    channels.push_back(
        std::make_shared<ShardChannel>(shard, address, *std::move(connection), timers_.get(),
                                       metrics_ != nullptr ? metrics_->retries : nullptr));
  }
  {
    absl::MutexLock lock(&mu_);
    channels_ = std::make_shared<const ChannelList>(channels);
  }
  HETPS_ASSIGN_OR_RETURN(
      std::vector<transport::Response> responses,
      internal::CallEach(*transport_, channels, hetps::v1::METHOD_HELLO, headers, {}, deadline));
  for (uint32_t shard = 0; shard < responses.size(); ++shard) {
    hetps::v1::HelloResponse hello;
    if (!hello.ParseFromString(responses[shard].header)) {
      return absl::InternalError(absl::StrFormat("shard %d: malformed hello response", shard));
    }
    if (hello.max_message_bytes() < options_.partition_bytes + kHeaderAllowance) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shard %d accepts messages of up to %d bytes, too few for partitions of %d bytes", shard,
          hello.max_message_bytes(), options_.partition_bytes));
    }
    channels[shard]->set_shard_incarnation(hello.shard_incarnation());
    if (shard > 0 && hello.resume_step() != resume_step_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "shard 0 restored step %d, shard %d step %d: restore every shard from one checkpoint",
          resume_step_, shard, hello.resume_step()));
    }
    resume_step_ = hello.resume_step();
    const uint32_t replicas = std::max(1u, hello.replicas());
    if (shard > 0 && replicas != replicas_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "shard 0 keeps %d copies of each partition, shard %d %d: start every shard with the "
          "same --replicas",
          replicas_, shard, replicas));
    }
    replicas_ = replicas;
    if (replicas > 1) channels[shard]->SetStandIn(channels[(shard + 1) % num_shards]);
    if (shard == 0) {
      // Shard 0 coordinates barriers: a restarted worker joins the job's next one.
      absl::MutexLock lock(&mu_);
      barrier_generation_ = hello.barriers_completed();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ClientImpl::ChannelList>> ClientImpl::Channels() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::FailedPreconditionError("the client is shut down");
  if (channels_ == nullptr) return absl::FailedPreconditionError("the client is not connected");
  return channels_;
}

absl::StatusOr<const DeclaredTensor*> ClientImpl::FindTensor(TensorId id) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(id);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrFormat("tensor %016x was not declared by this client", id));
  }
  return it->second.get();
}

absl::StatusOr<TensorId> ClientImpl::Declare(const TensorSpec& spec,
                                             absl::Span<const float> initial_values) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  if (spec.name.empty()) return absl::InvalidArgumentError("a tensor needs a name");
  if (!initial_values.empty() && initial_values.size() != spec.num_elements) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' has %d elements but %d initial values were given", spec.name,
                        spec.num_elements, initial_values.size()));
  }
  HETPS_ASSIGN_OR_RETURN(
      PartitionLayout layout,
      PartitionLayout::Create(spec.num_elements, options_.partition_bytes / sizeof(float)));
  const TensorId key = TensorKeyFromName(spec.name);
  hetps::v1::DeclareRequest request;
  request.set_worker_rank(options_.rank);
  hetps::v1::TensorDecl* decl = request.mutable_tensor();
  decl->set_name(spec.name);
  decl->set_key(key);
  decl->set_num_elements(spec.num_elements);
  decl->set_dtype(hetps::v1::DTYPE_FP32);
  decl->set_sync_mode(spec.sync == SyncMode::kAsp ? hetps::v1::SYNC_MODE_ASP
                                                  : hetps::v1::SYNC_MODE_BSP);
  decl->set_partition_elements(layout.max_partition_elements());
  *decl->mutable_init() = InitializerProto(spec.init, !initial_values.empty());
  decl->mutable_optimizer()->set_name(spec.optimizer.name);
  for (const auto& [name, value] : spec.optimizer.params) {
    (*decl->mutable_optimizer()->mutable_params())[name] = value;
  }

  // One declaration per shard; with initial values, as many as it takes to carry each shard's
  // partitions in messages of partition_bytes.
  std::vector<std::vector<Piece>> pieces(channels.size());
  if (!initial_values.empty()) {
    for (uint32_t p = 0; p < layout.num_partitions(); ++p) {
      const PartitionRange range = layout.partition(p);
      Piece piece{key, p, range.size, range.size * sizeof(float)};
      piece.gradient = initial_values.data() + range.begin;
      // Each copy of the partition takes the values (replicas 2: its primary and the next
      // shard, its backup).
      const auto num_shards = static_cast<uint32_t>(channels.size());
      const uint32_t owner = ShardOfPartition(key, p, num_shards);
      for (uint32_t copy = 0; copy < replicas_; ++copy) {
        pieces[(owner + copy) % num_shards].push_back(piece);
      }
    }
  }
  std::vector<PlannedMessage> messages = internal::PackMessages(pieces, options_.partition_bytes);
  for (uint32_t shard = 0; shard < channels.size(); ++shard) {
    if (pieces[shard].empty()) messages.push_back(PlannedMessage{shard, 0, {}});
  }
  std::vector<std::shared_ptr<ShardChannel>> targets;
  std::vector<std::string> headers;
  std::vector<transport::Payload> payloads;
  for (const PlannedMessage& message : messages) {
    request.clear_value_partitions();
    request.set_shard_incarnation(channels[message.shard]->shard_incarnation());
    transport::Payload payload;
    for (const Piece& piece : message.pieces) {
      request.add_value_partitions(piece.partition);
      payload.Append(GradientPayload(piece));
    }
    targets.push_back(channels[message.shard]);
    headers.push_back(request.SerializeAsString());
    payloads.push_back(std::move(payload));
  }
  HETPS_ASSIGN_OR_RETURN(
      std::vector<transport::Response> responses,
      internal::CallEach(*transport_, targets, hetps::v1::METHOD_DECLARE, headers,
                         std::move(payloads), absl::Now() + options_.call_timeout));
  std::vector<uint32_t> message_shards;
  for (const PlannedMessage& message : messages) message_shards.push_back(message.shard);
  HETPS_RETURN_IF_ERROR(CheckNoShardForgot(channels, request, message_shards, responses));
  for (uint32_t shard = 0; shard < channels.size(); ++shard) {
    if (ShareOfShard(layout, key, static_cast<uint32_t>(channels.size()), shard).partitions > 0) {
      channels[shard]->AddTensor(spec.name);
    }
  }
  auto declared = std::make_unique<DeclaredTensor>(DeclaredTensor{
      spec.name, spec.num_elements, layout, FormatOf(spec.push_dtype), FormatOf(spec.pull_dtype)});
  absl::MutexLock lock(&mu_);
  // The shards took this spec: one this client knew under the name was dropped meanwhile (by
  // another client), and is kept for the operations that may still read it.
  std::unique_ptr<DeclaredTensor>& entry = tensors_[key];
  if (entry != nullptr && SameDeclaration(*entry, *declared)) return key;
  if (entry != nullptr) dropped_tensors_.push_back(std::move(entry));
  entry = std::move(declared);
  return key;
}

absl::Status ClientImpl::CheckNoShardForgot(const ChannelList& channels,
                                            hetps::v1::DeclareRequest request,
                                            const std::vector<uint32_t>& message_shards,
                                            const std::vector<transport::Response>& responses) {
  std::vector<bool> created(channels.size(), false);
  std::vector<uint64_t> versions(channels.size(), 0);
  for (size_t i = 0; i < responses.size(); ++i) {
    hetps::v1::DeclareResponse response;
    if (!response.ParseFromString(responses[i].header)) {
      return absl::InternalError("malformed declare response");
    }
    const uint32_t shard = message_shards[i];
    created[shard] = created[shard] || (response.created() && response.owned_partitions() > 0);
    versions[shard] = std::max(versions[shard], response.max_version());
  }
  uint32_t ahead = 0;
  for (uint32_t shard = 0; shard < channels.size(); ++shard) {
    if (!created[shard] && versions[shard] > versions[ahead]) ahead = shard;
  }
  std::vector<std::shared_ptr<ShardChannel>> forgot;
  for (uint32_t shard = 0; shard < channels.size(); ++shard) {
    if (created[shard] && versions[ahead] > 0) forgot.push_back(channels[shard]);
  }
  if (forgot.empty()) return absl::OkStatus();
  std::vector<std::string> headers, names;
  request.clear_value_partitions();
  request.set_mark_lost(true);
  for (const auto& channel : forgot) {
    request.set_shard_incarnation(channel->shard_incarnation());
    headers.push_back(request.SerializeAsString());
    names.push_back(absl::StrFormat("%d (%s)", channel->index(), channel->address()));
  }
  // Answered with DataLoss by design: the mark is what counts.
  (void)internal::CallEach(*transport_, forgot, hetps::v1::METHOD_DECLARE, headers, {},
                           absl::Now() + options_.call_timeout);
  return absl::DataLossError(absl::StrFormat(
      "tensor '%s': shard %s held none of its partitions while shard %d (%s) had applied %d "
      "step(s) to its own: restarted without its state (no replica or checkpoint); the tensor "
      "is marked lost there",
      request.tensor().name(), absl::StrJoin(names, ", shard "), ahead, channels[ahead]->address(),
      versions[ahead]));
}

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
  for (PlannedMessage& message : messages) {
    // The items go into the header message directly, one the thread reuses (see
    // ReusedMessage): building it allocates nothing after the first operations.
    transport::Payload payload;
    auto add_items = [&](google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem>& items) {
      for (const Piece& piece : message.pieces) AddItem(method, piece, items.Add(), payload);
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
        std::move(sink));
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

absl::Status ClientImpl::SetHyperparameters(TensorId tensor, uint64_t from_step,
                                            const std::map<std::string, double>& changes) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  HETPS_RETURN_IF_ERROR(FindTensor(tensor).status());
  hetps::v1::SetOptimizerRequest request;
  request.set_worker_rank(options_.rank);
  request.set_tensor_key(tensor);
  request.set_from_version(from_step);
  for (const auto& [name, value] : changes) (*request.mutable_params())[name] = value;
  std::vector<std::string> headers;
  for (const auto& channel : channels) {
    request.set_shard_incarnation(channel->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  return internal::CallEach(*transport_, channels, hetps::v1::METHOD_SET_OPTIMIZER, headers, {},
                            absl::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<TensorState> ClientImpl::ReadStateOf(TensorId id, bool backup) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
  const auto num_shards = static_cast<uint32_t>(channel_list->size());
  const uint32_t num_partitions = tensor->layout.num_partitions();
  std::vector<std::shared_ptr<ShardChannel>> targets;
  std::vector<std::string> headers;
  for (uint32_t p = 0; p < num_partitions; ++p) {
    hetps::v1::ReadStateRequest request;
    request.set_worker_rank(options_.rank);
    request.set_tensor_key(id);
    request.set_partition(p);
    request.set_backup(backup);
    // A partition's backup is on the shard after its own.
    targets.push_back((*channel_list)[(ShardOfPartition(id, p, num_shards) + backup) % num_shards]);
    request.set_shard_incarnation(targets.back()->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  HETPS_ASSIGN_OR_RETURN(std::vector<transport::Response> responses,
                         internal::CallEach(*transport_, targets, hetps::v1::METHOD_READ_STATE,
                                            headers, {}, absl::Now() + options_.call_timeout));
  TensorState state;
  state.weights.resize(tensor->num_elements);
  for (uint32_t p = 0; p < num_partitions; ++p) {
    hetps::v1::ReadStateResponse header;
    if (!header.ParseFromString(responses[p].header)) {
      return absl::InternalError("malformed read-state response");
    }
    if (p == 0) {
      state.version = header.version();
      state.slots.assign(header.state_slots(), std::vector<float>(tensor->num_elements));
    } else if (header.version() != state.version || header.state_slots() != state.slots.size()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "tensor '%s': partition 0 is at version %d, partition %d at %d (a step was being "
          "applied): read between steps",
          tensor->name, state.version, p, header.version()));
    }
    const PartitionRange range = tensor->layout.partition(p);
    const size_t bytes = range.size * sizeof(float);
    if (responses[p].payload.size() != bytes * (1 + state.slots.size())) {
      return absl::InternalError(absl::StrFormat(
          "read-state response of %d bytes for partition %d of %d values and %d slots",
          responses[p].payload.size(), p, range.size, state.slots.size()));
    }
    responses[p].payload.CopyTo(
        0,
        transport::AsWritableBytes(absl::MakeSpan(state.weights).subspan(range.begin, range.size)));
    for (size_t slot = 0; slot < state.slots.size(); ++slot) {
      responses[p].payload.CopyTo(
          (slot + 1) * bytes,
          transport::AsWritableBytes(
              absl::MakeSpan(state.slots[slot]).subspan(range.begin, range.size)));
    }
  }
  return state;
}

absl::Status ClientImpl::WriteState(TensorId id, const TensorState& state) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
  bool sizes_match = state.weights.size() == tensor->num_elements;
  for (const std::vector<float>& slot : state.slots) {
    sizes_match = sizes_match && slot.size() == tensor->num_elements;
  }
  if (!sizes_match) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s' has %d elements: the weights and every state slot must have as many",
        tensor->name, tensor->num_elements));
  }
  const auto num_shards = static_cast<uint32_t>(channel_list->size());
  std::vector<std::shared_ptr<ShardChannel>> targets;
  std::vector<std::string> headers;
  std::vector<transport::Payload> payloads;
  for (uint32_t p = 0; p < tensor->layout.num_partitions(); ++p) {
    const PartitionRange range = tensor->layout.partition(p);
    hetps::v1::WriteStateRequest request;
    request.set_worker_rank(options_.rank);
    request.set_tensor_key(id);
    request.set_partition(p);
    request.set_version(state.version);
    request.set_state_slots(static_cast<uint32_t>(state.slots.size()));
    transport::Payload payload = transport::Payload::Borrow(
        transport::AsBytes(absl::MakeConstSpan(state.weights).subspan(range.begin, range.size)));
    for (const std::vector<float>& slot : state.slots) {
      payload.Append(transport::Payload::Borrow(
          transport::AsBytes(absl::MakeConstSpan(slot).subspan(range.begin, range.size))));
    }
    targets.push_back((*channel_list)[ShardOfPartition(id, p, num_shards)]);
    request.set_shard_incarnation(targets.back()->shard_incarnation());
    headers.push_back(request.SerializeAsString());
    payloads.push_back(std::move(payload));
  }
  return internal::CallEach(*transport_, targets, hetps::v1::METHOD_WRITE_STATE, headers,
                            std::move(payloads), absl::Now() + options_.call_timeout)
      .status();
}

absl::Status ClientImpl::Barrier() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  hetps::v1::BarrierRequest request;
  request.set_worker_rank(options_.rank);
  request.set_incarnation(incarnation_);
  request.set_shard_incarnation(channels[0]->shard_incarnation());
  {
    absl::MutexLock lock(&mu_);
    request.set_generation(barrier_generation_ + 1);
  }
  // Shard 0 coordinates barriers.
  HETPS_RETURN_IF_ERROR(internal::CallEach(*transport_, {channels[0]}, hetps::v1::METHOD_BARRIER,
                                           {request.SerializeAsString()}, {},
                                           absl::Now() + options_.call_timeout)
                            .status());
  // Only a barrier that completed counts: after a failure, calling again retries the same one.
  absl::MutexLock lock(&mu_);
  barrier_generation_ = std::max(barrier_generation_, request.generation());
  return absl::OkStatus();
}

absl::Status ClientImpl::Checkpoint(uint64_t step) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  hetps::v1::CheckpointRequest request;
  request.set_worker_rank(options_.rank);
  request.set_step(step);
  std::vector<std::string> headers;
  for (const auto& channel : *channel_list) {
    request.set_shard_incarnation(channel->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  return internal::CallEach(*transport_, *channel_list, hetps::v1::METHOD_CHECKPOINT, headers, {},
                            absl::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<DropResult> ClientImpl::Drop(absl::Span<const std::string> names) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  if (names.empty()) return absl::InvalidArgumentError("the drop names no tensor");
  hetps::v1::DropRequest request;
  for (const std::string& name : names) {
    if (name.empty()) return absl::InvalidArgumentError("a tensor needs a name");
    request.add_tensor_keys(TensorKeyFromName(name));
  }
  HETPS_ASSIGN_OR_RETURN(DropResult result,
                         internal::DropOnEach(*transport_, *channel_list, request,
                                              absl::Now() + options_.call_timeout));
  absl::MutexLock lock(&mu_);
  for (uint64_t key : request.tensor_keys()) {
    auto it = tensors_.find(key);
    if (it == tensors_.end()) continue;
    dropped_tensors_.push_back(std::move(it->second));
    tensors_.erase(it);
  }
  return result;
}

absl::StatusOr<DropResult> ClientImpl::DropAll() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  hetps::v1::DropRequest request;
  request.set_all(true);
  HETPS_ASSIGN_OR_RETURN(DropResult result,
                         internal::DropOnEach(*transport_, *channel_list, request,
                                              absl::Now() + options_.call_timeout));
  absl::MutexLock lock(&mu_);
  for (auto& [key, tensor] : tensors_) dropped_tensors_.push_back(std::move(tensor));
  tensors_.clear();
  return result;
}

absl::Status ClientImpl::StopShard(uint32_t shard) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  if (shard >= channel_list->size()) {
    return absl::OutOfRangeError(
        absl::StrFormat("shard %d: the cluster has %d shards", shard, channel_list->size()));
  }
  return internal::CallEach(*transport_, {(*channel_list)[shard]}, hetps::v1::METHOD_STOP,
                            {hetps::v1::StopRequest().SerializeAsString()}, {},
                            absl::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<std::vector<ShardStats>> ClientImpl::Stats() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  std::vector<std::string> headers(channels.size(), hetps::v1::StatsRequest().SerializeAsString());
  HETPS_ASSIGN_OR_RETURN(std::vector<transport::Response> responses,
                         internal::CallEach(*transport_, channels, hetps::v1::METHOD_STATS, headers,
                                            {}, absl::Now() + options_.call_timeout));
  std::vector<ShardStats> stats;
  for (const transport::Response& response : responses) {
    hetps::v1::StatsResponse proto;
    if (!proto.ParseFromString(response.header)) {
      return absl::InternalError("malformed stats response");
    }
    stats.push_back(StatsFromProto(proto));
  }
  return stats;
}

void ClientImpl::Shutdown() {
  std::shared_ptr<const ChannelList> channels;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    channels = std::move(channels_);
  }
  if (channels == nullptr) return;  // never connected
  for (const auto& channel : *channels) channel->Shutdown();
}

}  // namespace

namespace internal {

std::shared_ptr<ClientMetrics> MetricsOf(Client* client) {
  auto* impl = dynamic_cast<ClientImpl*>(client);
  return impl != nullptr ? impl->metrics() : nullptr;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  ConfigureRuntime();
  HETPS_RETURN_IF_ERROR(ValidateOptions(options));
  std::shared_ptr<transport::Transport> transport = options.transport_instance;
  if (transport == nullptr) {
    transport::TransportOptions transport_options;
    transport_options.max_message_bytes = options.max_message_bytes;
    transport_options.ucx_net_devices = options.ucx_net_devices;
    transport_options.ucx_busy_poll = options.ucx_busy_poll;
    transport_options.tls_ca_file = options.tls_ca_file;
    transport_options.tls_cert_file = options.tls_cert_file;
    transport_options.tls_key_file = options.tls_key_file;
    HETPS_ASSIGN_OR_RETURN(transport,
                           transport::CreateTransport(options.transport, transport_options));
  }
  HETPS_ASSIGN_OR_RETURN(std::string auth_token, LoadAuthToken(options.auth_token_file));
  auto client = std::make_unique<ClientImpl>(options, std::move(transport), std::move(auth_token));
  if (options.metrics_port >= 0) HETPS_RETURN_IF_ERROR(client->StartMetrics());
  HETPS_RETURN_IF_ERROR(client->Connect());
  return client;
}

}  // namespace hetps
