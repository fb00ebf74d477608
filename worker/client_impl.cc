// The worker client behind worker/client.h (worker/internal/client_impl.h): connecting,
// declaring, shutting down, and Client::Create.
#include "worker/internal/client_impl.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth_token.h"
#include "common/clock.h"
#include "common/partitioning.h"
#include "common/runtime.h"
#include "common/status_macros.h"
#include "proto/ps.pb.h"
#include "worker/client.h"
#include "worker/internal/rpc.h"
#include "worker/internal/wire_format.h"

namespace hetps::internal {
namespace {

bool SameDeclaration(const DeclaredTensor& a, const DeclaredTensor& b) {
  return a.num_elements == b.num_elements &&
         a.layout.max_partition_elements() == b.layout.max_partition_elements() &&
         a.push_format == b.push_format && a.pull_format == b.pull_format;
}

}  // namespace

absl::Status ClientImpl::Connect() {
  const absl::Time deadline = hetps::Now() + options_.connect_timeout;
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
      payload.Append(GradientPayload(piece, *conversion_buffers_));
    }
    targets.push_back(channels[message.shard]);
    headers.push_back(request.SerializeAsString());
    payloads.push_back(std::move(payload));
  }
  HETPS_ASSIGN_OR_RETURN(
      std::vector<transport::Response> responses,
      internal::CallEach(*transport_, targets, hetps::v1::METHOD_DECLARE, headers,
                         std::move(payloads), hetps::Now() + options_.call_timeout));
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
                           hetps::Now() + options_.call_timeout);
  return absl::DataLossError(absl::StrFormat(
      "tensor '%s': shard %s held none of its partitions while shard %d (%s) had applied %d "
      "step(s) to its own: restarted without its state (no replica or checkpoint); the tensor "
      "is marked lost there",
      request.tensor().name(), absl::StrJoin(names, ", shard "), ahead, channels[ahead]->address(),
      versions[ahead]));
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

std::shared_ptr<ClientMetrics> MetricsOf(Client* client) {
  auto* impl = dynamic_cast<ClientImpl*>(client);
  return impl != nullptr ? impl->metrics() : nullptr;
}

}  // namespace hetps::internal

namespace hetps {

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  ConfigureRuntime();
  HETPS_RETURN_IF_ERROR(internal::ValidateOptions(options));
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
  auto client =
      std::make_unique<internal::ClientImpl>(options, std::move(transport), std::move(auth_token));
  if (options.metrics_port >= 0) HETPS_RETURN_IF_ERROR(client->StartMetrics());
  HETPS_RETURN_IF_ERROR(client->Connect());
  return client;
}

}  // namespace hetps