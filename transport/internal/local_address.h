// Whether an address names this machine, for choices that differ between a peer on the same
// machine (loopback, or an address of one of its interfaces) and one across a network.
#ifndef HETPS_TRANSPORT_INTERNAL_LOCAL_ADDRESS_H_
#define HETPS_TRANSPORT_INTERNAL_LOCAL_ADDRESS_H_

#include <sys/socket.h>

#include <string>

namespace hetps::transport::internal {

struct HostPort {
  std::string host;  // without [] around an IPv6 address
  std::string port;  // empty if `address` names none
};

// "host:port" or "[v6]:port" into its parts.
HostPort SplitHostPort(const std::string& address);

// The numeric form of a socket address ("10.0.0.1", "::1"); empty if it has none.
std::string NumericHost(const sockaddr* address, socklen_t length);

// True for 127.0.0.0/8, localhost and [::1].
bool IsLoopbackAddress(const std::string& address);

// The interface that holds `ip` (a numeric address), without an alias's ":label"; empty if none.
std::string InterfaceHolding(const std::string& ip);

// True where `address` ("host:port") is this machine as its network namespace sees it: a
// loopback address, or one that an interface here holds. A name is resolved (its first
// address counts); one that does not resolve is not this machine.
bool IsThisMachine(const std::string& address);

}  // namespace hetps::transport::internal

#endif  // HETPS_TRANSPORT_INTERNAL_LOCAL_ADDRESS_H_
