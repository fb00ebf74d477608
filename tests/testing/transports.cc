#include "tests/testing/transports.h"

#include <algorithm>

#include "transport/grpc/grpc_transport.h"
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
#ifdef HETPS_HAVE_UCX
  if (name == "ucx" || name == "ucx-tcp" || name == "ucx-busy") {
    transport::UcxOptions options;
    options.max_message_bytes = max_message_bytes;
    if (name == "ucx-tcp") options.tls = "tcp";
    options.busy_poll = name == "ucx-busy";
    // A known eager/rendezvous switch, so tests can send payloads exactly at and around it.
    options.rndv_threshold = kTestRendezvousThreshold;
    return transport::NewUcxTransport(options);
  }
#endif
  return transport::NewGrpcTransport({max_message_bytes});
}

std::string TestName(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace hetps::testing
