// ps-checkpoint-bench: what a checkpoint costs a training step. Shards embedded in this process
// take one worker's push+pull of a --bytes model every step and checkpoint it every --every
// steps (server/checkpoint.h): the partitions copy themselves right after the update of the
// checkpointed step (the pause the job sees), and a background thread writes the copies. It
// reports the median step without a checkpoint against the longest step that took one, and how
// long after its step each checkpoint was durable.
//
//   ps-checkpoint-bench --bytes=1073741824 --every=4 --steps=13
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "common/random_id.h"
#include "server/server.h"
#include "worker/client.h"

ABSL_FLAG(uint64_t, bytes, uint64_t{1} << 30, "Model bytes (fp32) held by the shards");
ABSL_FLAG(int, shards, 1, "Shards embedded in this process");
ABSL_FLAG(int, steps, 13, "Training steps (the first is a warm-up)");
ABSL_FLAG(int, every, 4, "Checkpoint every this many steps");
ABSL_FLAG(std::string, optimizer, "sgd", "The shards' update rule (adam keeps 2 more copies)");
ABSL_FLAG(std::string, dir, "",
          "Checkpoint directory (default: a new one under $TMPDIR or /tmp, removed at the end)");
#ifdef HETPS_HAVE_UCX
ABSL_FLAG(std::string, transport, "ucx", "ucx or grpc");
#else
ABSL_FLAG(std::string, transport, "grpc", "grpc (this build has no UCX)");
#endif
ABSL_FLAG(uint64_t, partition_bytes, hetps::ClientOptions().partition_bytes,
          "Partition size in bytes");

