// The network devices UCX may use for one peer or listener when the caller said "auto".
//
// UCX over TCP offers a peer every interface of the process and connects to any the peer
// offers, so an interface the other side has no route to (a container bridge, a private link,
// a second network) fails the connection with "Destination is unreachable" in some runs and
// not others. "auto" names instead the interface that carries the traffic anyway:
//   - a loopback address: lo;
//   - a listener's address: the interface that holds it (a wildcard address: every interface,
//     unless the listener is told where peers reach it: UcxOptions::advertised_address);
//   - a peer's address: the interface the kernel routes it through;
// plus every RDMA port (RDMA decides its own reachability). Where none is found (an address
// that does not resolve, a route through no interface), every interface, as UCX would.
#ifndef HETPS_TRANSPORT_UCX_NET_DEVICES_H_
#define HETPS_TRANSPORT_UCX_NET_DEVICES_H_

#include <string>
#include <vector>

namespace hetps::transport::ucx_internal {

// UCX_NET_DEVICES for `address` ("host:port", "[v6]:port"); empty: every device. A
// UCX_NET_DEVICES in the environment wins for non-loopback addresses.
std::string AutoNetDevices(const std::string& address, bool listening);

// Every port of every RDMA device, as UCX names them ("mlx5_0:1").
std::vector<std::string> RdmaPorts();

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_NET_DEVICES_H_
