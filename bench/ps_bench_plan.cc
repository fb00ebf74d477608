// ps-bench's flags, and the Plan made of them (bench/ps_bench_plan.h).
#include "bench/ps_bench_plan.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sizes.h"
#include "common/memory_limit.h"
#include "common/status_macros.h"
#include "transport/transport.h"
#include "worker/options.h"

ABSL_FLAG(std::string, b, "4K", "Smallest message size (bytes; K, M, G allowed)");
ABSL_FLAG(std::string, e, "16M", "Largest message size");
ABSL_FLAG(int, f, 4, "Size multiplication factor of the sweep; 1: -b alone");
ABSL_FLAG(int, warmup, 5, "Unmeasured operations before each measurement");
ABSL_FLAG(int, iterations, 0,
          "Measured operations per worker and size; 0 fits them into --duration_s");
ABSL_FLAG(double, duration_s, 0.5, "Approximate time per measurement when --iterations is 0");
ABSL_FLAG(std::string, op, "all", "push, pull, pushpull or all");
ABSL_FLAG(std::string, transport, "auto",
          "grpc, ucx, or all (every transport this build has; embedded mode only). auto: all "
          "in embedded mode, with --servers the fastest this build has (ucx, else grpc)");
ABSL_FLAG(bool, ucx_busy_poll, false,
          "UCX: spin on the workers instead of sleeping (clients and embedded shards)");
ABSL_FLAG(std::string, ucx_net_devices, "auto",
          "UCX: network devices, e.g. mlx5_0:1 (auto: those that reach the shards)");
ABSL_FLAG(int, workers, 2, "Embedded mode: worker threads (each with its own client)");
ABSL_FLAG(int, shards, 2, "Embedded mode: shards");
ABSL_FLAG(std::string, dtype, "fp32", "Wire type of gradients and weights: fp32, bf16, fp16");
ABSL_FLAG(std::string, host_dtype, "",
          "Type of the worker's tensors in memory (fp32, bf16, fp16), converted to and from "
          "--dtype by the client; empty: --dtype (no conversion)");
ABSL_FLAG(std::string, optimizer, "sum", "Server-side rule: sum, sgd or adam");
ABSL_FLAG(std::string, sync, "bsp", "bsp or asp");
ABSL_FLAG(int, inflight, 1, "Outstanding operations per worker");
ABSL_FLAG(std::string, pin, "", "Run on these CPUs only, e.g. 0-3,8");
ABSL_FLAG(bool, check, false, "Check every pulled value and count the wrong ones (#wrong)");
ABSL_FLAG(std::string, servers, "",
          "Measure this cluster (shard addresses in index order) instead of an embedded one");
ABSL_FLAG(uint32_t, rank, 0, "With --servers: this worker's rank");
ABSL_FLAG(std::string, job_id, "hetps",
          "The job the shards serve (their --job_id); embedded shards serve this one");
ABSL_FLAG(uint32_t, world_size, 1,
          "With --servers: workers in the job (the shards' --num_workers)");
ABSL_FLAG(uint64_t, partition_bytes, hetps::ClientOptions().partition_bytes,
          "Client partition size (and floor message size)");
ABSL_FLAG(double, timeout_s, 60, "Deadline of every message");
ABSL_FLAG(std::string, json, "", "Write every figure to this JSON file");
ABSL_FLAG(std::string, csv, "", "Write every figure to this CSV file");
ABSL_FLAG(std::string, plot, "", "Write an SVG plot of latency and throughput against size");
ABSL_FLAG(std::string, replicas, "1",
          "Embedded mode: copies of each partition (ps-server --replicas), or a list of them "
          "measured one after the other on fresh shards, e.g. 1,2,1,2");
ABSL_FLAG(std::string, metrics, "off",
          "on: the workers (and embedded shards) serve /metrics and time what they do, as with "
          "--metrics_port; off, or a list measured one after the other on fresh shards, e.g. "
          "off,on,off,on (what metrics cost)");
ABSL_FLAG(std::string, etcd, "",
          "Embedded mode with --replicas 2: etcd's address (host:port), where the shards hold "
          "their leases");
ABSL_FLAG(std::string, security, "off",
          "Embedded mode: off, token, tls, token+tls, or a list of them measured one after the "
          "other on fresh shards (tls needs --tls_dir). With --servers the client presents what "
          "--auth_token_file (or $HETPS_AUTH_TOKEN) and --tls_ca_file give");
