// Which UCX transports (lanes) an endpoint uses, described for the log and read back for the
// choices that depend on them, and the rendezvous threshold a worker's context gets.
#ifndef HETPS_TRANSPORT_UCX_UCX_LANES_H_
#define HETPS_TRANSPORT_UCX_UCX_LANES_H_

#include <ucp/api/ucp.h>

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace hetps::transport::ucx_internal {

// The RNDV_THRESH a worker's context gets (see UcxOptions::rndv_threshold), 0 for UCX's own:
// `configured` if set; else 0 when the environment sets UCX_RNDV_THRESH or `rdma_class_dir`
// lists a device; else 512 KiB.
size_t RendezvousThreshold(size_t configured, const char* rdma_class_dir = "/sys/class/infiniband");

// Which UCX transports an endpoint uses, for the log ("tcp/lo", "posix/memory", ...).
std::string DescribeLanes(ucp_ep_h ep);
// Whether lanes (as DescribeLanes puts them) carry messages over TCP through a network device,
// not loopback: where a large message may have to go eagerly (SendWindow).
bool LanesCrossANetworkOverTcp(absl::string_view lanes);
// Whether any of those lanes is UCX's TCP transport, loopback included.
bool LanesUseTcp(absl::string_view lanes);

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_LANES_H_
