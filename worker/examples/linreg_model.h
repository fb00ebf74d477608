// A synthetic linear-regression problem for the examples and tests: y = x . w_true + b_true
// plus a little noise, each worker with its own samples drawn from (seed, rank). The model is
// the weight vector w (dim floats) and the bias b (1 float); the loss is the mean squared
// error / 2 over the worker's samples.
#ifndef HETPS_WORKER_EXAMPLES_LINREG_MODEL_H_
#define HETPS_WORKER_EXAMPLES_LINREG_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace hetps::examples {

struct LinregProblem {
  int dim = 256;
  int samples_per_worker = 2048;
  uint64_t seed = 1;
  float noise = 0.01f;
};

struct WorkerData {
  int dim = 0;
  std::vector<float> x;  // samples x dim, row-major
  std::vector<float> y;
};

// w_true (dim floats) followed by b_true.
std::vector<float> TrueModel(const LinregProblem& problem);

WorkerData MakeWorkerData(const LinregProblem& problem, uint32_t rank);

// Returns the loss at (w, b) and writes its gradient into grad_w (dim floats) and *grad_b.
float LossAndGradient(const WorkerData& data, absl::Span<const float> w, float b,
                      absl::Span<float> grad_w, float* grad_b);

}  // namespace hetps::examples

#endif  // HETPS_WORKER_EXAMPLES_LINREG_MODEL_H_
