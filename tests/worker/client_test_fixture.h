// What the client test files share: a test cluster per transport (shards in this process) and
// a tensor spec helper. Parameterised by transport name (tests/testing/transports.h).
#ifndef HETPS_TESTS_WORKER_CLIENT_TEST_FIXTURE_H_
#define HETPS_TESTS_WORKER_CLIENT_TEST_FIXTURE_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/testing/test_cluster.h"
#include "worker/client.h"

namespace hetps::testing {

// An SGD tensor of `n` elements.
inline TensorSpec Spec(const std::string& name, uint64_t n, double lr = 0.1,
                       SyncMode sync = SyncMode::kBsp) {
  TensorSpec spec;
  spec.name = name;
  spec.num_elements = n;
  spec.sync = sync;
  spec.optimizer = {"sgd", {{"lr", lr}}};
  return spec;
}

class ClientClusterTest : public ::testing::TestWithParam<std::string> {
 protected:
  void StartCluster(int shards, int workers,
                    const server::ServerOptions& base = server::ServerOptions()) {
    auto cluster = TestCluster::Start(GetParam(), shards, workers, base);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }
  std::unique_ptr<Client> NewClient(uint32_t rank) {
    auto client = cluster_->NewClient(rank);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  // A one-shard cluster of two workers (c0_, c1_) that both declare `spec` (id_).
  void StartTwoWorkersWith(const TensorSpec& spec) {
    StartCluster(1, 2);
    c0_ = NewClient(0);
    c1_ = NewClient(1);
    for (Client* worker : {c0_.get(), c1_.get()}) {
      absl::StatusOr<TensorId> id = worker->Declare(spec);
      ASSERT_TRUE(id.ok()) << id.status();
      id_ = *id;
    }
  }
  uint64_t TotalDataRequests() {
    uint64_t total = 0;
    for (size_t i = 0; i < cluster_->addresses().size(); ++i) {
      total += cluster_->shard(static_cast<int>(i)).Stats().data_requests();
    }
    return total;
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<Client> c0_, c1_;
  TensorId id_ = 0;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_WORKER_CLIENT_TEST_FIXTURE_H_
