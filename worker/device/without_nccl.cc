// Builds without NCCL have no local groups.
#include "worker/local_group.h"

namespace hetps {

absl::StatusOr<LocalGroupId> LocalGroup::NewId() {
  return absl::FailedPreconditionError("hetps was built without NCCL (HETPS_WITH_NCCL=OFF)");
}

absl::StatusOr<std::shared_ptr<LocalGroup>> LocalGroup::Create(const LocalGroupId&, int, int, int,
                                                               absl::Duration) {
  return NewId().status();
}

}  // namespace hetps
