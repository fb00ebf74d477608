// An example training job: linear regression on synthetic data, trained through hetps.
// Each worker process computes the gradient on its own samples, pushes it and pulls the new
// weights (one PushPull per step), and prints its loss.
//
//   linear_regression --servers 127.0.0.1:7000,127.0.0.1:7001 --rank 0 --world_size 2
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/client.h"
#include "worker/examples/job_flags.h"
#include "worker/examples/linreg_model.h"

ABSL_FLAG(int, steps, 50, "Training steps");
ABSL_FLAG(std::string, sync, "bsp", "bsp or asp");
ABSL_FLAG(std::string, optimizer, "sgd",
          "Server-side update rule: sgd, adam, adamw, adagrad, rmsprop");
ABSL_FLAG(double, lr, 0.25, "Learning rate (applied to the sum of the workers' gradients)");
ABSL_FLAG(double, weight_decay, -1, "Weight decay; negative keeps the rule's default");
ABSL_FLAG(std::string, push_dtype, "fp32", "How gradients travel: fp32, bf16 or fp16");
ABSL_FLAG(std::string, pull_dtype, "fp32", "How weights come back: fp32, bf16 or fp16");
ABSL_FLAG(int, dim, 256, "Number of features");
ABSL_FLAG(int, samples, 2048, "Samples per worker");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the synthetic problem");
ABSL_FLAG(int, compute_ms, 0,
          "Milliseconds each step spends computing besides the gradient, as a larger model's "
          "forward and backward pass would (tests that act while training goes on)");
ABSL_FLAG(std::string, output, "",
          "If set, the final model (dim weights, then the bias) is written here as raw floats");

namespace {

using hetps::examples::Fail;

absl::StatusOr<hetps::DType> ParseDType(const std::string& name) {
  if (name == "fp32") return hetps::DType::kFp32;
  if (name == "bf16") return hetps::DType::kBf16;
  if (name == "fp16") return hetps::DType::kFp16;
  return absl::InvalidArgumentError("dtypes are fp32, bf16 or fp16, not " + name);
}

}  // namespace

int main(int argc, char** argv) {
  hetps::examples::ParseJobCommandLine(argc, argv, __FILE__,
                                       "Trains a linear regression through a hetps cluster.");

  const hetps::ClientOptions options = hetps::examples::ClientOptionsFromFlags();
  absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
  if (!client.ok()) return Fail(client.status());
  if (!(*client)->metrics_address().empty()) {
    std::printf("worker %u metrics at http://%s/metrics\n", options.rank,
                (*client)->metrics_address().c_str());
    std::fflush(stdout);
  }

  hetps::examples::LinregProblem problem;
  problem.dim = absl::GetFlag(FLAGS_dim);
  problem.samples_per_worker = absl::GetFlag(FLAGS_samples);
  problem.seed = absl::GetFlag(FLAGS_seed);
  const hetps::examples::WorkerData data = hetps::examples::MakeWorkerData(problem, options.rank);

  const std::string sync = absl::GetFlag(FLAGS_sync);
  if (sync != "bsp" && sync != "asp") {
    return Fail(absl::InvalidArgumentError("--sync must be bsp or asp"));
  }
  hetps::TensorSpec weight_spec;
  weight_spec.name = "linreg.weight";
  weight_spec.num_elements = static_cast<uint64_t>(problem.dim);
  weight_spec.sync = sync == "asp" ? hetps::SyncMode::kAsp : hetps::SyncMode::kBsp;
  weight_spec.optimizer = {absl::GetFlag(FLAGS_optimizer), {{"lr", absl::GetFlag(FLAGS_lr)}}};
  if (absl::GetFlag(FLAGS_weight_decay) >= 0) {
    weight_spec.optimizer.params["weight_decay"] = absl::GetFlag(FLAGS_weight_decay);
  }
  absl::StatusOr<hetps::DType> push_dtype = ParseDType(absl::GetFlag(FLAGS_push_dtype));
  absl::StatusOr<hetps::DType> pull_dtype = ParseDType(absl::GetFlag(FLAGS_pull_dtype));
  if (!push_dtype.ok()) return Fail(push_dtype.status());
  if (!pull_dtype.ok()) return Fail(pull_dtype.status());
  weight_spec.push_dtype = *push_dtype;
  weight_spec.pull_dtype = *pull_dtype;
  hetps::TensorSpec bias_spec = weight_spec;
  bias_spec.name = "linreg.bias";
  bias_spec.num_elements = 1;

  absl::StatusOr<hetps::TensorId> weight_id = (*client)->Declare(weight_spec);
  if (!weight_id.ok()) return Fail(weight_id.status());
  absl::StatusOr<hetps::TensorId> bias_id = (*client)->Declare(bias_spec);
  if (!bias_id.ok()) return Fail(bias_id.status());

  std::vector<float> w(problem.dim), grad_w(problem.dim);
  float b = 0, grad_b = 0;
  const hetps::PullItem model[] = {{*weight_id, absl::MakeSpan(w)},
                                   {*bias_id, absl::MakeSpan(&b, 1)}};
  const hetps::PushItem gradients[] = {{*weight_id, absl::MakeConstSpan(grad_w)},
                                       {*bias_id, absl::MakeConstSpan(&grad_b, 1)}};
  // Shards restored from a checkpoint say where the job goes on from (0 otherwise).
  const int first_step = static_cast<int>((*client)->ResumeStep());
  if (first_step > 0) std::printf("rank %u resumes at step %d\n", options.rank, first_step);
  if (absl::Status s = (*client)->Pull(model, static_cast<uint64_t>(first_step)).Wait(); !s.ok()) {
    return Fail(s);
  }

  const int steps = absl::GetFlag(FLAGS_steps);
  for (int step = first_step; step < steps; ++step) {
    const float loss =
        hetps::examples::LossAndGradient(data, w, b, absl::MakeSpan(grad_w), &grad_b);
    std::printf("rank %u step %d loss %.6f\n", options.rank, step, loss);
    std::fflush(stdout);
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_compute_ms)));
    absl::Status s = (*client)->PushPull(gradients, model, static_cast<uint64_t>(step)).Wait();
    if (!s.ok()) return Fail(s);
  }
  const float final_loss =
      hetps::examples::LossAndGradient(data, w, b, absl::MakeSpan(grad_w), &grad_b);
  std::printf("rank %u final loss %.6f after %d steps\n", options.rank, final_loss, steps);

  const std::string output = absl::GetFlag(FLAGS_output);
  if (!output.empty()) {
    std::ofstream out(output, std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()),
              static_cast<std::streamsize>(w.size() * sizeof(float)));
    out.write(reinterpret_cast<const char*>(&b), sizeof(b));
    if (!out.good()) return Fail(absl::InternalError("cannot write --output"));
  }
  (*client)->Shutdown();
  return 0;
}
