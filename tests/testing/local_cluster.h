// LocalCluster: ps-server processes on 127.0.0.1 for integration tests. Each shard gets a free
// port below the ephemeral range (so that it can restart on it, see ports.h) and reports it
// through --port_file; every shard runs with --lifetime_s so it ends by itself even if the test
// does not stop it.
#ifndef HETPS_TESTS_TESTING_LOCAL_CLUSTER_H_
#define HETPS_TESTS_TESTING_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/testing/subprocess.h"

namespace hetps::testing {

class LocalCluster {
 public:
  ~LocalCluster();

  // Starts the shards and waits (bounded) until all listen. `env` ("NAME=value") goes to the
  // shards' environment (e.g. UCX_TLS).
  absl::Status Start(int num_shards, int num_workers,
                     const std::vector<std::string>& extra_flags = {},
                     const std::vector<std::string>& env = {});
  // Starts shard i again, on the port it had (after it was killed), with `more_flags` added to
  // this start's command line.
  absl::Status Restart(int i, const std::vector<std::string>& more_flags = {});

  const std::vector<std::string>& addresses() const { return addresses_; }
  // "a:1,b:2", as --servers takes it.
  std::string servers_flag() const;
  Subprocess& shard(int i) { return *shards_[i]; }
  std::string shard_log(int i) const;
  const std::string& dir() const { return dir_.path(); }

 private:
  absl::Status StartShard(int i, const std::vector<std::string>& more_flags = {});
  absl::Status AwaitPort(int i, absl::Time deadline);

  ScopedTempDir dir_;
  int num_shards_ = 0, num_workers_ = 0;
  std::vector<std::string> extra_flags_, env_;
  std::vector<std::unique_ptr<Subprocess>> shards_;
  std::vector<std::string> addresses_;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_LOCAL_CLUSTER_H_
