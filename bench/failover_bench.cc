// ps-failover-bench: the worker side of bench/failover_rejoin.sh. It declares a model of
// --shard_bytes per shard (what a rejoining shard must copy) and a small probe tensor with
// partitions on every shard, then
// trains the probe one BSP step after another and appends the wall-clock time of every
// acknowledged step to --ack_log (Unix milliseconds, one line each), until --stop_file exists
// or --seconds pass. The script kills and restarts shards meanwhile and reads the pauses off
// the log: the time from the last step acknowledged before a kill to the first one after.
//
//   ps-failover-bench --servers=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//                     --shard_bytes=1073741824 --ack_log=acks.txt --stop_file=stop
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "worker/client.h"

ABSL_FLAG(std::string, servers, "", "The shards' addresses, in shard order");
ABSL_FLAG(std::string, transport, "grpc", "grpc or ucx");
ABSL_FLAG(uint64_t, shard_bytes, uint64_t{1} << 30, "Model bytes (fp32) placed on each shard");
ABSL_FLAG(uint64_t, partition_bytes, 16 << 20, "Partition size in bytes");
ABSL_FLAG(std::string, ack_log, "", "Where each acknowledged step's time goes (required)");
ABSL_FLAG(std::string, stop_file, "", "Stop once this file exists");
ABSL_FLAG(double, seconds, 300, "Stop after this long at the latest");
ABSL_FLAG(std::string, init, "zeros",
          "The model's initializer: zeros, or normal (mean 0, stddev 0.02, as models draw "
          "their weights)");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps-failover-bench: %s\n", status.ToString().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Trains a probe tensor step after step and logs when each step is "
                          "acknowledged (bench/failover_rejoin.sh).");
  hetps::ClientOptions options;
  options.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  options.transport = absl::GetFlag(FLAGS_transport);
  options.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  options.call_timeout = absl::Minutes(2);
  if (options.servers.empty() || absl::GetFlag(FLAGS_ack_log).empty()) {
    return Fail(absl::InvalidArgumentError("--servers and --ack_log are required"));
  }
  // The model, in --partition_bytes partitions, declared by a client of its own (a client
  // cuts all its tensors alike).
  {
    absl::StatusOr<std::unique_ptr<hetps::Client>> declarer = hetps::Client::Create(options);
    if (!declarer.ok()) return Fail(declarer.status());
    hetps::TensorSpec model;
    model.name = "failover.model";
    model.num_elements = absl::GetFlag(FLAGS_shard_bytes) / sizeof(float) * options.servers.size();
    model.optimizer = {"sgd", {{"lr", 1e-3}}};
    const std::string init = absl::GetFlag(FLAGS_init);
    if (init == "normal") {
      model.init = hetps::Initializer::Normal(0, 0.02, /*seed=*/1);
    } else if (init != "zeros") {
      return Fail(absl::InvalidArgumentError("--init is zeros or normal"));
    }
    const absl::Time declaring = absl::Now();
    if (absl::StatusOr<hetps::TensorId> id = (*declarer)->Declare(model); !id.ok()) {
      return Fail(id.status());
    }
    // Read by bench/failover_rejoin.sh.
    std::printf("model declared in %s\n", absl::FormatDuration(absl::Now() - declaring).c_str());
    std::fflush(stdout);
  }
  // The probe: 8 small partitions per shard, so that every step goes through every shard.
  options.partition_bytes = 64 << 10;
  absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
  if (!client.ok()) return Fail(client.status());
  hetps::TensorSpec probe;
  probe.name = "failover.probe";
  probe.num_elements = options.partition_bytes / sizeof(float) * 8 * options.servers.size();
  probe.optimizer = {"sgd", {{"lr", 1e-3}}};
  absl::StatusOr<hetps::TensorId> probe_id = (*client)->Declare(probe);
  if (!probe_id.ok()) return Fail(probe_id.status());

  std::ofstream acks(absl::GetFlag(FLAGS_ack_log));
  std::vector<float> gradient(probe.num_elements, 1e-3f), weights(probe.num_elements);
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  const std::string stop_file = absl::GetFlag(FLAGS_stop_file);
  uint64_t step = 0;
  while (absl::Now() < end && (stop_file.empty() || !std::filesystem::exists(stop_file))) {
    absl::Status status =
        (*client)->PushPull(*probe_id, gradient, absl::MakeSpan(weights), step).Wait();
    if (!status.ok()) return Fail(status);
    acks << absl::ToUnixMillis(absl::Now()) << "\n" << std::flush;
    ++step;
  }
  std::printf("ps-failover-bench: %llu steps\n", static_cast<unsigned long long>(step));
  return 0;
}
