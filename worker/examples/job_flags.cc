#include "worker/examples/job_flags.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/command_line.h"

ABSL_FLAG(std::string, servers, "", "Comma-separated shard addresses, in shard-index order");
ABSL_FLAG(uint32_t, rank, 0, "This worker's rank");
ABSL_FLAG(uint32_t, world_size, 1, "Number of workers");
ABSL_FLAG(std::string, job_id, "hetps", "Job name (must match the shards' --job_id)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the job's token, for shards started with one (empty: "
          "$HETPS_AUTH_TOKEN if set, else none)");
#ifdef HETPS_HAVE_UCX
ABSL_FLAG(std::string, transport, "ucx", "ucx or grpc");
#else
ABSL_FLAG(std::string, transport, "grpc", "grpc (this build has no UCX)");
#endif
ABSL_FLAG(uint64_t, partition_bytes, hetps::ClientOptions().partition_bytes,
          "Partition size in bytes (a multiple of 64)");
ABSL_FLAG(double, call_timeout_s, 60, "Deadline of each message to a shard, in seconds");
ABSL_FLAG(bool, ucx_busy_poll, false,
          "UCX: spin instead of sleeping when idle; a waiting step then sends and receives its "
          "messages on its own thread (lowest latency, a busy CPU)");

ABSL_FLAG(int, metrics_port, -1,
          "Port of the worker's /metrics page (Prometheus); 0 picks a free one; -1: none");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0", "Address the /metrics page listens on");

namespace hetps::examples {

void ParseJobCommandLine(int argc, char** argv, absl::string_view main_file,
                         absl::string_view usage) {
  ParseCommandLine(argc, argv, main_file, usage, {"job_flags.cc"});
}

ClientOptions ClientOptionsFromFlags() {
  ClientOptions options;
  options.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.transport = absl::GetFlag(FLAGS_transport);
  options.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  // Room for a partition and its header, as the client requires.
  options.max_message_bytes =
      std::max<size_t>(options.max_message_bytes, options.partition_bytes + (1 << 20));
  options.call_timeout = absl::Seconds(absl::GetFlag(FLAGS_call_timeout_s));
  options.ucx_busy_poll = absl::GetFlag(FLAGS_ucx_busy_poll);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  return options;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 2;
}

}  // namespace hetps::examples
