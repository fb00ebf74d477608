// Shared memory between processes whose network namespaces differ.
//
// UCX's memory-mapped transports (sysv, posix, xpmem: the "mm" family) pass messages through a
// FIFO in shared memory and wake a sleeping receiver with a datagram to an abstract unix
// socket. Abstract sockets belong to a network namespace, so between two processes that share
// a machine and its IPC namespace but not the network namespace (containers run with
// --ipc=host, pods with hostIPC, namespaces on one host) UCX picks those transports, every
// wake-up is lost, and a message waits for the receiver's next look (up to 100 ms). A client
// whose worker may use them tells the server where it runs; the server, finding that case,
// opens nothing and says so, and the client bootstraps again from a worker without them (TCP
// or RDMA, and cma for large payloads, which needs no wake-up of its own).
#ifndef HETPS_TRANSPORT_UCX_SHARED_MEMORY_H_
#define HETPS_TRANSPORT_UCX_SHARED_MEMORY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace hetps::transport::ucx_internal {

// This process's machine (its boot id) and IPC and network namespaces, e.g.
// "0f2e...-a1 ipc:4026531839 net:4026531840"; empty where /proc does not say.
const std::string& MachineAndNamespaces();

// True when `client` and `server` (MachineAndNamespaces of each) share a machine and an IPC
// namespace but not the network namespace: memory-mapped transports would lose wake-ups.
bool WakeupsCannotCross(absl::string_view client, absl::string_view server);

// The UCX_TLS a worker made with `tls` runs with: `tls`, else the UCX_TLS environment
// variable, else empty (UCX's default).
std::string EffectiveTls(const std::string& tls);

// Whether UCX may pick a memory-mapped transport given a UCX_TLS value (empty: UCX's default,
// every transport).
bool MayMapMemory(absl::string_view tls);

// The UCX_TLS value without the memory-mapped transports (shared memory's "sm"/"shm" keep cma
// and knem); empty when nothing would remain.
std::string WithoutMappedMemory(absl::string_view tls);

// The status a client's bootstrap ends with when the server asks for a worker without
// memory-mapped transports, and the test for it.
absl::Status MappedMemoryRefused(absl::string_view address);
bool IsMappedMemoryRefused(const absl::Status& status);

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_SHARED_MEMORY_H_
