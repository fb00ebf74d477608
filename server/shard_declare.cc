// A shard's tensors come into being: declarations checked against what the shard holds, tensors
// created with their partitions (this shard's own and, replicated, the previous shard's copies),
// and the memory they take reserved against the shard's cap.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/partitioning.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "server/initializer.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

std::map<std::string, double> ParamsOf(const hetps::v1::OptimizerConfig& config) {
  return {config.params().begin(), config.params().end()};
}

// How two declarations of one tensor differ, or "" if they agree. Initial values carried in the
// payload are not compared: the first declaration's are used.
std::string DescribeMismatch(const hetps::v1::TensorDecl& have, const hetps::v1::TensorDecl& got) {
  if (have.name() != got.name()) {
    return absl::StrFormat("key %016x is taken by tensor '%s'", have.key(), have.name());
  }
  if (have.num_elements() != got.num_elements()) {
    return absl::StrFormat("it has %d elements, not %d", have.num_elements(), got.num_elements());
  }
  if (have.dtype() != got.dtype()) return "its dtype differs";
  if (have.sync_mode() != got.sync_mode()) return "its sync mode differs";
  if (have.partition_elements() != got.partition_elements()) {
    return absl::StrFormat("it is cut into partitions of %d elements, not %d",
                           have.partition_elements(), got.partition_elements());
  }
  if (have.optimizer().name() != got.optimizer().name() ||
      ParamsOf(have.optimizer()) != ParamsOf(got.optimizer())) {
    return "its optimizer or hyperparameters differ";
  }
  const auto& a = have.init();
  const auto& b = got.init();
  if (a.kind() != b.kind() || a.a() != b.a() || a.b() != b.b() || a.seed() != b.seed()) {
    return "its initializer differs";
  }
  return "";
}

}  // namespace

void Shard::Declare(transport::Request request, transport::ReplyCallback reply) {
  // Creating a tensor allocates and fills it (seconds for gigabytes): on a thread of its own,
  // so that the transport threads keep serving the other workers meanwhile.
  auto once = std::make_shared<transport::ReplyCallback>(std::move(reply));
  const bool posted = declarer_->Post([this, request = std::move(request), once]() mutable {
    DeclareNow(std::move(request), std::move(*once));
  });
  if (!posted) {
    (*once)(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
  }
}

void Shard::DeclareNow(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::DeclareRequest> declare = CheckDeclaration(request);
  if (!declare.ok()) {
    reply(declare.status());
    return;
  }
  const hetps::v1::TensorDecl& decl = declare->tensor();
  TensorRef tensor = table_.Find(decl.key());
  bool created = false;
  if (tensor == nullptr) {
    absl::StatusOr<std::pair<TensorRef, bool>> inserted = CreateTensor(decl);
    if (!inserted.ok()) {
      reply(inserted.status());
      return;
    }
    std::tie(tensor, created) = *inserted;
  }
  if (!created) {
    if (std::string mismatch = DescribeMismatch(tensor->decl, decl); !mismatch.empty()) {
      reply(absl::AlreadyExistsError(absl::StrFormat(
          "tensor '%s' is already declared differently: %s", decl.name(), mismatch)));
      return;
    }
  }
  if (declare->mark_lost()) tensor->lost.store(true, std::memory_order_relaxed);
  if (absl::Status lost = CheckNotLost(*tensor); !lost.ok()) {
    reply(lost);
    return;
  }
  absl::StatusOr<std::vector<DataItem>> values =
      ResolveInitialValues(*tensor, *declare, request.payload);
  if (!values.ok()) {
    reply(values.status());
    return;
  }
  hetps::v1::DeclareResponse response;
  response.set_created(created);
  response.set_num_partitions(tensor->layout.num_partitions());
  uint32_t owned = 0;
  uint64_t max_version = 0;
  for (const auto& partition : tensor->partitions) {
    if (partition == nullptr || partition->is_backup()) continue;
    ++owned;
    max_version = std::max(max_version, partition->version());
  }
  response.set_owned_partitions(owned);
  response.set_max_version(max_version);
  if (values->empty()) {
    reply(HeaderResponse(response));
    return;
  }
  // The values are written by the partitions' owner threads; the reply waits for them.
  std::vector<hetps::v1::PartitionItem> metas(values->size());
  auto pending =
      std::make_shared<PendingRequest>(std::move(metas), /*returns_weights=*/false,
                                       std::move(reply), metrics_, response.SerializeAsString());
  for (size_t slot = 0; slot < values->size(); ++slot) {
    DataItem& item = (*values)[slot];
    const bool posted = owners_[item.partition->owner()]->Post(
        [pending, slot, tensor = item.tensor, partition = item.partition,
         payload = std::move(item.gradient)] {
          partition->SetInitialValues(payload);
          pending->CompleteItem(slot);
        });
    if (!posted) {
      pending->Fail(absl::UnavailableError("the shard is shutting down"));
      return;
    }
  }
}

absl::StatusOr<hetps::v1::DeclareRequest> Shard::CheckDeclaration(
    const transport::Request& request) const {
  HETPS_ASSIGN_OR_RETURN(auto declare, ParseHeader<hetps::v1::DeclareRequest>(request.header));
  HETPS_RETURN_IF_ERROR(CheckRank(declare.worker_rank()));
  HETPS_RETURN_IF_ERROR(CheckStateRun(declare.shard_incarnation()));
  const hetps::v1::TensorDecl& decl = declare.tensor();
  HETPS_RETURN_IF_ERROR(CheckTensorDecl(decl));
  if (!declare.value_partitions().empty() && decl.init().kind() != hetps::v1::INIT_KIND_VALUES) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': initial values sent, but its initializer is not 'values'", decl.name()));
  }
  return declare;
}

