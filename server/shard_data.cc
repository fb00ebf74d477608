// The data path of a shard: push, pull and push-pull of partitions.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/reused_message.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

// The version a push-pull returns: BSP waits for the step it pushed to be applied; ASP returns
// the weights right after its own push was applied.
uint64_t PushPullVersion(const Tensor& tensor, uint64_t step) {
  return tensor.decl.sync_mode() == hetps::v1::SYNC_MODE_BSP ? step + 1 : 0;
}

}  // namespace

absl::StatusOr<std::pair<TensorRef, Partition*>> Shard::LocatePartition(uint64_t tensor_key,
                                                                        uint32_t index,
                                                                        bool backup) const {
  TensorRef tensor = table_.Find(tensor_key);
  if (tensor == nullptr) {
    // A shard that rejoined has not seen the job's declarations yet: a partition it keeps a
    // copy of (its own, or replicated, the previous shard's) is served by another shard, where
    // the worker retries it.
    const uint32_t me = options_.shard_index;
    const uint32_t group = ShardOfPartition(tensor_key, index, options_.num_shards);
    const std::vector<uint32_t> copied = CopiedGroups();
    const bool keeps_copy = std::find(copied.begin(), copied.end(), group) != copied.end();
    if (const uint32_t server = group_server_[group].load(); keeps_copy && server != me) {
      return absl::UnavailableError(
          absl::StrFormat("partition %d of tensor %016x is served by shard %d, not this shard %d",
                          index, tensor_key, server, me));
    }
    return absl::NotFoundError(absl::StrFormat("no tensor with key %016x is declared", tensor_key));
  }
  HETPS_RETURN_IF_ERROR(CheckNotLost(*tensor));
  const std::string& name = tensor->decl.name();
  if (index >= tensor->layout.num_partitions()) {
    return absl::OutOfRangeError(absl::StrFormat("tensor '%s' has %d partitions, not %d", name,
                                                 tensor->layout.num_partitions(), index + 1));
  }
  Partition* partition = tensor->partitions[index].get();
  const uint32_t home = ShardOfPartition(tensor_key, index, options_.num_shards);
  // Unavailable, which workers retry at the partition's other copy: it is served there, or
  // will be once that shard has taken it over.
  if (partition != nullptr && partition->is_backup() && !backup) {
    return absl::UnavailableError(absl::StrFormat(
        "partition %d of tensor '%s' is served by shard %d; this shard %d keeps its backup", index,
        name, group_server_[home].load(), options_.shard_index));
  }
  // Taken over by another shard while this one still ran (etcd names the server): its copy
  // here misses what the other acknowledges.
  if (const uint32_t server = group_server_[home].load();
      partition != nullptr && !backup && server != options_.shard_index) {
    return absl::UnavailableError(absl::StrFormat(
        "partition %d of tensor '%s' is served by shard %d since a takeover, not this shard %d",
        index, name, server, options_.shard_index));
  }
  if (partition == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d of tensor '%s' belongs to shard %d, not to this shard %d", index, name,
        ShardOfPartition(tensor_key, index, options_.num_shards), options_.shard_index));
  }
  return std::make_pair(std::move(tensor), partition);
}

absl::StatusOr<std::vector<Shard::DataItem>> Shard::ResolveItems(
    const google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem>& items,
    const transport::Payload* gradients, bool backups) const {
  if (items.empty()) return absl::InvalidArgumentError("the request lists no partitions");
  std::vector<DataItem> resolved;
  resolved.reserve(items.size());
  // Most requests list a few partitions: compare those with each other, hash the rest.
  constexpr int kCompareUpTo = 8;
  absl::flat_hash_set<std::pair<uint64_t, uint32_t>> seen;
  auto listed_before = [&](const hetps::v1::PartitionItem& item) {
    if (items.size() > kCompareUpTo)
      return !seen.emplace(item.tensor_key(), item.partition()).second;
    return std::any_of(resolved.begin(), resolved.end(), [&](const DataItem& earlier) {
      return earlier.meta.tensor_key() == item.tensor_key() &&
             earlier.meta.partition() == item.partition();
    });
  };
  uint64_t offset = 0;
  for (const hetps::v1::PartitionItem& item : items) {
    HETPS_ASSIGN_OR_RETURN(auto located,
                           LocatePartition(item.tensor_key(), item.partition(), backups));
    auto& [tensor, partition] = located;
    const std::string& name = tensor->decl.name();
    absl::StatusOr<FloatFormat> format = FormatOf(item.dtype());
    absl::StatusOr<FloatFormat> pull_format =
        item.pull_dtype() == hetps::v1::DTYPE_UNSPECIFIED ? format : FormatOf(item.pull_dtype());
    for (const auto* checked : {&format, &pull_format}) {
      if (!checked->ok()) {
        return absl::InvalidArgumentError(absl::StrFormat("partition %d of tensor '%s': %s",
                                                          item.partition(), name,
                                                          checked->status().message()));
      }
    }
    if (listed_before(item)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("partition %d of tensor '%s' is listed twice", item.partition(), name));
    }
    DataItem& out = resolved.emplace_back();
    out.partition = partition;
    out.tensor = std::move(tensor);  // `name` stays valid: the item holds the tensor
    out.meta = item;
    out.format = *format;
    out.pull_format = *pull_format;
    // A response names the type its bytes are in.
    out.meta.set_dtype(item.pull_dtype() == hetps::v1::DTYPE_UNSPECIFIED ? item.dtype()
                                                                         : item.pull_dtype());
    out.meta.clear_pull_dtype();
    if (gradients != nullptr) {
      const uint64_t bytes = partition->num_elements() * BytesPerElement(*format);
      if (item.num_bytes() != bytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "partition %d of tensor '%s' takes %d bytes of that dtype, the push carries %d",
            item.partition(), name, bytes, item.num_bytes()));
      }
      if (item.num_bytes() > gradients->size() - offset) {
        return absl::InvalidArgumentError(
            absl::StrFormat("the payload of %d bytes ends before partition %d of tensor '%s'",
                            gradients->size(), item.partition(), name));
      }
      out.gradient = gradients->Subrange(offset, item.num_bytes());
      offset += item.num_bytes();
    }
  }
  if (gradients != nullptr && offset != gradients->size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the payload has %d bytes but the items account for %d", gradients->size(), offset));
  }
  return resolved;
}

