// ps-bench's command line made into a Plan: what to measure, on which cluster (embedded or
// --servers), with which settings, and where the figures go. The flags are defined in
// ps_bench_plan.cc; ps_bench.cc runs the plan.
#ifndef HETPS_BENCH_PS_BENCH_PLAN_H_
#define HETPS_BENCH_PS_BENCH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/json.h"
#include "bench/runner.h"
#include "bench/security.h"

namespace hetps::bench {

struct Plan {
  std::vector<std::string> transports;
  std::vector<SecuritySetting> security;  // measured one after the other per transport
  std::vector<uint32_t> replicas = {1};   // likewise, per security setting
  std::vector<bool> metrics = {false};    // likewise, per replica count
  std::vector<std::string> ops;
  std::vector<uint64_t> sizes;
  MeasureSettings settings;  // op, bytes and transport filled in per measurement
  bool embedded = true;
  int workers = 2;  // in this process
  int shards = 2;
  std::vector<std::string> servers;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  absl::Duration timeout;
  std::string dtype_label;  // the wire type, and the memory type where it differs
  std::string job_id;
  std::string etcd;  // embedded shards with 2 replicas hold their leases there
  std::string pin;   // CPUs to run on (empty: any)
  bool ucx_busy_poll = false;
  std::string ucx_net_devices;
  // Where the figures go as rows are measured (empty: nowhere).
  std::string json_path, csv_path, plot_path;
};

// The plan the flags describe, or InvalidArgument naming the flag at fault (ResourceExhausted:
// the sweep cannot fit in this machine's memory). Writes nothing but `scratch`'s files.
absl::StatusOr<Plan> MakePlan(ScratchFiles& scratch);

// The run's settings, as the --json file records them.
JsonValue ConfigJson(const Plan& plan);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_PS_BENCH_PLAN_H_