absl::Status Shard::CheckTensorDecl(const hetps::v1::TensorDecl& decl) {
  if (decl.name().empty()) return absl::InvalidArgumentError("a tensor needs a name");
  if (decl.key() != TensorKeyFromName(decl.name())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key %016x does not match tensor name '%s'", decl.key(), decl.name()));
  }
  if (decl.dtype() != hetps::v1::DTYPE_FP32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': unsupported dtype %d", decl.name(), decl.dtype()));
  }
  if (decl.sync_mode() != hetps::v1::SYNC_MODE_BSP &&
      decl.sync_mode() != hetps::v1::SYNC_MODE_ASP) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': unknown sync mode %d", decl.name(), decl.sync_mode()));
  }
  return ValidateInitializer(decl.init());
}

absl::StatusOr<std::vector<Shard::DataItem>> Shard::ResolveInitialValues(
    const Tensor& tensor, const hetps::v1::DeclareRequest& declare,
    const transport::Payload& values) const {
  if (declare.value_partitions().empty()) {
    if (!values.empty()) {
      return absl::InvalidArgumentError("a declaration without value partitions has a payload");
    }
    return std::vector<DataItem>();
  }
  // The values are checked like a push of those partitions.
  google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem> items;
  for (uint32_t partition : declare.value_partitions()) {
    hetps::v1::PartitionItem* item = items.Add();
    item->set_tensor_key(tensor.decl.key());
    item->set_partition(partition);
    item->set_dtype(tensor.decl.dtype());
    item->set_num_bytes(partition < tensor.layout.num_partitions()
                            ? tensor.layout.partition(partition).size * sizeof(float)
                            : 0);
  }
  return ResolveItems(items, &values, /*backups=*/true);
}

absl::StatusOr<std::pair<TensorRef, bool>> Shard::CreateTensor(const hetps::v1::TensorDecl& decl,
                                                               CopiedValues copied) {
  HETPS_ASSIGN_OR_RETURN(PartitionLayout layout,
                         PartitionLayout::Create(decl.num_elements(), decl.partition_elements()));
  HETPS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                         CreateOptimizer(decl.optimizer().name(), ParamsOf(decl.optimizer())));
  HETPS_ASSIGN_OR_RETURN(const uint64_t reserved, ReserveMemory(decl, layout, *optimizer));
  absl::StatusOr<std::unique_ptr<Tensor>> built =
      BuildTensor(decl, layout, std::move(optimizer), copied);
  if (!built.ok()) {
    ReleaseMemory(reserved);
    return built.status();
  }
  (*built)->reserved_bytes = reserved;
  std::pair<TensorRef, bool> inserted = table_.Insert(*std::move(built));
  if (!inserted.second) {
    ReleaseMemory(reserved);  // another worker's declaration came first
    return inserted;
  }
  {
    absl::MutexLock lock(&dropped_mu_);
    dropped_keys_.erase(decl.key());
  }
  if (decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) {
    for (uint32_t group : CopiedGroups()) {
      bsp_partitions_[group].fetch_add(
          ShareOfShard(layout, decl.key(), options_.num_shards, group).partitions);
    }
  }
  return inserted;
}

absl::StatusOr<std::unique_ptr<Tensor>> Shard::BuildTensor(const hetps::v1::TensorDecl& decl,
                                                           const PartitionLayout& layout,
                                                           std::shared_ptr<Optimizer> optimizer,
                                                           CopiedValues copied) {
  auto tensor = std::make_unique<Tensor>(decl, layout);
  {
    absl::MutexLock lock(&tensor->schedule_mu);
    tensor->schedule[0] = optimizer->params();
  }
  tensor->optimizer = std::move(optimizer);
  tensor->partitions.resize(layout.num_partitions());
  // This shard's own partitions, and with replication the copies of the previous shard's:
  // each a backup unless this shard serves that group now.
  const uint32_t me = options_.shard_index;
  auto build = [&](uint32_t group) {
    const bool backup = group_server_[group].load() != me;
    return BuildPartitions(
        *tensor, group, backup,
        copied == CopiedValues::kAll || (copied == CopiedValues::kBackups && backup));
  };
  HETPS_RETURN_IF_ERROR(build(me));
  if (replication_on_) {
    HETPS_RETURN_IF_ERROR(build((me + options_.num_shards - 1) % options_.num_shards));
  }
  return tensor;
}

