// An example training job that keeps its model on a GPU: a small MLP (cuBLAS) learns a synthetic
// regression task, and every step pushes its gradients and pulls the new weights through
// hetps::DeviceClient straight from and into GPU memory. --device=cpu runs the same job on the
// CPU (builds without CUDA; machines without a GPU). Prints the loss per step and how long the
// job waited for the parameter server.
//
//   mlp_training --servers 127.0.0.1:7000,127.0.0.1:7001 --rank 0 --world_size 2
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/client.h"
#include "worker/device_client.h"
#include "worker/examples/job_flags.h"
#include "worker/examples/mlp_model.h"

ABSL_FLAG(std::string, device, "auto", "cuda, cpu, or auto (cuda when a GPU can be used)");
ABSL_FLAG(int, cuda_device, 0, "The GPU to use");
ABSL_FLAG(int, steps, 100, "Training steps");
ABSL_FLAG(double, lr, 0.02, "Learning rate (applied to the sum of the workers' gradients)");
ABSL_FLAG(int, hidden, 64, "Hidden units");
ABSL_FLAG(int, inputs, 32, "Input features");
ABSL_FLAG(int, batch, 64, "Samples per step and worker");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the synthetic task");
ABSL_FLAG(uint64_t, staging_mb, 64, "Pinned staging memory, MiB");

namespace {

using hetps::examples::Fail;
using hetps::examples::MlpModel;
using hetps::examples::MlpShape;

// The task: t = sin(u . x) for a fixed u, x uniform in [-1, 1]. Each worker draws its own
// batches; batch k of a worker is the same in every run.
class Task {
 public:
  Task(const MlpShape& shape, uint64_t seed) : shape_(shape), seed_(seed), u_(shape.inputs) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(shape.inputs)));
    for (float& value : u_) value = 2.0f * normal(rng);
  }
  void Batch(uint32_t rank, int step, std::vector<float>* inputs, std::vector<float>* targets) {
    std::mt19937_64 rng(seed_ * 1000003 + rank * 7919 + static_cast<uint64_t>(step % 64));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    inputs->resize(static_cast<size_t>(shape_.inputs) * shape_.batch);
    targets->resize(shape_.batch);
    for (int s = 0; s < shape_.batch; ++s) {
      float dot = 0;
      for (int c = 0; c < shape_.inputs; ++c) {
        const float x = uniform(rng);
        (*inputs)[c + static_cast<size_t>(shape_.inputs) * s] = x;
        dot += u_[c] * x;
      }
      (*targets)[s] = std::sin(dot);
    }
  }

 private:
  const MlpShape shape_;
  const uint64_t seed_;
  std::vector<float> u_;
};

}  // namespace

int main(int argc, char** argv) {
  hetps::examples::ParseJobCommandLine(
      argc, argv, __FILE__, "Trains a small MLP from GPU (or CPU) memory through hetps shards.");
  const MlpShape shape{absl::GetFlag(FLAGS_inputs), absl::GetFlag(FLAGS_hidden),
                       absl::GetFlag(FLAGS_batch)};
  if (shape.inputs <= 0 || shape.hidden <= 0 || shape.batch <= 0) {
    return Fail(absl::InvalidArgumentError("--inputs, --hidden and --batch must be positive"));
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "auto" && device != "cuda" && device != "cpu") {
    return Fail(absl::InvalidArgumentError("--device is cuda, cpu or auto, not " + device));
  }
  std::unique_ptr<MlpModel> model;
  if (device != "cpu") {
    absl::StatusOr<std::unique_ptr<MlpModel>> cuda =
        hetps::examples::NewCudaMlp(shape, absl::GetFlag(FLAGS_cuda_device));
    if (cuda.ok()) {
      model = *std::move(cuda);
    } else if (device == "cuda") {
      return Fail(cuda.status());
    } else {
      std::printf("no usable GPU (%s): running on the CPU\n", cuda.status().ToString().c_str());
    }
  }
  const bool on_gpu = model != nullptr;
  if (!on_gpu) model = hetps::examples::NewCpuMlp(shape);

  const hetps::ClientOptions options = hetps::examples::ClientOptionsFromFlags();
  absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
  if (!client.ok()) return Fail(client.status());

  hetps::DeviceClientOptions device_options;
  device_options.memory = on_gpu ? hetps::MemoryKind::kCuda : hetps::MemoryKind::kHost;
  device_options.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  device_options.staging_bytes = absl::GetFlag(FLAGS_staging_mb) << 20;
  absl::StatusOr<std::unique_ptr<hetps::DeviceClient>> staged =
      hetps::DeviceClient::Create(client->get(), device_options);
  if (!staged.ok()) return Fail(staged.status());

  // Every worker declares the same tensors; the shards draw the initial weights.
  std::vector<hetps::DeviceItem> items;
  const std::vector<hetps::examples::MlpTensor> tensors = model->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    hetps::TensorSpec spec;
    spec.name = tensors[i].name;
    spec.num_elements = tensors[i].size;
    spec.optimizer = {"sgd", {{"lr", absl::GetFlag(FLAGS_lr)}, {"momentum", 0.9}}};
    const double range = 1.0 / std::sqrt(static_cast<double>(tensors[i].fan_in));
    spec.init = hetps::Initializer::Uniform(-range, range, absl::GetFlag(FLAGS_seed) + i);
    absl::StatusOr<hetps::TensorId> id = (*client)->Declare(spec);
    if (!id.ok()) return Fail(id.status());
    // The forward pass reads the tensors in this order: the first ones come back first.
    items.push_back({*id, tensors[i].gradient, tensors[i].weights, tensors[i].size,
                     static_cast<int>(tensors.size() - i)});
  }
  hetps::Operation last = (*staged)->Pull(items, 0, model->stream());
  if (absl::Status s = last.Wait(); !s.ok()) return Fail(s);
  std::printf("worker %u: training on the %s, %zu tensors\n", options.rank, on_gpu ? "GPU" : "CPU",
              items.size());

  Task task(shape, absl::GetFlag(FLAGS_seed));
  std::vector<float> inputs, targets;
  float loss = 0;
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    // On the CPU the math reads the weights directly: wait for them. On the GPU the stream waits.
    if (!on_gpu) {
      if (absl::Status s = last.Wait(); !s.ok()) return Fail(s);
    }
    task.Batch(options.rank, step, &inputs, &targets);
    absl::StatusOr<float> step_loss = model->Step(inputs, targets);
    if (!step_loss.ok()) return Fail(step_loss.status());
    loss = *step_loss;
    last = (*staged)->PushPull(items, step, model->stream());
    const absl::Duration waited = (*staged)->TakeStreamWaitTime();
    std::printf("worker %u step %d loss %.6f waited_on_ps_ms %.3f\n", options.rank, step, loss,
                absl::ToDoubleMilliseconds(waited));
  }
  if (absl::Status s = last.Wait(); !s.ok()) return Fail(s);
  std::printf("worker %u final loss %.6f\n", options.rank, loss);
  return 0;
}
