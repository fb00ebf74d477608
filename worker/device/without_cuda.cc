// Builds without CUDA keep the device client on host memory only.
#include "worker/device/copy_engine.h"

namespace hetps::internal {

absl::StatusOr<std::unique_ptr<CopyEngine>> NewCudaCopyEngine(int) {
  return absl::FailedPreconditionError(
      "hetps was built without CUDA (HETPS_WITH_CUDA=OFF): only MemoryKind::kHost is available");
}

}  // namespace hetps::internal
