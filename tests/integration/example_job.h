// What the multi-process tests share: the example training job (worker/examples/
// linear_regression) run as worker processes against ps-server processes on 127.0.0.1, once
// per transport: gRPC, UCX (shared memory between the local processes) and UCX forced onto TCP
// with UCX_TLS, as UCX's own tests do.
#ifndef HETPS_TESTS_INTEGRATION_EXAMPLE_JOB_H_
#define HETPS_TESTS_INTEGRATION_EXAMPLE_JOB_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "optimizer/optimizer.h"
#include "optimizer/registry.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "worker/client.h"
#include "worker/examples/linreg_model.h"

namespace hetps::integration {

using testing::BinaryPath;
using testing::LocalCluster;
using testing::ReadFile;
using testing::Subprocess;

constexpr int kDim = 1000;
constexpr int kSamples = 2000;
constexpr double kLearningRate = 0.2;

inline std::vector<std::string> WorkerArgs(const LocalCluster& cluster, int rank, int world_size,
                                           int steps, const std::string& sync,
                                           const std::string& output = "") {
  std::vector<std::string> args = {BinaryPath("worker/examples/linear_regression"),
                                   "--servers=" + cluster.servers_flag(),
                                   absl::StrCat("--rank=", rank),
                                   absl::StrCat("--world_size=", world_size),
                                   absl::StrCat("--steps=", steps),
                                   "--sync=" + sync,
                                   absl::StrCat("--lr=", kLearningRate),
                                   absl::StrCat("--dim=", kDim),
                                   absl::StrCat("--samples=", kSamples),
                                   "--partition_bytes=1024"};
  if (!output.empty()) args.push_back("--output=" + output);
  return args;
}

inline std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

inline float FinalLoss(const std::string& log) {
  const size_t at = log.find("final loss ");
  if (at == std::string::npos) return INFINITY;
  return std::stof(log.substr(at + 11));
}

using testing::AwaitCondition;

// Waits (bounded) until the file at `path` (another process's log) holds `text`.
inline bool AwaitText(const std::string& path, const std::string& text, absl::Duration timeout) {
  return AwaitCondition([&] { return absl::StrContains(ReadFile(path), text); }, timeout);
}

inline std::string WorkerLog(const LocalCluster& cluster, int rank) {
  return ReadFile(absl::StrCat(cluster.dir(), "/worker", rank, ".log"));
}

// The logs of workers 0 to world_size - 1, each under a line naming it.
inline std::string WorkerLogs(const LocalCluster& cluster, int world_size) {
  std::string logs;
  for (int r = 0; r < world_size; ++r) {
    absl::StrAppend(&logs, "--- worker ", r, " ---\n", WorkerLog(cluster, r));
  }
  return logs;
}

// Every shard's log, each under a line naming it: what a report of a failed job needs.
inline std::string ShardLogs(const LocalCluster& cluster) {
  std::string logs;
  for (int i = 0; i < static_cast<int>(cluster.addresses().size()); ++i) {
    absl::StrAppend(&logs, "--- shard ", i, " ---\n", ReadFile(cluster.shard_log(i)));
  }
  return logs;
}

// The same training in one process: the workers' gradients summed in rank order, then SGD.
inline std::vector<float> SingleProcessReference(int world_size, int steps) {
  examples::LinregProblem problem;
  problem.dim = kDim;
  problem.samples_per_worker = kSamples;
  std::vector<examples::WorkerData> data;
  for (int r = 0; r < world_size; ++r) data.push_back(examples::MakeWorkerData(problem, r));
  std::vector<float> w(kDim, 0.0f), sum_w(kDim), grad_w(kDim);
  float b = 0, sum_b = 0, grad_b = 0;
  const float lr = static_cast<float>(kLearningRate);
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < world_size; ++r) {
      examples::LossAndGradient(data[r], w, b, absl::MakeSpan(grad_w), &grad_b);
      for (int j = 0; j < kDim; ++j) sum_w[j] = r == 0 ? grad_w[j] : sum_w[j] + grad_w[j];
      sum_b = r == 0 ? grad_b : sum_b + grad_b;
    }
    for (int j = 0; j < kDim; ++j) w[j] = w[j] - lr * sum_w[j];
    b = b - lr * sum_b;
  }
  w.push_back(b);
  return w;
}

