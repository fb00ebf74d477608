// Options of the hetps worker client and the description of a tensor to declare.
//
//   hetps::ClientOptions options;
//   options.servers = {"10.0.0.1:7000", "10.0.0.2:7000"};   // in shard-index order
//   options.rank = 0;
//   options.world_size = 4;
//
//   hetps::TensorSpec spec;
//   spec.name = "layer1.weight";
//   spec.num_elements = 1 << 20;
//   spec.optimizer = {"sgd", {{"lr", 0.01}}};
//
// Plain structs; copy freely.
#ifndef HETPS_WORKER_OPTIONS_H_
#define HETPS_WORKER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace hetps {

namespace transport {
class Transport;
}  // namespace transport

struct ClientOptions {
  // --- Affects behaviour ---

  // Addresses ("host:port") of every shard, in shard-index order. Every worker of a job must
  // list the same shards in the same order; each shard checks its place when the client
  // connects.
  std::vector<std::string> servers;
  // This worker's rank, 0 <= rank < world_size.
  uint32_t rank = 0;
  // Number of workers in the job; must equal the shards' --num_workers.
  uint32_t world_size = 1;
  // Must equal the shards' --job_id.
  std::string job_id = "hetps";
  // An operator's tool (ps-ctl), not a worker of the job: the shards check neither rank nor
  // world_size and the client takes no rank's run over, so it may connect while the job runs.
  // For Stats and Drop; it must not push.
  bool admin = false;
  // File holding the job's shared secret, for shards started with one (--auth_token_file).
  // Empty: $HETPS_AUTH_TOKEN if set, else none. Read once, by Client::Create.
  std::string auth_token_file;
  // TLS, for shards started with a certificate: the CA that signed it (PEM), and this worker's
  // own certificate and key for shards that require one. Empty: plaintext.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // "grpc", or "ucx" (shards started with --transport=ucx, the default where hetps is built
  // with UCX). Ignored when transport_instance is set (tests use the in-process transport).
  std::string transport = "grpc";
  std::shared_ptr<transport::Transport> transport_instance;
  // UCX: network devices ("auto": lo for shards on loopback addresses, else the interface that
  // routes to the shard, plus every RDMA port).
  std::string ucx_net_devices = "auto";
  // UCX: spin instead of sleeping when idle, for the lowest latency (costs a CPU core). A
  // thread in Operation::Wait() then also sends and receives its messages itself, until done.
  bool ucx_busy_poll = false;

  // Every message to a shard must be answered within this time, or its operation fails with
  // DeadlineExceeded. A shard that cannot be reached is retried until then. In BSP a pull waits
  // for the slowest worker's push, so allow for a whole step.
  absl::Duration call_timeout = absl::Seconds(60);
  // How long Create() keeps trying to reach the shards (they may still be starting).
  absl::Duration connect_timeout = absl::Seconds(30);

  // --- Operations ---

  // Port of an HTTP endpoint with /metrics in Prometheus' text format (operations, latency,
  // bytes, retries, time waited on the parameter server) and /healthz; 0 picks a free one
  // (Client::metrics_address() says which); -1: none, and operations are not timed.
  int metrics_port = -1;
  std::string metrics_host = "0.0.0.0";

  // --- Affects performance ---

  // Tensors are cut into partitions of at most this many bytes, spread over the shards; small
  // tensors bound for one shard are packed into messages of up to this size. A multiple of 64.
  // A shard applies each partition's update on one thread, spreading it over its threads only
  // for partitions of 8 MiB or more. A partition's pull waits for its whole push, so a step
  // waits for one partition at each end of its pipeline: 512 KiB made push+pulls of 1 to 16 MiB
  // 1.2x to 1.8x faster than 4 MiB over every transport and kept large ones level
  // (bench/PERFORMANCE.md); on slow links `ps-plan` recommends smaller ones. Every worker of a
  // job, and a job restoring a checkpoint, must use the same size (shards refuse another).
  size_t partition_bytes = 512 << 10;
  // Largest message this client sends or accepts; must match the shards' --max_message_bytes.
  size_t max_message_bytes = 64 << 20;
};

