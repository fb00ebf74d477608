#include "tests/testing/transports.h"

#include <algorithm>

#include "common/random_id.h"
#include "transport/grpc/grpc_transport.h"
#include "worker/internal/wire_format.h"
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace hetps::testing {

std::vector<std::string> TransportsUnderTest(const std::vector<std::string>& extra,
                                             bool with_busy_poll) {
  std::vector<std::string> names = extra;
  names.push_back("grpc");
#ifdef HETPS_HAVE_UCX
  names.push_back("ucx");
  names.push_back("ucx-tcp");
  if (with_busy_poll) names.push_back("ucx-busy");
#else
  (void)with_busy_poll;
#endif
  return names;
}

std::shared_ptr<transport::Transport> NewTestTransport(const std::string& name,
                                                       size_t max_message_bytes) {
  transport::TransportOptions options;
  options.max_message_bytes = max_message_bytes;
  return NewTestTransport(name, options);
}

std::shared_ptr<transport::Transport> NewTestTransport(const std::string& name,
                                                       const transport::TransportOptions& shared) {
#ifdef HETPS_HAVE_UCX
  if (name == "ucx" || name == "ucx-tcp" || name == "ucx-busy") {
    transport::UcxOptions options;
    options.max_message_bytes = shared.max_message_bytes;
    options.shared = shared;
    if (name == "ucx-tcp") options.tls = "tcp";
    options.busy_poll = name == "ucx-busy";
    // A known eager/rendezvous switch, so tests can send payloads exactly at and around it.
    options.rndv_threshold = kTestRendezvousThreshold;
    return transport::NewUcxTransport(options);
  }
#endif
  return transport::NewGrpcTransport(shared);
}

transport::ConnectOptions WorkerGreeting(uint32_t shard, uint32_t num_shards, uint32_t rank,
                                         uint32_t world_size, const std::string& job_id,
                                         const std::string& auth_token) {
  ClientOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.job_id = job_id;
  transport::ConnectOptions connect;
  connect.greeting = internal::MakeHello(options, shard, num_shards, NewRandomId(), auth_token)
                         .SerializeAsString();
  return connect;
}

std::string TestName(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace hetps::testing
