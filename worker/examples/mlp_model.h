// A small MLP for the device example: y = W2 relu(W1 x + b1) + b2, mean squared error, with its
// math on the CPU (mlp_cpu.cc) or on a GPU with cuBLAS (mlp_cuda.cu). Matrices are
// column-major (cuBLAS's order): W1 is hidden x inputs, a batch of inputs is inputs x batch.
#ifndef HETPS_WORKER_EXAMPLES_MLP_MODEL_H_
#define HETPS_WORKER_EXAMPLES_MLP_MODEL_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/device_client.h"

namespace hetps::examples {

struct MlpShape {
  int inputs = 32;
  int hidden = 64;
  int batch = 64;
};

// One tensor of the model; `weights` and `gradient` are in the model's memory.
struct MlpTensor {
  std::string name;
  size_t size = 0;
  int fan_in = 0;  // for the initial range
  float* weights = nullptr;
  float* gradient = nullptr;
};

class MlpModel {
 public:
  virtual ~MlpModel() = default;
  // W1, b1, W2, b2: the order the forward pass reads them.
  virtual std::vector<MlpTensor> tensors() = 0;
  // The stream the math is queued on (null on the CPU).
  virtual GpuStream stream() = 0;
  // Forward and backward on one batch (host arrays: inputs x batch values, batch targets): every
  // gradient is written (on a GPU: queued on stream()). Returns the batch's loss, which on a GPU
  // waits for the forward pass only.
  virtual absl::StatusOr<float> Step(const std::vector<float>& inputs,
                                     const std::vector<float>& targets) = 0;
};

std::unique_ptr<MlpModel> NewCpuMlp(const MlpShape& shape);
// FailedPrecondition without CUDA (build or device).
absl::StatusOr<std::unique_ptr<MlpModel>> NewCudaMlp(const MlpShape& shape, int device);

}  // namespace hetps::examples

#endif  // HETPS_WORKER_EXAMPLES_MLP_MODEL_H_