absl::StatusOr<std::vector<Shard::DataItem>> Shard::ParseDataRequest(
    const transport::Request& request, DataCall* call) const {
  if (request.method == hetps::v1::METHOD_PULL) {
    ReusedMessage<hetps::v1::PullRequest> pull;
    HETPS_RETURN_IF_ERROR(ParseHeaderInto(request.header, *pull));
    call->pull = true;
    call->origin.rank = pull->worker_rank();
    call->min_version = pull->min_version();
    HETPS_RETURN_IF_ERROR(CheckRank(call->origin.rank));
    HETPS_RETURN_IF_ERROR(CheckStateRun(pull->shard_incarnation()));
    if (!request.payload.empty()) return absl::InvalidArgumentError("a pull carries no payload");
    return ResolveItems(pull->items(), nullptr);
  }
  ReusedMessage<hetps::v1::PushRequest> push;
  HETPS_RETURN_IF_ERROR(ParseHeaderInto(request.header, *push));
  call->push = true;
  call->pull = request.method == hetps::v1::METHOD_PUSH_PULL;
  call->origin.rank = push->worker_rank();
  call->origin.incarnation = push->incarnation();
  call->origin.step = push->step();
  call->origin.sequence = push->sequence();
  HETPS_RETURN_IF_ERROR(CheckRun(call->origin.rank, call->origin.incarnation));
  HETPS_RETURN_IF_ERROR(CheckStateRun(push->shard_incarnation()));
  HETPS_ASSIGN_OR_RETURN(std::vector<DataItem> items,
                         ResolveItems(push->items(), &request.payload));
  for (const DataItem& item : items) {
    if (item.tensor->decl.sync_mode() != hetps::v1::SYNC_MODE_BSP) continue;
    // Versions only grow, so a step accepted here is still within the window on the owner.
    const uint64_t version = item.partition->version();
    if (call->origin.step >= version + options_.max_pending_steps) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "step %d of tensor '%s' is too far ahead: partition %d is at version %d and at most "
          "%d steps may be pending",
          call->origin.step, item.tensor->decl.name(), item.meta.partition(), version,
          options_.max_pending_steps));
    }
  }
  return items;
}

