#include "worker/examples/linreg_model.h"

#include <algorithm>
#include <random>

namespace hetps::examples {

std::vector<float> TrueModel(const LinregProblem& problem) {
  std::mt19937_64 rng(problem.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> model(problem.dim + 1);
  for (float& value : model) value = uniform(rng);
  return model;
}

WorkerData MakeWorkerData(const LinregProblem& problem, uint32_t rank) {
  const std::vector<float> model = TrueModel(problem);
  std::mt19937_64 rng(problem.seed * 1000003 + rank + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  WorkerData data;
  data.dim = problem.dim;
  data.x.resize(static_cast<size_t>(problem.samples_per_worker) * problem.dim);
  data.y.resize(problem.samples_per_worker);
  for (int i = 0; i < problem.samples_per_worker; ++i) {
    float* row = &data.x[static_cast<size_t>(i) * problem.dim];
    float y = model[problem.dim];
    for (int j = 0; j < problem.dim; ++j) {
      row[j] = normal(rng);
      y += row[j] * model[j];
    }
    data.y[i] = y + problem.noise * normal(rng);
  }
  return data;
}

float LossAndGradient(const WorkerData& data, absl::Span<const float> w, float b,
                      absl::Span<float> grad_w, float* grad_b) {
  const size_t samples = data.y.size();
  std::fill(grad_w.begin(), grad_w.end(), 0.0f);
  *grad_b = 0.0f;
  double loss = 0;
  for (size_t i = 0; i < samples; ++i) {
    const float* row = &data.x[i * data.dim];
    float prediction = b;
    for (int j = 0; j < data.dim; ++j) prediction += row[j] * w[j];
    const float error = prediction - data.y[i];
    loss += 0.5 * static_cast<double>(error) * error;
    for (int j = 0; j < data.dim; ++j) grad_w[j] += error * row[j];
    *grad_b += error;
  }
  const float scale = 1.0f / static_cast<float>(samples);
  for (float& g : grad_w) g *= scale;
  *grad_b *= scale;
  return static_cast<float>(loss / samples);
}

}  // namespace hetps::examples
