// The shard's side of checkpoints (server/checkpoint.h): what a part says of each tensor, and
// restoring a part at start.
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "server/shard.h"

namespace hetps::server {

uint64_t Shard::last_checkpoint() const {
  return checkpoints_ == nullptr ? 0 : checkpoints_->last_committed();
}

std::map<uint64_t, hetps::v1::TensorImage> Shard::CheckpointCatalog() const {
  std::map<uint64_t, hetps::v1::TensorImage> catalog;
  table_.ForEach([&](const Tensor& tensor) {
    if (tensor.decl.sync_mode() != hetps::v1::SYNC_MODE_BSP) return;
    hetps::v1::TensorImage& image = catalog[tensor.decl.key()];
    *image.mutable_decl() = tensor.decl;
    absl::MutexLock lock(&tensor.schedule_mu);
    for (const auto& [version, params] : tensor.schedule) {
      hetps::v1::ScheduleEntry* entry = image.add_schedule();
      entry->set_from_version(version);
      for (const auto& [name, value] : params) (*entry->mutable_params())[name] = value;
    }
  });
  return catalog;
}

absl::Status Shard::Restore(const CheckpointPartData& part) {
  for (const hetps::v1::TensorImage& image : part.header.tensors()) {
    const hetps::v1::TensorDecl& decl = image.decl();
    auto refuse = [&](const std::string& why) {
      return absl::DataLossError(
          absl::StrFormat("%s: tensor '%s': %s", part.path, decl.name(), why));
    };
    absl::StatusOr<std::pair<const Tensor*, bool>> created = CreateTensor(decl);
    if (!created.ok()) return refuse(std::string(created.status().message()));
    const Tensor& tensor = *created->first;
    // The hyperparameter schedule first: a partition takes changes only up to its version.
    for (const hetps::v1::ScheduleEntry& entry : image.schedule()) {
      const OptimizerParams params(entry.params().begin(), entry.params().end());
      if (entry.from_version() == 0) continue;  // the declared rule
      absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
          CreateOptimizer(decl.optimizer().name(), params);
      if (!optimizer.ok()) return refuse(std::string(optimizer.status().message()));
      std::shared_ptr<const Optimizer> shared = *std::move(optimizer);
      for (const auto& partition : tensor.partitions) {
        if (partition != nullptr) {
          HETPS_RETURN_IF_ERROR(partition->Reschedule(entry.from_version(), shared));
        }
      }
      absl::MutexLock lock(&tensor.schedule_mu);
      tensor.schedule[entry.from_version()] = shared->params();
    }
    size_t restored = 0;
    for (const hetps::v1::PartitionImage& partition_image : image.partitions()) {
      const uint32_t index = partition_image.index();
      if (index >= tensor.partitions.size() || tensor.partitions[index] == nullptr) {
        return refuse(absl::StrFormat("partition %d is not this shard's", index));
      }
      absl::Status status =
          tensor.partitions[index]->Restore(partition_image, part.Values(partition_image));
      if (!status.ok()) return refuse(std::string(status.message()));
      ++restored;
    }
    const size_t owned = static_cast<size_t>(
        std::count_if(tensor.partitions.begin(), tensor.partitions.end(),
                      [](const auto& partition) { return partition != nullptr; }));
    if (restored != owned) {
      return refuse(
          absl::StrFormat("the part holds %d of this shard's %d partitions", restored, owned));
    }
  }
  resume_step_ = part.header.step();
  return absl::OkStatus();
}

}  // namespace hetps::server