// The same training in one process, with any update rule of the optimizer library: the workers'
// gradients go to the rule as the shards hand them over (in rank order), on the whole model.
inline std::vector<float> SingleProcessReference(int world_size, int steps, const std::string& rule,
                                                 const OptimizerParams& params) {
  examples::LinregProblem problem;
  problem.dim = kDim;
  problem.samples_per_worker = kSamples;
  std::vector<examples::WorkerData> data;
  for (int r = 0; r < world_size; ++r) data.push_back(examples::MakeWorkerData(problem, r));
  std::unique_ptr<Optimizer> optimizer = *CreateOptimizer(rule, params);
  const int slots = optimizer->state_slots();
  std::vector<float> w(kDim, 0.0f), w_state(kDim * slots), b_state(slots);
  float b = 0;
  std::vector<float*> w_slots, b_slots;
  for (int k = 0; k < slots; ++k) {
    w_slots.push_back(w_state.data() + k * kDim);
    b_slots.push_back(b_state.data() + k);
  }
  optimizer->InitializeState(w_slots, kDim);
  optimizer->InitializeState(b_slots, 1);
  std::vector<std::vector<float>> grad_w(world_size, std::vector<float>(kDim));
  std::vector<float> grad_b(world_size);
  for (int step = 0; step < steps; ++step) {
    std::vector<const float*> gw, gb;
    for (int r = 0; r < world_size; ++r) {
      examples::LossAndGradient(data[r], w, b, absl::MakeSpan(grad_w[r]), &grad_b[r]);
      gw.push_back(grad_w[r].data());
      gb.push_back(&grad_b[r]);
    }
    optimizer->Update(
        {w.data(), w.data(), gw, w_slots, static_cast<size_t>(kDim), static_cast<uint64_t>(step)});
    optimizer->Update({&b, &b, gb, b_slots, 1, static_cast<uint64_t>(step)});
  }
  w.push_back(b);
  return w;
}

// The largest difference between two models, relative to each weight (at least 1).
inline float MaxRelativeDifference(const std::vector<float>& got, const std::vector<float>& want) {
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0f, std::abs(want[i])));
  }
  return worst;
}

// Every worker's saved model (<dir>/model<r>) equals the single-process training's.
inline void ExpectModelsMatchTheReference(const LocalCluster& cluster, int world_size, int steps) {
  const std::vector<float> reference = SingleProcessReference(world_size, steps);
  for (int r = 0; r < world_size; ++r) {
    const std::vector<float> model = ReadFloats(absl::StrCat(cluster.dir(), "/model", r));
    ASSERT_EQ(model.size(), reference.size());
    for (size_t i = 0; i < model.size(); ++i) {
      ASSERT_NEAR(model[i], reference[i], 1e-6 * std::max(1.0f, std::abs(reference[i])))
          << "worker " << r << " element " << i;
    }
  }
}

// The transport under test: "grpc", "ucx" or "ucx-tcp".
class ExampleJobTest : public ::testing::TestWithParam<std::string> {
 protected:
  // "grpc" or "ucx", as ps-server's and the example's --transport take it.
  std::string TransportFlag() const {
    return absl::StrCat("--transport=", GetParam() == "grpc" ? "grpc" : "ucx");
  }
  // The processes' environment: UCX limited to TCP for "ucx-tcp"; logs that name the lanes.
  std::vector<std::string> Environment() const {
    if (GetParam() == "ucx-tcp") return {"UCX_TLS=tcp", "HETPS_LOG_LEVEL=info"};
    return {"HETPS_LOG_LEVEL=info"};
  }

  absl::Status StartCluster(int num_shards, int num_workers,
                            const std::vector<std::string>& extra_flags = {}) {
    return StartClusterOf(cluster_, num_shards, num_workers, extra_flags);
  }
  absl::Status StartClusterOf(LocalCluster& cluster, int num_shards, int num_workers,
                              const std::vector<std::string>& extra_flags = {}) {
    std::vector<std::string> flags = {TransportFlag()};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    return cluster.Start(num_shards, num_workers, flags, Environment());
  }

  // Starts `world_size` example workers against `cluster` (default: cluster_); worker r logs
  // to <dir>/worker<r>.log and writes its final model to <dir>/model<r>.
  std::vector<std::unique_ptr<Subprocess>> StartWorkers(int world_size, int steps,
                                                        const std::string& sync,
                                                        const std::vector<std::string>& extra = {},
                                                        const LocalCluster* cluster = nullptr) {
    if (cluster == nullptr) cluster = &cluster_;
    std::vector<std::unique_ptr<Subprocess>> workers;
    for (int r = 0; r < world_size; ++r) {
      std::vector<std::string> args = WorkerArgs(*cluster, r, world_size, steps, sync,
                                                 absl::StrCat(cluster->dir(), "/model", r));
      args.push_back(TransportFlag());
      args.insert(args.end(), extra.begin(), extra.end());
      workers.push_back(std::make_unique<Subprocess>(
          args, absl::StrCat(cluster->dir(), "/worker", r, ".log"), Environment()));
    }
    return workers;
  }

  // Options for a client in this process, over the transport under test.
  ClientOptions InProcessClientOptions(uint32_t rank = 0, uint32_t world_size = 1) const {
    ClientOptions options;
    options.servers = cluster_.addresses();
    options.rank = rank;
    options.world_size = world_size;
    options.transport_instance = testing::NewTestTransport(GetParam());
    return options;
  }

  LocalCluster cluster_;
};

}  // namespace hetps::integration

#endif  // HETPS_TESTS_INTEGRATION_EXAMPLE_JOB_H_
