// ps-server: runs one shard of a hetps cluster until SIGINT/SIGTERM (or --lifetime_s). SIGHUP
// is logged and otherwise ignored.
//
//   ps-server --host 0.0.0.0 --port 7000 --shard_index 0 --num_shards 2 --num_workers 4
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/auth_token.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/log.h"
#include "google/protobuf/stubs/logging.h"
#include "server/server.h"

#ifdef HETPS_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on; use 0.0.0.0 to accept workers from other machines");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one (see --port_file)");
ABSL_FLAG(std::string, port_file, "",
          "If set, the chosen port is written to this file once the server accepts workers");
ABSL_FLAG(int, grpc_bulk_port, 0,
          "gRPC: port of a second connection for operations that move 16 MiB or more to the "
          "shard at once, used by workers on this machine (they learn it when they connect); 0 "
          "picks a free one; -1: none, every call on --port");
ABSL_FLAG(int, metrics_port, -1,
          "Port of an HTTP endpoint with /metrics (Prometheus), /healthz and /readyz; 0 picks a "
          "free one (logged); -1: none");
ABSL_FLAG(std::string, metrics_host, "",
          "Address the metrics endpoint listens on; empty: the same as --host");
ABSL_FLAG(uint32_t, shard_index, 0, "This shard's index, 0 <= shard_index < num_shards");
ABSL_FLAG(uint32_t, num_shards, 1, "Number of shards in the cluster");
ABSL_FLAG(uint32_t, num_workers, 1, "Number of workers (world size) of the training job");
ABSL_FLAG(std::string, job_id, "hetps", "Job name; workers of another job are refused");
ABSL_FLAG(int, threads, 0, "Threads that apply updates; 0 means one per CPU");
ABSL_FLAG(uint64_t, max_message_bytes, 64 << 20,
          "Largest message (header + tensor bytes) accepted or sent");
ABSL_FLAG(uint32_t, max_pending_steps, 4,
          "BSP: how many steps ahead of a partition's version a push may be");
ABSL_FLAG(double, max_wait_s, 600, "Longest a pull or barrier waits, in seconds");
ABSL_FLAG(uint64_t, max_memory_bytes, 0,
          "Tensor memory (weights, optimizer state, gradient buffers) the shard may hold; "
          "declarations beyond it are refused. 0: 90% of the machine's memory or of the "
          "container's limit (cgroup v2 memory.max, v1 memory.limit_in_bytes), whichever is less");
#ifdef HETPS_HAVE_UCX
ABSL_FLAG(std::string, transport, "ucx",
          "ucx (UCX and gRPC on the same port: workers may use either) or grpc");
#else
ABSL_FLAG(std::string, transport, "grpc", "grpc (this build has no UCX)");
#endif
ABSL_FLAG(std::string, ucx_net_devices, "auto",
          "UCX network devices, e.g. mlx5_0:1 or eth0; auto: lo when --host is a loopback "
          "address, the interface holding --host (and every RDMA port) for another; for "
          "0.0.0.0 the one holding this shard's --servers entry, else every device; "
          "UCX_NET_DEVICES in the environment wins");
ABSL_FLAG(std::string, ucx_port_range, "",
          "UCX over TCP listens on one more port per network device, for workers' and other "
          "shards' data connections: LOW-HIGH keeps it in that range (firewalls); empty: any");
ABSL_FLAG(bool, ucx_busy_poll, false,
          "UCX: spin instead of sleeping when idle (lower latency, one busy CPU)");
ABSL_FLAG(int32_t, ucx_clients_per_worker, 64,
          "UCX: once this many workers' connections have left the shard's UCX worker, new ones "
          "go to a new UCX worker, and the old one ends when its last connection leaves (UCX "
          "frees what a departed connection held, its shared memory included, only with the "
          "UCX worker)");
ABSL_FLAG(double, idle_timeout_s, 600,
          "Close a worker's connection after this many seconds with nothing in progress (the "
          "worker reconnects when it next calls); also the limit for a connection that never "
          "sends anything. 0: never");
ABSL_FLAG(double, keepalive_s, 10,
          "Ping a silent worker after this many seconds, and close its connection when the ping "
          "is not answered within as many more (a worker gone without a word)");