ABSL_FLAG(std::string, tls_dir, "",
          "Embedded mode: the directory deploy/tls/make_certs.sh made (the shards use "
          "server.pem and server.key, the workers trust ca.pem)");
ABSL_FLAG(std::string, auth_token_file, "",
          "The job's token (embedded mode: the shards' too; a random one when not given)");
ABSL_FLAG(std::string, tls_ca_file, "", "With --servers: speak TLS, trusting this CA (PEM)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "With --servers and TLS: this worker's certificate, for shards that require one");
ABSL_FLAG(std::string, tls_key_file, "", "With --tls_cert_file: its key");
ABSL_FLAG(int, test_corrupt_replies_every, 0,
          "Test hook: damage every n-th pulled buffer before checking it (0: never)");

namespace hetps::bench {
namespace {

absl::StatusOr<DType> ParseDType(absl::string_view flag, absl::string_view name) {
  if (name == "fp32") return DType::kFp32;
  if (name == "bf16") return DType::kBf16;
  if (name == "fp16") return DType::kFp16;
  return absl::InvalidArgumentError(absl::StrCat(flag, " is fp32, bf16 or fp16"));
}

// The wire type, and the memory type where it differs: "bf16", "bf16 from fp32".
std::string DTypeLabel() {
  const std::string wire = absl::GetFlag(FLAGS_dtype), host = absl::GetFlag(FLAGS_host_dtype);
  return host.empty() || host == wire ? wire : absl::StrCat(wire, " from ", host);
}

// MemAvailable of /proc/meminfo, within the process's memory limit (a container's).
uint64_t AvailableMemory() {
  uint64_t available = ProcessMemoryLimit().bytes;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kilobytes = 0;
  while (meminfo >> key >> kilobytes) {
    if (key == "MemAvailable:") return std::min(available, kilobytes * 1024);
    meminfo.ignore(64, '\n');
  }
  return available;
}

// Refuses, before anything is allocated, a sweep that cannot fit in this machine's memory: at
// its peak the embedded shards hold the largest tensor measured (each is dropped once
// measured) -- fp32 weights, a gradient buffer and the optimizer's state per element, twice
// with a backup -- and each worker a measurement's buffers.
absl::Status CheckMemory(const Plan& plan) {
  const MeasureSettings& s = plan.settings;
  const uint64_t state_slots = s.optimizer == "adam" ? 2 : 0;
  uint64_t largest = 0;
  for (uint64_t bytes : plan.sizes) {
    HETPS_ASSIGN_OR_RETURN(const uint64_t elements, ElementsOf(bytes, s.dtype));
    largest = std::max(largest, elements);
  }
  uint64_t shards = largest * sizeof(float) * (2 + state_slots);
  const uint32_t replicas = *std::max_element(plan.replicas.begin(), plan.replicas.end());
  shards = plan.embedded ? shards * replicas : 0;
  // Gradients, weights, the values to check them against, and the floor's echo buffers, per
  // operation in flight.
  const uint64_t workers = static_cast<uint64_t>(plan.workers) * largest * sizeof(float) *
                           (4 + 4 * static_cast<uint64_t>(s.inflight));
  const uint64_t needed = shards + workers;
  const uint64_t available = AvailableMemory();
  if (needed > available / 10 * 9) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this sweep needs about %.1f GB at its peak (%.1f GB for the largest tensor on the "
        "embedded shards, and %.1f GB of buffers for %d worker(s)), but %.1f GB are available: "
        "lower -e, or use fewer --workers",
        needed / 1e9, shards / 1e9, workers / 1e9, plan.workers, available / 1e9));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> MakePlan(ScratchFiles& scratch) {
  Plan plan;
  std::string transport = absl::GetFlag(FLAGS_transport);
  const std::string available = transport::AvailableTransports();
  const std::vector<std::string> built = absl::StrSplit(available, ", ");
  const bool embedded = absl::GetFlag(FLAGS_servers).empty();
  if (transport == "auto") transport = embedded ? "all" : built.back();
  if (transport == "all" && !embedded) {
    // The shards count barriers and BSP steps per worker rank: a second set of clients would
    // start over where the first left off.
    return absl::InvalidArgumentError(
        "with --servers, measure one transport per run (--transport grpc or ucx)");
  }
  if (transport == "all") {
    plan.transports = built;
  } else if (std::find(built.begin(), built.end(), transport) != built.end()) {
    plan.transports = {transport};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport is all or one of this build's transports: ", available));
  }
  const std::string op = absl::GetFlag(FLAGS_op);
  if (op == "all") {
    plan.ops = {"push", "pull", "pushpull"};
  } else if (op == "push" || op == "pull" || op == "pushpull") {
    plan.ops = {op};
  } else {
    return absl::InvalidArgumentError("--op is push, pull, pushpull or all");
  }
  HETPS_ASSIGN_OR_RETURN(const uint64_t begin, ParseSize(absl::GetFlag(FLAGS_b)));
  HETPS_ASSIGN_OR_RETURN(const uint64_t end, ParseSize(absl::GetFlag(FLAGS_e)));
  const int factor = absl::GetFlag(FLAGS_f);
  if (factor == 1) {
    plan.sizes = {begin};
  } else if (begin > end || factor < 2) {
    return absl::InvalidArgumentError("sizes need -b <= -e and -f >= 2 (or -f 1: -b alone)");
  } else {
    plan.sizes = SweepSizes(begin, end, static_cast<uint64_t>(factor));
  }

  MeasureSettings& s = plan.settings;
  HETPS_ASSIGN_OR_RETURN(s.dtype, ParseDType("--dtype", absl::GetFlag(FLAGS_dtype)));
  s.host_dtype = s.dtype;
  if (!absl::GetFlag(FLAGS_host_dtype).empty()) {
    HETPS_ASSIGN_OR_RETURN(s.host_dtype,
                           ParseDType("--host_dtype", absl::GetFlag(FLAGS_host_dtype)));
  }
  for (uint64_t size : plan.sizes) HETPS_RETURN_IF_ERROR(ElementsOf(size, s.dtype).status());
  s.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (s.optimizer != "sum" && s.optimizer != "sgd" && s.optimizer != "adam") {
    return absl::InvalidArgumentError("--optimizer is sum, sgd or adam");
  }
  const std::string sync = absl::GetFlag(FLAGS_sync);
  if (sync != "bsp" && sync != "asp") return absl::InvalidArgumentError("--sync is bsp or asp");
  s.sync = sync == "asp" ? SyncMode::kAsp : SyncMode::kBsp;
  s.warmup = std::max(0, absl::GetFlag(FLAGS_warmup));
  s.iterations = std::max(0, absl::GetFlag(FLAGS_iterations));
  s.duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  s.inflight = absl::GetFlag(FLAGS_inflight);
  if (s.inflight < 1 || (s.sync == SyncMode::kBsp && s.inflight > 4)) {
    return absl::InvalidArgumentError(
        "--inflight must be at least 1, and at most 4 in BSP (a shard holds 4 pending steps)");
  }
  s.check = absl::GetFlag(FLAGS_check);
  const bool pushpull = std::find(plan.ops.begin(), plan.ops.end(), "pushpull") != plan.ops.end();
  if (s.check && pushpull && (s.optimizer != "sum" || s.sync != SyncMode::kBsp)) {
    return absl::InvalidArgumentError(
        "--check knows what a push-pull returns only with --optimizer sum --sync bsp "
        "(the step's sum); pulls are checked with any settings");
  }
  s.corrupt_every = std::max(0, absl::GetFlag(FLAGS_test_corrupt_replies_every));
  s.chunk_bytes = absl::GetFlag(FLAGS_partition_bytes);
  plan.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));

  plan.metrics.clear();
  for (absl::string_view metrics : absl::StrSplit(absl::GetFlag(FLAGS_metrics), ',')) {
    if (metrics != "on" && metrics != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics takes on, off or a list of them, not '", metrics, "'"));
    }
    plan.metrics.push_back(metrics == "on");
  }

  const std::string servers = absl::GetFlag(FLAGS_servers);
  plan.embedded = servers.empty();
  if (plan.embedded) {
    plan.workers = absl::GetFlag(FLAGS_workers);
    plan.shards = absl::GetFlag(FLAGS_shards);
    if (plan.workers < 1 || plan.shards < 1) {
      return absl::InvalidArgumentError("--workers and --shards must be at least 1");
    }
    plan.world_size = static_cast<uint32_t>(plan.workers);
    plan.replicas.clear();
    for (absl::string_view copies : absl::StrSplit(absl::GetFlag(FLAGS_replicas), ',')) {
      uint32_t replicas = 0;
      if (!absl::SimpleAtoi(copies, &replicas) || replicas < 1 || replicas > 2 ||
          (replicas == 2 && (plan.shards < 2 || absl::GetFlag(FLAGS_etcd).empty()))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--replicas takes 1 or 2 (2 needs --shards of 2 or more and --etcd), not '", copies,
            "'"));
      }
      plan.replicas.push_back(replicas);
    }
    HETPS_ASSIGN_OR_RETURN(
        plan.security, EmbeddedSecurity(absl::GetFlag(FLAGS_security), absl::GetFlag(FLAGS_tls_dir),
                                        absl::GetFlag(FLAGS_auth_token_file), scratch));
  } else {
    if (absl::GetFlag(FLAGS_security) != "off" || !absl::GetFlag(FLAGS_tls_dir).empty() ||
        absl::GetFlag(FLAGS_replicas) != "1") {
      return absl::InvalidArgumentError(
          "with --servers, the shards decide: give the job's --auth_token_file and "
          "--tls_ca_file instead of --security and --tls_dir (and --replicas is theirs)");
    }
    HETPS_ASSIGN_OR_RETURN(
        SecuritySetting security,
        ClusterSecurity(absl::GetFlag(FLAGS_auth_token_file), absl::GetFlag(FLAGS_tls_ca_file),
                        absl::GetFlag(FLAGS_tls_cert_file), absl::GetFlag(FLAGS_tls_key_file)));
    plan.security = {security};
    plan.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
    plan.shards = static_cast<int>(plan.servers.size());
    plan.workers = 1;
    plan.rank = absl::GetFlag(FLAGS_rank);
    plan.world_size = absl::GetFlag(FLAGS_world_size);
  }
  HETPS_RETURN_IF_ERROR(CheckMemory(plan));
  plan.dtype_label = DTypeLabel();
  plan.job_id = absl::GetFlag(FLAGS_job_id);
  plan.etcd = absl::GetFlag(FLAGS_etcd);
  plan.pin = absl::GetFlag(FLAGS_pin);
  plan.ucx_busy_poll = absl::GetFlag(FLAGS_ucx_busy_poll);
  plan.ucx_net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  plan.json_path = absl::GetFlag(FLAGS_json);
  plan.csv_path = absl::GetFlag(FLAGS_csv);
  plan.plot_path = absl::GetFlag(FLAGS_plot);
  // Files are written as rows are measured: a path that cannot be written fails now, not at the
  // end of a long sweep.
  for (const auto& [name, path] : {std::pair{"--json", absl::GetFlag(FLAGS_json)},
                                   std::pair{"--csv", absl::GetFlag(FLAGS_csv)},
                                   std::pair{"--plot", absl::GetFlag(FLAGS_plot)}}) {
    if (!path.empty() && !std::ofstream(path).good()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write the ", name, " file ", path));
    }
  }
  return plan;
}