void Shard::Data(transport::Request request, transport::ReplyCallback reply) {
  ShardMetrics::Add(metrics_->data_requests, 1);
  ShardMetrics::Add(metrics_->payload_bytes_received, request.payload.size());
  DataCall call;
  absl::StatusOr<std::vector<DataItem>> items = ParseDataRequest(request, &call);
  if (!items.ok()) {
    reply(items.status());
    return;
  }
  ShardMetrics::Add(call.push ? metrics_->push_items : metrics_->pull_items, items->size());
  if (call.push && call.pull) ShardMetrics::Add(metrics_->pull_items, items->size());

  // The items' descriptions go to the response; the tasks below need the rest.
  std::vector<hetps::v1::PartitionItem> metas;
  metas.reserve(items->size());
  for (DataItem& item : *items) metas.push_back(std::move(item.meta));
  auto pending =
      std::make_shared<PendingRequest>(std::move(metas), call.pull, std::move(reply), metrics_);

  // One task per owner thread, carrying that thread's items in request order. Requests name
  // a few partitions, so no allocation here for the common case.
  using Slots = absl::InlinedVector<size_t, 4>;
  absl::InlinedVector<std::pair<size_t, Slots>, 2> by_owner;
  uint64_t elements = 0;
  for (size_t slot = 0; slot < items->size(); ++slot) {
    const size_t owner = (*items)[slot].partition->owner();
    auto it = std::find_if(by_owner.begin(), by_owner.end(),
                           [owner](const auto& entry) { return entry.first == owner; });
    if (it == by_owner.end()) it = by_owner.insert(by_owner.end(), {owner, Slots()});
    it->second.push_back(slot);
    elements += (*items)[slot].partition->num_elements();
  }
  // A small request is handled on the receiving thread when its owners are idle: waking an
  // owner thread would cost more than the update itself.
  const bool run_here = elements * sizeof(float) <= kRunHereBytes;
  if (call.pull) {
    for (DataItem& item : *items) {
      item.wanted_version =
          call.push ? PushPullVersion(*item.tensor, call.origin.step) : call.min_version;
    }
  }
  auto shared_items = std::make_shared<std::vector<DataItem>>(*std::move(items));
  // A pull may wait for a later version, a replicated push for its backup; the deadline counts
  // from when it has to.
  if (call.pull || replication_on_) {
    pending->SetDeadline(timers_.get(), AnswerBy(request.deadline, hetps::Now()), options_.max_wait,
                         &Shard::ExplainWait, this, shared_items, &waiting_, request.connection);
  }
  for (auto& [owner, owner_slots] : by_owner) {
    auto task = [pending, shared_items, call, metrics = metrics_.get(),
                 slots = std::move(owner_slots)]() mutable {
      for (size_t slot : slots) {
        DataItem& item = (*shared_items)[slot];
        if (call.push) {
          absl::StatusOr<uint64_t> pushed =
              item.partition->Push(call.origin, item.format, std::move(item.gradient));
          if (!pushed.ok()) {
            ShardMetrics::Add(metrics->pushes_refused, 1);
            pending->Fail(absl::Status(pushed.status().code(),
                                       absl::StrFormat("tensor '%s', %s", item.tensor->decl.name(),
                                                       pushed.status().message())));
            return;
          }
          if (!call.pull) item.partition->AckWhenReplicated(*pushed, pending, slot);
        }
        if (call.pull) item.partition->Pull(item.wanted_version, item.pull_format, pending, slot);
      }
    };
    const bool posted = run_here
                            ? owners_[owner]->RunHereOrPost(std::move(task))
                            : owners_[owner]->Post(absl::AnyInvocable<void()>(std::move(task)));
    if (!posted) {
      pending->Fail(absl::UnavailableError(
          absl::StrFormat("shard %d is shutting down", options_.shard_index)));
      return;
    }
  }
  if (!run_here) LetOwnersRun();
}

void Shard::ExplainWait(void* shard, std::shared_ptr<PendingRequest> request,
                        const std::shared_ptr<void>& context) {
  Shard* self = static_cast<Shard*>(shard);
  auto items = std::static_pointer_cast<const std::vector<DataItem>>(context);
  struct Explanation {
    absl::Mutex mu;
    size_t owners_left ABSL_GUARDED_BY(mu) = 0;
    std::vector<std::string> reasons ABSL_GUARDED_BY(mu);
  };
  auto explanation = std::make_shared<Explanation>();
  std::vector<size_t> owners;
  for (const DataItem& item : *items) {
    if (std::find(owners.begin(), owners.end(), item.partition->owner()) == owners.end()) {
      owners.push_back(item.partition->owner());
    }
  }
  {
    absl::MutexLock lock(&explanation->mu);
    explanation->owners_left = owners.size();
  }
  // The last owner to report answers the request.
  auto report = [self, request, explanation,
                 total = items->size()](std::vector<std::string> reasons) {
    std::vector<std::string> all;
    {
      absl::MutexLock lock(&explanation->mu);
      for (std::string& reason : reasons) explanation->reasons.push_back(std::move(reason));
      if (--explanation->owners_left > 0) return;
      all = std::move(explanation->reasons);
    }
    if (absl::Status leased = self->CheckLease(); !leased.ok())
      all.insert(all.begin(), std::string(leased.message()));
    const std::string why =
        all.empty() ? absl::StrFormat("%d of %d partitions did not reach the wanted version",
                                      request->remaining(), total)
                    : absl::StrJoin(all, "; ");
    LogWarning("shard %d: a pull ran out of time: %s", self->options_.shard_index, why);
    request->Fail(absl::DeadlineExceededError(absl::StrFormat(
        "shard %d waited until the deadline: %s (is a worker missing, or started with another "
        "rank?)",
        self->options_.shard_index, why)));
  };
  for (size_t owner : owners) {
    auto describe = [items, owner, report]() mutable {
      std::vector<std::string> reasons;
      for (const DataItem& item : *items) {
        if (item.partition->owner() != owner) continue;
        std::string why = item.partition->DescribeWait(item.wanted_version);
        if (!why.empty()) {
          reasons.push_back(absl::StrFormat("tensor '%s', %s", item.tensor->decl.name(), why));
        }
      }
      report(std::move(reasons));
    };
    if (!self->owners_[owner]->Post(absl::AnyInvocable<void()>(describe))) report({});
  }
}

}  // namespace hetps::server
