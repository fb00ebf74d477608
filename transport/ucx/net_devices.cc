#include "transport/ucx/net_devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace hetps::transport::ucx_internal {
namespace {

struct HostPort {
  std::string host;  // without [] around an IPv6 address
  std::string port;
};

HostPort Split(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort split{address.substr(0, colon),
                 colon == std::string::npos ? "" : address.substr(colon + 1)};
  if (split.host.size() >= 2 && split.host.front() == '[' && split.host.back() == ']') {
    split.host = split.host.substr(1, split.host.size() - 2);
  }
  return split;
}

std::string Numeric(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  if (getnameinfo(address, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

// The local address the kernel would send from to reach `peer` (no packet is sent).
std::string SourceAddressFor(const sockaddr* peer, socklen_t length) {
  const int fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_storage source = {};
  socklen_t source_length = sizeof(source);
  const bool routed = connect(fd, peer, length) == 0 &&
                      getsockname(fd, reinterpret_cast<sockaddr*>(&source), &source_length) == 0;
  close(fd);
  return routed ? Numeric(reinterpret_cast<sockaddr*>(&source), source_length) : "";
}

// The devices for `interface`: it and every RDMA port.
std::string WithRdma(const std::string& interface) {
  std::vector<std::string> devices = RdmaPorts();
  devices.insert(devices.begin(), interface);
  return absl::StrJoin(devices, ",");
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return absl::StartsWith(host, "127.") || host == "localhost" || host == "[::1]";
}

std::string InterfaceHolding(const std::string& ip) {
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return "";
  std::string name;
  for (ifaddrs* entry = interfaces; entry != nullptr && name.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (Numeric(entry->ifa_addr, length) == ip) name = entry->ifa_name;
  }
  freeifaddrs(interfaces);
  return name.substr(0, name.find(':'));  // "eth0:1" is an address of eth0
}

std::vector<std::string> RdmaPorts() {
  std::vector<std::string> ports;
  std::error_code error;
  for (const auto& device : std::filesystem::directory_iterator("/sys/class/infiniband", error)) {
    for (const auto& port : std::filesystem::directory_iterator(device.path() / "ports", error)) {
      ports.push_back(device.path().filename().string() + ":" + port.path().filename().string());
    }
  }
  return ports;
}

std::string AutoNetDevices(const std::string& address, bool listening) {
  if (IsLoopbackAddress(address)) return "lo";
  if (std::getenv("UCX_NET_DEVICES") != nullptr) return "";  // the operator's choice
  const HostPort split = Split(address);
  if (split.host.empty() || split.host == "0.0.0.0" || split.host == "::") return "";
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(split.host.c_str(), split.port.empty() ? "9" : split.port.c_str(), &hints,
                  &resolved) != 0) {
    return "";
  }
  const std::string peer = Numeric(resolved->ai_addr, resolved->ai_addrlen);
  const std::string local =
      listening ? peer : SourceAddressFor(resolved->ai_addr, resolved->ai_addrlen);
  freeaddrinfo(resolved);
  if (absl::StartsWith(peer, "127.") || peer == "::1") return "lo";
  const std::string interface = local.empty() ? "" : InterfaceHolding(local);
  if (interface.empty() || interface == "lo") {
    // An address of this machine is reached through lo, but UCX's TCP over lo reaches only
    // loopback addresses: the interface that holds the address serves it.
    const std::string holder = InterfaceHolding(peer);
    if (!holder.empty() && holder != "lo") return WithRdma(holder);
    LogInfo("ucx: no interface found for %s; UCX may use any", address);
    return "";
  }
  return WithRdma(interface);
}

}  // namespace hetps::transport::ucx_internal