JsonValue ConfigJson(const Plan& plan) {
  JsonValue config = JsonValue::Object();
  JsonValue sizes = JsonValue::Array();
  for (uint64_t size : plan.sizes) sizes.Append(size);
  config.Set("mode", plan.embedded ? "embedded" : "cluster")
      .Set("transports", absl::StrJoin(plan.transports, ","))
      .Set("security", absl::StrJoin(plan.security, ",",
                                     [](std::string* out, const SecuritySetting& setting) {
                                       out->append(setting.name);
                                     }))
      .Set("replicas", absl::StrJoin(plan.replicas, ","))
      .Set("metrics", absl::GetFlag(FLAGS_metrics))
      .Set("ops", absl::StrJoin(plan.ops, ","))
      .Set("sizes", std::move(sizes))
      .Set("workers", static_cast<int>(plan.world_size))
      .Set("local_workers", plan.workers)
      .Set("shards", plan.shards)
      .Set("rank", static_cast<int>(plan.rank))
      .Set("dtype", DTypeLabel())
      .Set("optimizer", plan.settings.optimizer)
      .Set("sync", absl::GetFlag(FLAGS_sync))
      .Set("inflight", plan.settings.inflight)
      .Set("warmup", plan.settings.warmup)
      .Set("iterations", plan.settings.iterations)
      .Set("duration_s", absl::ToDoubleSeconds(plan.settings.duration))
      .Set("check", plan.settings.check)
      .Set("partition_bytes", plan.settings.chunk_bytes)
      .Set("pin", absl::GetFlag(FLAGS_pin))
      .Set("ucx_busy_poll", absl::GetFlag(FLAGS_ucx_busy_poll))
      .Set("ucx_net_devices", absl::GetFlag(FLAGS_ucx_net_devices));
  if (!plan.embedded) config.Set("servers", absl::StrJoin(plan.servers, ","));
  return config;
}

}  // namespace hetps::bench
