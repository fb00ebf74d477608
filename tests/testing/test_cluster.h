// TestCluster: shard servers started inside the test process, over a chosen transport
// ("inproc", or one of testing::TransportsUnderTest() on 127.0.0.1), and client options that
// point at them. For tests that exercise the client and the shards without separate processes.
#ifndef HETPS_TESTS_TESTING_TEST_CLUSTER_H_
#define HETPS_TESTS_TESTING_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/server.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/client.h"

namespace hetps::testing {

class TestCluster {
 public:
  // `base` gives the shards' options; index, counts, transport and address are set here.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(
      const std::string& transport, int num_shards, int num_workers,
      const server::ServerOptions& base = server::ServerOptions());

  ClientOptions ClientOptionsFor(uint32_t rank) const;
  absl::StatusOr<std::unique_ptr<Client>> NewClient(uint32_t rank) const;

  server::ShardServer& shard(int i) { return *servers_[i]; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  // The in-process transport (null for grpc).
  const std::shared_ptr<transport::InProcTransport>& inproc() const { return inproc_; }

 private:
  std::shared_ptr<transport::InProcTransport> inproc_;
  std::shared_ptr<transport::Transport> client_transport_;  // UCX: shared by the clients
  int num_workers_ = 0;
  std::vector<std::unique_ptr<server::ShardServer>> servers_;
  std::vector<std::string> addresses_;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_TEST_CLUSTER_H_
