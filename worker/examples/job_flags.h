// What every example job is told on its command line to find its shards (--servers, --rank,
// --world_size, --job_id, --transport, --partition_bytes, --call_timeout_s), and the client
// options that makes.
#ifndef HETPS_WORKER_EXAMPLES_JOB_FLAGS_H_
#define HETPS_WORKER_EXAMPLES_JOB_FLAGS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/options.h"

namespace hetps::examples {

// Parses the command line; --help lists the flags of `main_file` and these.
void ParseJobCommandLine(int argc, char** argv, absl::string_view main_file,
                         absl::string_view usage);

// REQUIRES: the command line has been parsed.
ClientOptions ClientOptionsFromFlags();

// Prints "error: <status>" to stderr; returns the exit code for it.
int Fail(const absl::Status& status);

}  // namespace hetps::examples

#endif  // HETPS_WORKER_EXAMPLES_JOB_FLAGS_H_