ABSL_FLAG(uint64_t, max_unsent_reply_bytes, 256 << 20,
          "Per connection: while the replies a worker has not taken exceed this, the shard "
          "reads no more of its requests");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the job's shared secret: only workers that present it are served. "
          "Empty: $HETPS_AUTH_TOKEN if set, else no authentication");
ABSL_FLAG(std::string, tls_cert_file, "",
          "TLS: this shard's certificate (PEM) for gRPC and UCX bootstraps; with --tls_key_file");
ABSL_FLAG(std::string, tls_key_file, "", "TLS: the key of --tls_cert_file (PEM)");
ABSL_FLAG(std::string, tls_ca_file, "",
          "TLS: require client certificates signed by this CA (PEM); empty: not asked for");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where consistent checkpoints of the BSP tensors go (step-<S>/ with one part per shard "
          "and a MANIFEST); a directory every shard of the job can write (one machine, or a "
          "shared file system)");
ABSL_FLAG(uint64_t, checkpoint_every, 0,
          "Checkpoint every this many BSP steps, without stopping training (0: only when a "
          "worker asks, Client::Checkpoint, and on SIGTERM)");
ABSL_FLAG(std::string, restore, "",
          "Start from a checkpoint: a --checkpoint_dir (its newest committed step) or one "
          "step-<S> directory; the workers learn the step to go on from");
ABSL_FLAG(uint32_t, replicas, 1,
          "Copies of each partition: 1, or 2 (each shard also keeps a backup of the previous "
          "shard's partitions and acknowledges a push only once its backup applied it too)");
ABSL_FLAG(std::string, etcd, "",
          "etcd's client address (host:port), needed with --replicas 2: the shard holds a lease "
          "there, registers its address and finds the other shards'");
ABSL_FLAG(double, lease_s, 2,
          "With --etcd: how long the shard's lease lasts without renewal (whole seconds, at "
          "least 1; renewed every third of it). A shard that cannot renew it in time "
          "acknowledges no update");
ABSL_FLAG(std::vector<std::string>, servers, {},
          "Every shard's address (host:port), in shard order, as workers list them: with "
          "--replicas 2, this shard advertises its own in etcd, where the other shards find it; "
          "on 0.0.0.0, UCX offers the interface that holds it (--ucx_net_devices auto). "
          "Empty: the address it listens on");
ABSL_FLAG(double, lifetime_s, 0,
          "Exit by itself after this many seconds (0: run until SIGINT/SIGTERM)");

namespace {

std::string AllocatorName() {
#ifdef HETPS_HAVE_JEMALLOC
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) == 0) {
    return absl::StrCat("jemalloc ", version);
  }
  return "jemalloc";
#else
  return "system malloc";
#endif
}

// Protobuf logs a line for every malformed string field it parses, and requests come from the
// network: a client could fill the shard's log. Its messages go to ours, one a second at most.
void RateLimitedProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                            const std::string& message) {
  static std::atomic<int64_t> last_ns{0};
  static std::atomic<uint64_t> suppressed{0};
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = last_ns.load();
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      (now - last < 1'000'000'000 || !last_ns.compare_exchange_strong(last, now))) {
    suppressed.fetch_add(1);
    return;
  }
  hetps::LogWarning("protobuf: %s (%s:%d; %d similar messages not logged)", message, file, line,
                    suppressed.exchange(0));
}

// Every worker connection is a file descriptor: a shard serving many workers (or facing many
// idle connections until they time out) must not run out at the usual soft limit of 1024.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    hetps::LogWarning("cannot raise the open-file limit: %s", std::strerror(errno));
  }
}