// Element types. The shards keep fp32 master weights and optimizer state; gradients can travel
// as bf16 or fp16 to halve the bytes on the wire, and weights can come back in either.
enum class DType { kFp32, kBf16, kFp16 };

enum class SyncMode {
  // Bulk synchronous: the gradients of all workers for step s are summed (in rank order) and
  // applied once; the weights of version s + 1 are then available.
  kBsp,
  // Asynchronous: every push is applied when it arrives.
  kAsp,
};

// How the server fills a tensor's weights when it is declared without initial values. Random
// rules give the same values whatever the partitioning (each element is drawn from the seed and
// its index; formulas in server/random_draws.h), on every CPU the shards run on. Run one hetps
// build across a job's shards: another build may draw other values, and a backup refuses to
// take changes from a primary whose formulas differ (their copies would start apart).
struct Initializer {
  enum class Kind { kConstant, kUniform, kNormal };
  Kind kind = Kind::kConstant;
  double a = 0;  // constant value; uniform low; normal mean
  double b = 0;  // uniform high; normal standard deviation
  uint64_t seed = 0;

  static Initializer Zeros() { return {}; }
  static Initializer Constant(double value) { return {Kind::kConstant, value, 0, 0}; }
  static Initializer Uniform(double low, double high, uint64_t seed) {
    return {Kind::kUniform, low, high, seed};
  }
  static Initializer Normal(double mean, double stddev, uint64_t seed) {
    return {Kind::kNormal, mean, stddev, seed};
  }
};

// A server-side update rule and its hyperparameters, with torch.optim's names, meanings and
// defaults (booleans as 0 or 1):
//   "sgd"     lr, momentum, dampening, weight_decay, nesterov, maximize
//   "adagrad" lr, lr_decay, weight_decay, initial_accumulator_value, eps, maximize
//   "rmsprop" lr, alpha, eps, weight_decay, momentum, centered, maximize
//   "adam"    lr, beta1, beta2, eps, weight_decay, amsgrad, maximize
//   "adamw"   the same as adam; weight_decay (default 1e-2) is decoupled
//   "sum"     no optimizer on the shards: version s + 1 holds the sum of step s's gradients
struct OptimizerSpec {
  std::string name = "sgd";
  std::map<std::string, double> params;
};

struct TensorSpec {
  // Unique within the job; the tensor's id is derived from it.
  std::string name;
  uint64_t num_elements = 0;
  SyncMode sync = SyncMode::kBsp;
  OptimizerSpec optimizer;
  // Used when Declare() gets no initial values.
  Initializer init = Initializer::Zeros();
  // How gradients travel to the shards and weights come back. Values passed in another type
  // are converted by the client (round to nearest even).
  DType push_dtype = DType::kFp32;
  DType pull_dtype = DType::kFp32;
};

// One shard's figures, from Client::Stats().
struct ShardStats {
  uint32_t shard_index = 0;
  uint64_t num_tensors = 0;
  uint64_t num_partitions = 0;
  uint64_t parameter_bytes = 0;
  uint64_t optimizer_state_bytes = 0;
  uint64_t data_requests = 0;  // push, pull and push-pull messages received
  uint64_t push_items = 0;     // partitions pushed
  uint64_t pull_items = 0;     // partitions pulled
  uint64_t payload_bytes_received = 0;
  uint64_t payload_bytes_sent = 0;
  uint64_t failed_requests = 0;
  uint64_t pushes_refused = 0;       // push items answered with an error, never applied
  uint64_t requests_waiting = 0;     // now: pulls waiting for the other workers' pushes
  uint64_t checkpoints_waiting = 0;  // now: Client::Checkpoint calls waiting for their step
  uint64_t last_checkpoint = 0;      // the newest step of which its checkpoint part is durable
  uint64_t backup_partitions = 0;    // --replicas 2: copies it keeps of the previous shard's
  uint64_t replication_resends = 0;  // batches its backup did not take at the first attempt
  uint64_t tensors_dropped = 0;      // since the shard started (Client::Drop)
  uint64_t min_version = 0;          // over this shard's partitions
  uint64_t max_version = 0;
};

}  // namespace hetps

#endif  // HETPS_WORKER_OPTIONS_H_
