#include "transport/internal/local_address.h"

#include <ifaddrs.h>
#include <netdb.h>

#include "absl/strings/match.h"

namespace hetps::transport::internal {

HostPort SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort split{address.substr(0, colon),
                 colon == std::string::npos ? "" : address.substr(colon + 1)};
  if (split.host.size() >= 2 && split.host.front() == '[' && split.host.back() == ']') {
    split.host = split.host.substr(1, split.host.size() - 2);
  }
  return split;
}

std::string NumericHost(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  if (getnameinfo(address, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

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
    if (NumericHost(entry->ifa_addr, length) == ip) name = entry->ifa_name;
  }
  freeifaddrs(interfaces);
  return name.substr(0, name.find(':'));  // "eth0:1" is an address of eth0
}

bool IsThisMachine(const std::string& address) {
  if (IsLoopbackAddress(address)) return true;
  const HostPort split = SplitHostPort(address);
  if (split.host.empty()) return false;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(split.host.c_str(), nullptr, &hints, &resolved) != 0) return false;
  const std::string ip = NumericHost(resolved->ai_addr, resolved->ai_addrlen);
  freeaddrinfo(resolved);
  return absl::StartsWith(ip, "127.") || ip == "::1" || !InterfaceHolding(ip).empty();
}

}  // namespace hetps::transport::internal