namespace {

namespace fs = std::filesystem;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps-checkpoint-bench: %s\n", status.ToString().c_str());
  return 2;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Measures what a checkpoint costs a training step.\n"
                          "  ps-checkpoint-bench --bytes=1073741824 --every=4");
  const int every = absl::GetFlag(FLAGS_every);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (every < 1 || steps < 2 * every) {
    return Fail(absl::InvalidArgumentError("--every must be at least 1 and --steps 2x --every"));
  }
  std::string dir = absl::GetFlag(FLAGS_dir);
  const bool own_dir = dir.empty();
  if (own_dir) {
    const char* tmp = std::getenv("TMPDIR");
    dir = absl::StrFormat("%s/ps-checkpoint-bench-%016x", tmp != nullptr ? tmp : "/tmp",
                          hetps::NewRandomId());
  }

  std::vector<std::unique_ptr<hetps::server::ShardServer>> shards;
  hetps::ClientOptions options;
  const int num_shards = std::max(1, absl::GetFlag(FLAGS_shards));
  for (int i = 0; i < num_shards; ++i) {
    hetps::server::ServerOptions server;
    server.shard_index = static_cast<uint32_t>(i);
    server.num_shards = static_cast<uint32_t>(num_shards);
    server.transport = absl::GetFlag(FLAGS_transport);
    server.checkpoint_dir = dir;
    server.checkpoint_every = static_cast<uint64_t>(every);
    absl::StatusOr<std::unique_ptr<hetps::server::ShardServer>> shard =
        hetps::server::ShardServer::Start(server);
    if (!shard.ok()) return Fail(shard.status());
    options.servers.push_back((*shard)->address());
    shards.push_back(*std::move(shard));
  }
  options.transport = absl::GetFlag(FLAGS_transport);
  options.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  options.call_timeout = absl::Minutes(5);
  absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
  if (!client.ok()) return Fail(client.status());
  hetps::TensorSpec spec;
  spec.name = "model";
  spec.num_elements = absl::GetFlag(FLAGS_bytes) / sizeof(float);
  spec.optimizer = {absl::GetFlag(FLAGS_optimizer), {{"lr", 1e-3}}};
  absl::StatusOr<hetps::TensorId> id = (*client)->Declare(spec);
  if (!id.ok()) return Fail(id.status());

  // Watches when each checkpoint becomes durable on every shard.
  std::atomic<bool> done{false};
  std::vector<absl::Time> durable_at(static_cast<size_t>(steps) + 1, absl::InfinitePast());
  std::thread watcher([&] {
    while (!done.load()) {
      uint64_t all = ~uint64_t{0};
      for (const auto& shard : shards) all = std::min(all, shard->last_checkpoint());
      if (all <= static_cast<uint64_t>(steps) && durable_at[all] == absl::InfinitePast()) {
        durable_at[all] = absl::Now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });

  std::vector<float> gradient(spec.num_elements, 1e-3f), weights(spec.num_elements);
  // Step s ends at step_end[s + 1], when the weights of version s + 1 are back.
  std::vector<absl::Time> step_end(static_cast<size_t>(steps) + 1);
  step_end[0] = absl::Now();
  for (int step = 0; step < steps; ++step) {
    absl::Status status =
        (*client)
            ->PushPull(*id, gradient, absl::MakeSpan(weights), static_cast<uint64_t>(step))
            .Wait();
    if (!status.ok()) return Fail(status);
    step_end[step + 1] = absl::Now();
  }
  // The last checkpoint's write, bounded.
  const uint64_t last = static_cast<uint64_t>(steps / every * every);
  const absl::Time give_up = absl::Now() + absl::Minutes(5);
  while (durable_at[last] == absl::InfinitePast() && absl::Now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  done.store(true);
  watcher.join();
  // A step is "during a checkpoint" if it overlaps one: from the start of the step that reaches
  // the checkpointed version until that checkpoint is durable.
  std::vector<double> plain_ms, checkpoint_ms;
  for (int step = 1; step < steps; ++step) {  // step 0 is a warm-up (first touch of memory)
    const absl::Time start = step_end[step], end = step_end[step + 1];
    bool overlaps = false;
    for (uint64_t s = static_cast<uint64_t>(every); s <= last; s += static_cast<uint64_t>(every)) {
      const absl::Time durable =
          durable_at[s] == absl::InfinitePast() ? absl::InfiniteFuture() : durable_at[s];
      overlaps = overlaps || (end > step_end[s - 1] && start < durable);
    }
    const double ms = absl::ToDoubleMilliseconds(end - start);
    if (std::getenv("HETPS_BENCH_TRACE") != nullptr) {
      std::printf("step %d %.1f ms%s\n", step, ms, overlaps ? " (during a checkpoint)" : "");
    }
    (overlaps ? checkpoint_ms : plain_ms).push_back(ms);
  }
  if (plain_ms.empty() || checkpoint_ms.empty()) {
    return Fail(absl::FailedPreconditionError(
        "every step overlapped a checkpoint: give more --steps or a larger --every"));
  }
  std::vector<std::string> durable;
  for (uint64_t s = static_cast<uint64_t>(every); s <= last; s += static_cast<uint64_t>(every)) {
    durable.push_back(
        durable_at[s] == absl::InfinitePast()
            ? "-"
            : absl::StrFormat("%.2f", absl::ToDoubleSeconds(durable_at[s] - step_end[s])));
  }
  const double plain = Median(plain_ms);
  const double worst = *std::max_element(checkpoint_ms.begin(), checkpoint_ms.end());
  std::printf(
      "ps-checkpoint-bench: %llu MiB on %d shard(s), %s, %s, a checkpoint every %d "
      "steps, %d steps\n",
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_bytes) >> 20), num_shards,
      spec.optimizer.name.c_str(), options.transport.c_str(), every, steps);
  const double plain_worst = *std::max_element(plain_ms.begin(), plain_ms.end());
  std::printf(
      "step ms: without a checkpoint (%zu steps) median %.1f, longest %.1f; during one (%zu "
      "steps) median %.1f, longest %.1f: %.2fx the median without\n",
      plain_ms.size(), plain, plain_worst, checkpoint_ms.size(), Median(checkpoint_ms), worst,
      worst / plain);
  std::printf("checkpoint durable this many s after its step: %s\n",
              absl::StrJoin(durable, ", ").c_str());
  (*client)->Shutdown();
  shards.clear();
  if (own_dir) fs::remove_all(dir);
  return 0;
}
