// What one ps-bench worker measures: a parameter-server operation (push, pull or push-pull of
// one tensor of a given size) through the hetps client, and the floor: the same payload's raw
// round trip over the same transport to the same shards, with no parameter-server logic (the
// shards' echo method).
//
// Every worker of a run calls the same measurements in the same order (they meet at barriers),
// so in BSP each step has all its pushes.
#ifndef HETPS_BENCH_RUNNER_H_
#define HETPS_BENCH_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/latency.h"
#include "transport/transport.h"
#include "worker/client.h"

namespace hetps::bench {

struct MeasureSettings {
  std::string transport = "grpc";
  std::string op = "pushpull";      // push | pull | pushpull
  uint64_t bytes = 4096;            // payload of one operation, in `dtype`
  DType dtype = DType::kFp32;       // on the wire
  DType host_dtype = DType::kFp32;  // of the worker's tensors (the client converts)
  std::string optimizer = "sum";    // sum | sgd | adam
  SyncMode sync = SyncMode::kBsp;
  int warmup = 5;
  // Measured operations per worker; 0: as many as fit in `duration` (decided by rank 0 from
  // a calibration run, FitToDuration, and shared with the others).
  int iterations = 0;
  absl::Duration duration = absl::Milliseconds(500);
  int inflight = 1;  // outstanding operations per worker
  bool check = false;
  // Test hook: every n-th pulled buffer gets its first value changed before it is checked, as
  // a corrupted reply would (0: never).
  int corrupt_every = 0;
  // Bytes per message to one shard (the client's partition size).
  uint64_t chunk_bytes = 4 << 20;
};

// One worker's part of a measurement.
struct WorkerMeasurement {
  LatencySamples latency;
  uint64_t operations = 0;
  uint64_t payload_bytes = 0;  // a push-pull counts its bytes twice
  absl::Duration wall;
  uint64_t wrong = 0;
};

// Elements of `bytes` bytes of `dtype`: InvalidArgument unless it is a whole positive number.
absl::StatusOr<uint64_t> ElementsOf(uint64_t bytes, DType dtype);

// How many operations fill a measurement of `duration`. Operations that follow a quiet spell
// are slow (the first 4 KiB push+pulls after a declaration took 65 to 250 us, where later ones
// took 5: the threads on both sides slept, and each woke the other), so the warm-up's pace
// alone fitted a twentieth of the duration or less, right after the warm-up. A calibration run
// follows the warm-up (about a tenth of the duration at the warm-up's pace, `inflight` at a
// time, unmeasured), and its faster operations set the pace. `run(first_index, count,
// inflight)` runs operations first_index, first_index + 1, ... and measures all of them;
// `agree` turns a count into the one every worker uses (rank 0's).
struct DurationFit {
  uint64_t first_index = 0;  // of the measured operations (after the warm-up and calibration)
  int iterations = 0;        // measured operations
};
using RunOperations = absl::FunctionRef<absl::StatusOr<WorkerMeasurement>(uint64_t first_index,
                                                                          int count, int inflight)>;
absl::StatusOr<DurationFit> FitToDuration(absl::Duration duration, int warmup, int inflight,
                                          RunOperations run,
                                          absl::FunctionRef<absl::StatusOr<int>(int)> agree);

// REQUIRES: `client` belongs to worker `rank` of `world_size` and talks over `transport`.
class HetpsRunner {
 public:
  HetpsRunner(Client* client, std::shared_ptr<transport::Transport> transport, uint32_t rank,
              uint32_t world_size);
  // Each measurement's tensor is dropped from the shards once every worker is done with it,
  // so a sweep does not pile tensors up and the next run may measure another optimizer or dtype.
  absl::StatusOr<WorkerMeasurement> Measure(const MeasureSettings& settings);
  // How many operations the last Measure ran (the floor runs as many).
  int iterations() const { return iterations_; }
  // At the end of a run (every worker): drops what the runner still keeps on the shards.
  absl::Status Finish();

 private:
  // Waits for every worker, then rank 0 drops the tensor.
  absl::Status DropOnceAllAreDone(const std::string& name);

  // All workers agree on rank 0's count of measured operations.
  absl::StatusOr<int> AgreeIterations(int proposal);

  Client* const client_;
  const std::shared_ptr<transport::Transport> transport_;
  const uint32_t rank_;
  const uint32_t world_size_;
  TensorId control_ = 0;
  uint64_t agreements_ = 0;
  uint64_t measurements_ = 0;
  int iterations_ = 0;
};

// The floor: echo calls straight over the transport to every shard.
class FloorRunner {
 public:
  // Connects to `options.servers` as the worker `options` describes (shards admit only
  // connections that introduce themselves).
  static absl::StatusOr<std::unique_ptr<FloorRunner>> Connect(
      std::shared_ptr<transport::Transport> transport, const ClientOptions& options,
      absl::Duration call_timeout);
  // Runs `iterations` operations (as measured by HetpsRunner) after `settings.warmup` ones.
  absl::StatusOr<WorkerMeasurement> Measure(const MeasureSettings& settings, int iterations);

 private:
  FloorRunner() = default;

  std::shared_ptr<transport::Transport> transport_;
  std::vector<std::unique_ptr<transport::Connection>> connections_;
  absl::Duration call_timeout_;
};

}  // namespace hetps::bench

#endif  // HETPS_BENCH_RUNNER_H_
