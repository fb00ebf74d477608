// ps-bench: what a training step's communication costs with hetps, with the transport's raw
// floor measured beside it. Figures are defined in bench/PERFORMANCE.md.
//
//   ps-bench                                  # embedded cluster on 127.0.0.1, short sweep
//   ps-bench -b 4K -e 64M -f 4 --op pushpull --json out.json --plot out.svg
//   ps-bench --servers 10.0.0.1:7000,10.0.0.2:7000 --rank 0 --world_size 4   # a real cluster
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "bench/json.h"
#include "bench/pinning.h"
#include "bench/ps_bench_plan.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/security.h"
#include "bench/sizes.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "server/server.h"
#include "transport/transport.h"
#include "worker/client.h"

namespace hetps::bench {
namespace {

// Exit codes: 0 all right, 1 some pulled values were wrong, 2 the run failed.
constexpr int kWrongValues = 1;
constexpr int kFailed = 2;

// The workers of this process: a client, a runner and a floor each.
struct LocalWorker {
  std::unique_ptr<Client> client;
  std::unique_ptr<HetpsRunner> runner;
  std::unique_ptr<FloorRunner> floor;
};

// Runs `measure` on every local worker at once; the first error wins.
template <typename Measure>
absl::StatusOr<std::vector<WorkerMeasurement>> OnEveryWorker(std::vector<LocalWorker>& workers,
                                                             Measure measure) {
  std::vector<absl::StatusOr<WorkerMeasurement>> results(workers.size(),
                                                         absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers.size(); ++w) {
    threads.emplace_back([&, w] { results[w] = measure(workers[w]); });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<WorkerMeasurement> measurements;
  for (auto& result : results) {
    if (!result.ok()) return result.status();
    measurements.push_back(*std::move(result));
  }
  return measurements;
}

// Merges the workers' measurements: their samples together, their bytes and operations summed
// over the longest worker's time.
struct Merged {
  LatencySamples latency;
  double gbps = 0, ops_per_s = 0;
  uint64_t wrong = 0;
};
Merged Merge(std::vector<WorkerMeasurement>& measurements) {
  Merged merged;
  uint64_t bytes = 0, operations = 0;
  absl::Duration wall;
  for (WorkerMeasurement& m : measurements) {
    merged.latency.Merge(m.latency);
    bytes += m.payload_bytes;
    operations += m.operations;
    merged.wrong += m.wrong;
    wall = std::max(wall, m.wall);
  }
  const double seconds = std::max(1e-9, absl::ToDoubleSeconds(wall));
  merged.gbps = static_cast<double>(bytes) / seconds / 1e9;
  merged.ops_per_s = static_cast<double>(operations) / seconds;
  return merged;
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path);
  out << contents;
  if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// What one round of measurements runs with, besides the transport.
struct ClusterSetting {
  SecuritySetting security;
  uint32_t replicas = 1;
  bool metrics = false;
};

// Hands each measurement to `report` as soon as it is taken.
using Reporter = std::function<absl::Status(const BenchResult&)>;

absl::Status RunTransport(const Plan& plan, const std::string& transport_name,
                          const ClusterSetting& setting, const std::vector<std::string>& servers,
                          const Reporter& report, size_t* done, size_t total) {
  const SecuritySetting& security = setting.security;
  const uint32_t replicas = setting.replicas;
  transport::TransportOptions transport_options;
  transport_options.ucx_busy_poll = plan.ucx_busy_poll;
  transport_options.ucx_net_devices = plan.ucx_net_devices;
  transport_options.tls_ca_file = security.tls_ca_file;
  transport_options.tls_cert_file = security.tls_cert_file;
  transport_options.tls_key_file = security.tls_key_file;
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<transport::Transport> transport,
                         transport::CreateTransport(transport_name, transport_options));
  std::vector<LocalWorker> workers(plan.workers);
  for (int w = 0; w < plan.workers; ++w) {
    ClientOptions options;
    options.servers = servers;
    options.rank = plan.embedded ? static_cast<uint32_t>(w) : plan.rank;
    options.world_size = plan.world_size;
    options.job_id = plan.job_id;
    options.transport_instance = transport;
    options.call_timeout = plan.timeout;
    options.connect_timeout = plan.timeout;
    options.partition_bytes = plan.settings.chunk_bytes;
    options.auth_token_file = security.auth_token_file;
    if (setting.metrics) {
      options.metrics_port = 0;
      options.metrics_host = "127.0.0.1";
    }
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    if (!client.ok()) {
      return absl::Status(client.status().code(),
                          absl::StrCat("cannot reach the cluster: ", client.status().message()));
    }
    workers[w].client = *std::move(client);
    workers[w].runner = std::make_unique<HetpsRunner>(workers[w].client.get(), transport,
                                                      options.rank, plan.world_size);
    HETPS_ASSIGN_OR_RETURN(workers[w].floor,
                           FloorRunner::Connect(transport, options, plan.timeout));
  }

  for (const std::string& op : plan.ops) {
    for (uint64_t bytes : plan.sizes) {
      MeasureSettings settings = plan.settings;
      settings.transport = transport_name;
      settings.op = op;
      settings.bytes = bytes;
      std::fprintf(stderr, "\r[%zu/%zu] %s (security %s, replicas %u, metrics %s) %s %s ...     ",
                   ++*done, total, transport_name.c_str(), security.name.c_str(), replicas,
                   setting.metrics ? "on" : "off", op.c_str(), FormatSize(bytes).c_str());
      std::fflush(stderr);
      HETPS_ASSIGN_OR_RETURN(std::vector<WorkerMeasurement> hetps,
                             OnEveryWorker(workers, [&](LocalWorker& worker) {
                               return worker.runner->Measure(settings);
                             }));
      HETPS_ASSIGN_OR_RETURN(std::vector<WorkerMeasurement> floor,
                             OnEveryWorker(workers, [&](LocalWorker& worker) {
                               return worker.floor->Measure(settings, worker.runner->iterations());
                             }));
      Merged ps = Merge(hetps);
      Merged raw = Merge(floor);
      BenchResult r;
      r.transport = transport_name;
      r.security = security.name;
      r.replicas = static_cast<int>(replicas);
      r.metrics = setting.metrics ? "on" : "off";
      r.op = op;
      r.bytes = bytes;
      r.workers = static_cast<int>(plan.world_size);
      r.shards = plan.shards;
      r.dtype = plan.dtype_label;
      r.samples = ps.latency.count();
      r.p50_us = ps.latency.Percentile(50) / 1e3;
      r.p90_us = ps.latency.Percentile(90) / 1e3;
      r.p99_us = ps.latency.Percentile(99) / 1e3;
      r.p999_us = ps.latency.Percentile(99.9) / 1e3;
      r.max_us = ps.latency.Max() / 1e3;
      r.gbps = ps.gbps;
      r.ops_per_s = ps.ops_per_s;
      r.wrong = ps.wrong;
      r.floor_p50_us = raw.latency.Percentile(50) / 1e3;
      r.floor_gbps = raw.gbps;
      HETPS_RETURN_IF_ERROR(report(r));
    }
  }
  // What the runners keep on the shards goes (all workers at once: it waits for each other).
  HETPS_RETURN_IF_ERROR(
      OnEveryWorker(workers, [](LocalWorker& worker) -> absl::StatusOr<WorkerMeasurement> {
        HETPS_RETURN_IF_ERROR(worker.runner->Finish());
        return WorkerMeasurement();
      }).status());
  for (LocalWorker& worker : workers) worker.client->Shutdown();
  return absl::OkStatus();
}

absl::Status StartEmbeddedShards(const Plan& plan, const std::string& transport,
                                 const ClusterSetting& setting,
                                 std::vector<std::unique_ptr<server::ShardServer>>* shards,
                                 std::vector<std::string>* servers) {
  const SecuritySetting& security = setting.security;
  const uint32_t replicas = setting.replicas;
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < plan.shards; ++i) {
    server::ServerOptions options;
    options.shard_index = static_cast<uint32_t>(i);
    options.num_shards = static_cast<uint32_t>(plan.shards);
    options.num_workers = plan.world_size;
    options.job_id = plan.job_id;
    options.listen_address = "127.0.0.1:0";
    options.threads = std::max(1, cpus / plan.shards);
    options.transport = transport;
    options.ucx_busy_poll = plan.ucx_busy_poll;
    options.ucx_net_devices = plan.ucx_net_devices;
    options.auth_token = security.shard_auth_token;
    options.tls_cert_file = security.shard_tls_cert_file;
    options.tls_key_file = security.shard_tls_key_file;
    options.replicas = replicas;
    if (replicas > 1) options.etcd = plan.etcd;
    if (setting.metrics) options.metrics_address = "127.0.0.1:0";
    HETPS_ASSIGN_OR_RETURN(std::unique_ptr<server::ShardServer> shard,
                           server::ShardServer::Start(options));
    servers->push_back(shard->address());
    shards->push_back(std::move(shard));
  }
  std::fprintf(stderr,
               "ps-bench: embedded %s cluster of %d shards (%s), %d workers, security %s, "
               "replicas %u, metrics %s\n",
               transport.c_str(), plan.shards, absl::StrJoin(*servers, ",").c_str(), plan.workers,
               security.name.c_str(), replicas, setting.metrics ? "on" : "off");
  return absl::OkStatus();
}

int Run() {
  ScratchFiles scratch;
  absl::StatusOr<Plan> plan = MakePlan(scratch);
  if (!plan.ok()) {
    std::fprintf(stderr, "ps-bench: %s\n", std::string(plan.status().message()).c_str());
    return kFailed;
  }
  if (const std::string pin = plan->pin; !pin.empty()) {
    if (absl::Status pinned = PinTo(pin); !pinned.ok()) {
      std::fprintf(stderr, "ps-bench: --pin: %s\n", std::string(pinned.message()).c_str());
      return kFailed;
    }
  }
  // Each row is printed and written as soon as it is measured: a sweep that fails late keeps
  // what it measured.
  std::vector<BenchResult> results;
  const JsonValue config = ConfigJson(*plan);
  std::printf("%s", ResultsTableHeader().c_str());
  std::fflush(stdout);
  const Reporter report = [&](const BenchResult& r) -> absl::Status {
    results.push_back(r);
    std::fprintf(stderr, "\r%100s\r", "");
    std::printf("%s", ResultsTableRow(r).c_str());
    std::fflush(stdout);
    for (const auto& [path, contents] : {std::pair{plan->json_path, ResultsJson(config, results)},
                                         std::pair{plan->csv_path, ResultsCsv(results)},
                                         std::pair{plan->plot_path, ResultsSvg(results)}}) {
      if (!path.empty()) HETPS_RETURN_IF_ERROR(WriteFile(path, contents));
    }
    return absl::OkStatus();
  };
  size_t done = 0;
  std::vector<ClusterSetting> settings;
  for (const SecuritySetting& security : plan->security) {
    for (uint32_t replicas : plan->replicas) {
      for (bool metrics : plan->metrics) settings.push_back({security, replicas, metrics});
    }
  }
  const size_t total =
      plan->transports.size() * settings.size() * plan->ops.size() * plan->sizes.size();
  for (const std::string& transport : plan->transports) {
    for (const ClusterSetting& setting : settings) {
      // Embedded mode: fresh shards in this process for every transport and setting
      // (barrier generations and BSP steps start over with the new clients).
      std::vector<std::unique_ptr<server::ShardServer>> shards;
      std::vector<std::string> servers = plan->servers;
      if (plan->embedded) {
        absl::Status started = StartEmbeddedShards(*plan, transport, setting, &shards, &servers);
        if (!started.ok()) {
          std::fprintf(stderr, "ps-bench: cannot start an embedded shard: %s\n",
                       started.ToString().c_str());
          return kFailed;
        }
      }
      const absl::Status measured =
          RunTransport(*plan, transport, setting, servers, report, &done, total);
      if (!measured.ok()) {
        std::fprintf(stderr, "\nps-bench: %s\n", measured.ToString().c_str());
        return kFailed;
      }
    }
  }
  std::fprintf(stderr, "\r%100s\r", "");
  uint64_t wrong = 0;
  for (const BenchResult& r : results) wrong += r.wrong;
  if (wrong > 0) {
    std::fprintf(stderr, "ps-bench: %llu pulled values were wrong\n",
                 static_cast<unsigned long long>(wrong));
    return kWrongValues;
  }
  return 0;
}

}  // namespace
}  // namespace hetps::bench

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Measures push/pull latency and throughput of a hetps cluster, with "
                          "the transport's raw floor beside them.\n"
                          "  ps-bench                      # embedded cluster on 127.0.0.1\n"
                          "  ps-bench --servers a:7000,b:7000 --rank 0 --world_size 4",
                          {"ps_bench_plan.cc"});
  return hetps::bench::Run();
}
