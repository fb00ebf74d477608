// The transports the suites run over, like UCX's own tests run once per transport:
// "inproc", "grpc", and with UCX "ucx" (UCX's choice: shared memory between local processes)
// and "ucx-tcp" (UCX limited to TCP over loopback). "ucx-busy" is "ucx" with busy polling, where
// waiting callers drive the transport themselves; suites that test that path add it.
#ifndef HETPS_TESTS_TESTING_TRANSPORTS_H_
#define HETPS_TESTS_TESTING_TRANSPORTS_H_

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hetps::testing {

// `extra` (e.g. {"inproc"}) first, then "grpc" and the UCX variants this build has ("ucx",
// "ucx-tcp", and "ucx-busy" if `with_busy_poll`).
std::vector<std::string> TransportsUnderTest(const std::vector<std::string>& extra,
                                             bool with_busy_poll = false);

// UCX test transports switch from eager to rendezvous at this payload size.
inline constexpr size_t kTestRendezvousThreshold = 8192;

// A transport for one of the names above (not "inproc", which tests make themselves).
std::shared_ptr<transport::Transport> NewTestTransport(const std::string& name,
                                                       size_t max_message_bytes = 64 << 20);
std::shared_ptr<transport::Transport> NewTestTransport(const std::string& name,
                                                       const transport::TransportOptions& options);

// The greeting a worker of rank `rank` of `world_size` in job `job_id` (with the job's token,
// if any) sends shard `shard` of `num_shards` when it connects (shards admit connections on it),
// for tests that speak the wire protocol themselves.
transport::ConnectOptions WorkerGreeting(uint32_t shard, uint32_t num_shards, uint32_t rank,
                                         uint32_t world_size, const std::string& job_id = "hetps",
                                         const std::string& auth_token = "");

// Names usable in test names ("ucx-tcp" -> "ucx_tcp").
std::string TestName(std::string name);

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_TRANSPORTS_H_