absl::Status Shard::BuildPartitions(Tensor& tensor, uint32_t shard, bool backup, bool copied) {
  const hetps::v1::TensorDecl& decl = tensor.decl;
  const PartitionLayout& layout = tensor.layout;
  const ShardShare share = ShareOfShard(layout, decl.key(), options_.num_shards, shard);
  for (uint32_t i = 0; i < share.partitions; ++i) {
    const uint32_t p = share.first_partition + i * options_.num_shards;
    const PartitionRange range = layout.partition(p);
    HETPS_ASSIGN_OR_RETURN(
        AlignedBuffer weights,
        InitialWeights(copied ? hetps::v1::Initializer() : decl.init(), range, kernels_.get()));
    Partition::Config config;
    config.tensor_key = decl.key();
    config.backup = backup;
    config.index = p;
    config.range = range;
    config.sync_mode = decl.sync_mode();
    config.num_workers = options_.num_workers;
    config.optimizer = tensor.optimizer;
    config.owner = next_owner_.fetch_add(1) % owners_.size();
    config.kernel_pool = kernels_.get();
    if (metrics_->timed) config.apply_duration = &metrics_->apply_duration;
    config.awaits_values = decl.init().kind() == hetps::v1::INIT_KIND_VALUES;
    if (copied) config.deferred_init = &decl.init();
    if (replication_on_) {
      // Backups too: one taken over replicates to a shard that rejoins.
      // A partition changes only while something holds its tensor (shared_from_this works).
      config.replicate = [this, owner = &tensor](Partition& partition,
                                                 std::vector<ReplicatedChange> changes) {
        SendToBackup(owner->shared_from_this(), partition, std::move(changes));
      };
      config.replicating = replica_target_[shard].load() >= 0;
    }
    // Backups too: one taken over writes its group's part (Partition::CheckpointIfDue).
    CheckpointWriter* writer = checkpoints_.empty() ? nullptr : checkpoints_[shard].get();
    if (writer != nullptr && decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) {
      config.checkpoint_every = options_.checkpoint_every;
      config.checkpoint = [writer, key = decl.key()](PartitionCopy copy) {
        writer->Offer(key, std::move(copy));
      };
      config.periodic_wanted = [writer](uint64_t version) {
        return writer->TakesPeriodic(version);
      };
    }
    HETPS_ASSIGN_OR_RETURN(tensor.partitions[p], Partition::Create(config, std::move(weights)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Shard::ReserveMemory(const hetps::v1::TensorDecl& decl,
                                              const PartitionLayout& layout,
                                              const Optimizer& optimizer) {
  const ShardShare share =
      ShareOfShard(layout, decl.key(), options_.num_shards, options_.shard_index);
  // Weights, the optimizer's state and the buffer the step's gradients are summed into (with
  // checkpoints, a second weights buffer for copy on write; replicated, a buffer for the sum
  // sent to the backup); each partition's own bookkeeping; the tensor's table of partitions.
  // The backup copies take weights, state and a buffer for the step they apply. Values come
  // from the wire: every product is checked, so that a huge one cannot wrap around to a small
  // one.
  const uint64_t buffers = 2 + optimizer.state_slots() +
                           (!checkpoints_.empty() && decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) +
                           replication_on_;
  const ShardShare backups =
      replication_on_
          ? ShareOfShard(layout, decl.key(), options_.num_shards,
                         (options_.shard_index + options_.num_shards - 1) % options_.num_shards)
          : ShardShare();
  uint64_t bytes = 0, backup_bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(share.elements, sizeof(float) * buffers, &bytes) ||
      __builtin_mul_overflow(backups.elements, sizeof(float) * (2 + optimizer.state_slots()),
                             &backup_bytes) ||
      __builtin_add_overflow(bytes, backup_bytes, &bytes) ||
      __builtin_add_overflow(bytes,
                             uint64_t{share.partitions + backups.partitions} *
                                 Partition::BookkeepingBytes(options_.num_workers),
                             &bytes) ||
      __builtin_add_overflow(bytes, uint64_t{layout.num_partitions()} * sizeof(void*), &bytes);
  absl::MutexLock lock(&memory_mu_);
  if (overflow || bytes > options_.max_memory_bytes - reserved_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "tensor '%s' needs %s bytes on shard %d, which holds %d of its %d (--max_memory_bytes)",
        decl.name(), overflow ? "more than 2^64" : absl::StrCat(bytes), options_.shard_index,
        reserved_bytes_, options_.max_memory_bytes));
  }
  reserved_bytes_ += bytes;
  return bytes;
}

void Shard::ReleaseMemory(uint64_t bytes) {
  absl::MutexLock lock(&memory_mu_);
  reserved_bytes_ -= bytes;
}

}  // namespace hetps::server