bool WritePortFile(const std::string& path, int port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << port << "\n";
    if (!out.good()) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(
      argc, argv, __FILE__,
      "Runs one shard of a hetps parameter-server cluster.\n"
      "  ps-server --host 0.0.0.0 --port 7000 --shard_index 0 --num_shards 2 --num_workers 4");

  google::protobuf::SetLogHandler(&RateLimitedProtobufLog);
  using hetps::RequireFlagInRange;
  RequireFlagInRange("port", int64_t{absl::GetFlag(FLAGS_port)}, 0, 65535);
  RequireFlagInRange("grpc_bulk_port", int64_t{absl::GetFlag(FLAGS_grpc_bulk_port)}, -1, 65535);
  RequireFlagInRange("metrics_port", int64_t{absl::GetFlag(FLAGS_metrics_port)}, -1, 65535);
  RequireFlagInRange("num_shards", uint64_t{absl::GetFlag(FLAGS_num_shards)}, 1, 1 << 16);
  RequireFlagInRange("shard_index", uint64_t{absl::GetFlag(FLAGS_shard_index)}, 0,
                     uint64_t{absl::GetFlag(FLAGS_num_shards)} - 1);
  RequireFlagInRange("replicas", uint64_t{absl::GetFlag(FLAGS_replicas)}, 1, 2);
  RequireFlagInRange("lease_s", absl::GetFlag(FLAGS_lease_s), 1, 3600);
  RequireFlagInRange("num_workers", uint64_t{absl::GetFlag(FLAGS_num_workers)}, 1, 1 << 20);
  RequireFlagInRange("threads", int64_t{absl::GetFlag(FLAGS_threads)}, 0,
                     hetps::server::ServerOptions::kMaxThreads);
  RequireFlagInRange("max_message_bytes", absl::GetFlag(FLAGS_max_message_bytes), 1 << 20,
                     (uint64_t{1} << 31) - 1);
  RequireFlagInRange("max_pending_steps", uint64_t{absl::GetFlag(FLAGS_max_pending_steps)}, 1,
                     1 << 16);
  RequireFlagInRange("max_wait_s", absl::GetFlag(FLAGS_max_wait_s), 0.001, 1e7);
  RequireFlagInRange("lifetime_s", absl::GetFlag(FLAGS_lifetime_s), 0, 1e9);
  RequireFlagInRange("idle_timeout_s", absl::GetFlag(FLAGS_idle_timeout_s), 0, 1e7);
  RequireFlagInRange("keepalive_s", absl::GetFlag(FLAGS_keepalive_s), 0.1, 1e5);
  RequireFlagInRange("max_unsent_reply_bytes", absl::GetFlag(FLAGS_max_unsent_reply_bytes), 1 << 20,
                     uint64_t{1} << 40);

  // Signals are taken by sigtimedwait below, so every thread started from here blocks them.
  // SIGHUP too: no library (UCX takes it for its debug mode) may act on it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A write to a connection whose peer is gone must fail with EPIPE, not end the shard: every
  // library that writes to sockets (gRPC, UCX, etcd's client) would have to pass MSG_NOSIGNAL
  // on every send, and a shard killed that way leaves no line in its log.
  signal(SIGPIPE, SIG_IGN);
  RaiseOpenFileLimit();

  hetps::server::ServerOptions options;
  options.listen_address = absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    const std::string metrics_host = absl::GetFlag(FLAGS_metrics_host).empty()
                                         ? absl::GetFlag(FLAGS_host)
                                         : absl::GetFlag(FLAGS_metrics_host);
    options.metrics_address = absl::StrCat(metrics_host, ":", absl::GetFlag(FLAGS_metrics_port));
  }
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_pending_steps = absl::GetFlag(FLAGS_max_pending_steps);
  options.max_wait = absl::Seconds(absl::GetFlag(FLAGS_max_wait_s));
  options.max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes);
  options.transport = absl::GetFlag(FLAGS_transport);
  options.ucx_net_devices = absl::GetFlag(FLAGS_ucx_net_devices);
  options.ucx_busy_poll = absl::GetFlag(FLAGS_ucx_busy_poll);
  options.ucx_clients_per_worker = absl::GetFlag(FLAGS_ucx_clients_per_worker);
  if (options.ucx_clients_per_worker < 1) {
    hetps::ExitWithUsageError(absl::StrCat("--ucx_clients_per_worker must be at least 1, not ",
                                           options.ucx_clients_per_worker));
  }
  options.grpc_bulk_port = absl::GetFlag(FLAGS_grpc_bulk_port);
  if (const std::string range = absl::GetFlag(FLAGS_ucx_port_range); !range.empty()) {
    // UCX reads its TCP transport's settings from the environment when it opens an interface,
    // for every UCX worker of the process (the shard's, and those that replicate to others).
    int low = 0, high = 0;
    const std::vector<std::string> bounds = absl::StrSplit(range, '-');
    if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &low) ||
        !absl::SimpleAtoi(bounds[1], &high) || low < 1 || high > 65535 || low > high) {
      hetps::ExitWithUsageError(
          absl::StrCat("--ucx_port_range must be LOW-HIGH, ports from 1 to 65535, not ", range));
    }
    setenv("UCX_TCP_PORT_RANGE", range.c_str(), 1);
  }
  const double idle_timeout_s = absl::GetFlag(FLAGS_idle_timeout_s);
  options.idle_timeout =
      idle_timeout_s == 0 ? absl::InfiniteDuration() : absl::Seconds(idle_timeout_s);
  options.keepalive_interval = absl::Seconds(absl::GetFlag(FLAGS_keepalive_s));
  options.keepalive_timeout = options.keepalive_interval;
  options.max_unsent_reply_bytes = absl::GetFlag(FLAGS_max_unsent_reply_bytes);
  absl::StatusOr<std::string> token = hetps::LoadAuthToken(absl::GetFlag(FLAGS_auth_token_file));
  if (!token.ok()) {
    std::fprintf(stderr, "ps-server: --auth_token_file: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  options.auth_token = *std::move(token);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.restore_dir = absl::GetFlag(FLAGS_restore);
  options.replicas = absl::GetFlag(FLAGS_replicas);
  options.servers = absl::GetFlag(FLAGS_servers);
  options.etcd = absl::GetFlag(FLAGS_etcd);
  options.lease_ttl = absl::Seconds(absl::GetFlag(FLAGS_lease_s));

  absl::StatusOr<std::unique_ptr<hetps::server::ShardServer>> server =
      hetps::server::ShardServer::Start(options);
  if (!server.ok()) {
    hetps::LogError("ps-server: %s", server.status().ToString());
    return 1;
  }
  // After the server started (UCX hands SIGHUP back then): a thread that a library started
  // before main, and so does not block SIGHUP, must not die of it either.
  struct sigaction ignore_hangup = {};
  ignore_hangup.sa_handler = [](int) {};
  sigaction(SIGHUP, &ignore_hangup, nullptr);
  const std::string address = (*server)->address();
  hetps::LogInfo("ps-server shard %d of %d for %d workers of job '%s' listening on %s (%s), %s",
                 options.shard_index, options.num_shards, options.num_workers, options.job_id,
                 address, options.transport == "ucx" ? "ucx and grpc" : "grpc", AllocatorName());
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    if (!WritePortFile(port_file, port)) {
      hetps::LogError("ps-server: cannot write --port_file %s", port_file);
      return 1;
    }
  }

  const double lifetime_s = absl::GetFlag(FLAGS_lifetime_s);
  const absl::Time end =
      lifetime_s > 0 ? hetps::Now() + absl::Seconds(lifetime_s) : absl::InfiniteFuture();
  while (true) {
    const timespec tick = {0, 200'000'000};
    const int signal = sigtimedwait(&signals, nullptr, &tick);
    if (signal == SIGHUP) {
      // What daemons do on SIGHUP is reopen their logs; ours go to stderr, which the service
      // manager owns, so there is nothing to do.
      hetps::LogInfo("ps-server: SIGHUP: logs go to stderr, nothing to reopen; still serving");
      continue;
    }
    const bool asked = (*server)->stop_requested();
    if (signal == SIGINT || signal == SIGTERM || asked) {
      if (asked) {
        hetps::LogInfo("ps-server: stop asked for (ps-ctl stop), shutting down");
      } else {
        hetps::LogInfo("ps-server: signal %d, shutting down", signal);
      }
      if ((signal == SIGTERM || asked) && !options.checkpoint_dir.empty()) {
        // A service manager stopping the job: keep what was trained, if it is between steps.
        const absl::Status saved = (*server)->CheckpointNow(absl::Seconds(60));
        if (saved.ok()) {
          hetps::LogInfo("ps-server: checkpoint on SIGTERM written");
        } else {
          hetps::LogWarning("ps-server: no checkpoint on SIGTERM: %s", saved.ToString());
        }
      }
      break;
    }
    if (hetps::Now() >= end) {
      hetps::LogInfo("ps-server: --lifetime_s reached, shutting down");
      break;
    }
  }
  (*server)->Shutdown();
  return 0;
}
