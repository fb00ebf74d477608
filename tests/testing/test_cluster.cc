#include "tests/testing/test_cluster.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/testing/transports.h"

namespace hetps::testing {

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(const std::string& transport,
                                                                int num_shards, int num_workers,
                                                                const server::ServerOptions& base) {
  auto cluster = std::make_unique<TestCluster>();
  cluster->num_workers_ = num_workers;
  if (transport == "inproc") cluster->inproc_ = transport::NewInProcTransport();
  const bool ucx = transport.rfind("ucx", 0) == 0;
  if (ucx) cluster->client_transport_ = NewTestTransport(transport);
  for (int i = 0; i < num_shards; ++i) {
    server::ServerOptions options = base;
    options.shard_index = static_cast<uint32_t>(i);
    options.num_shards = static_cast<uint32_t>(num_shards);
    options.num_workers = static_cast<uint32_t>(num_workers);
    options.threads = 2;
    if (cluster->inproc_ != nullptr) {
      options.transport_instance = cluster->inproc_;
      options.listen_address = absl::StrCat("shard", i, ":0");
    } else {
      options.transport = transport;
      // Shards sleep when idle even under a busy-polling client: no core spins for each.
      if (ucx) {
        options.transport_instance = NewTestTransport(transport == "ucx-busy" ? "ucx" : transport,
                                                      server::TransportOptionsFor(options));
      }
      options.listen_address = "127.0.0.1:0";
    }
    HETPS_ASSIGN_OR_RETURN(std::unique_ptr<server::ShardServer> server,
                           server::ShardServer::Start(options));
    cluster->addresses_.push_back(server->address());
    cluster->servers_.push_back(std::move(server));
  }
  return cluster;
}

ClientOptions TestCluster::ClientOptionsFor(uint32_t rank) const {
  ClientOptions options;
  options.servers = addresses_;
  options.rank = rank;
  options.world_size = static_cast<uint32_t>(num_workers_);
  options.transport = inproc_ != nullptr ? "inproc" : "grpc";
  options.transport_instance = inproc_;
  if (client_transport_ != nullptr) options.transport_instance = client_transport_;
  options.call_timeout = absl::Seconds(20);
  options.connect_timeout = absl::Seconds(10);
  options.partition_bytes = 1024;  // small, so small tests still cut tensors into partitions
  return options;
}

absl::StatusOr<std::unique_ptr<Client>> TestCluster::NewClient(uint32_t rank) const {
  return Client::Create(ClientOptionsFor(rank));
}

}  // namespace hetps::testing
