// Builds without CUDA run the MLP example on the CPU only.
#include "worker/examples/mlp_model.h"

namespace hetps::examples {

absl::StatusOr<std::unique_ptr<MlpModel>> NewCudaMlp(const MlpShape&, int) {
  return absl::FailedPreconditionError("built without CUDA: use --device=cpu");
}

}  // namespace hetps::examples
