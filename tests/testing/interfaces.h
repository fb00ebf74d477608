// This machine's IPv4 interfaces, for tests of choices that depend on which interface holds or
// routes an address.
#ifndef HETPS_TESTS_TESTING_INTERFACES_H_
#define HETPS_TESTS_TESTING_INTERFACES_H_

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hetps::testing {

struct Ipv4Interface {
  std::string name;
  in_addr address;
  in_addr mask;
};

// This machine's IPv4 interfaces other than lo, with a subnet of four addresses or more.
inline std::vector<Ipv4Interface> NonLoopbackInterfaces() {
  std::vector<Ipv4Interface> found;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return found;
  for (ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const std::string name = entry->ifa_name;
    const in_addr address = reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr;
    const in_addr mask = reinterpret_cast<sockaddr_in*>(entry->ifa_netmask)->sin_addr;
    if (name == "lo" || ntohl(mask.s_addr) > 0xfffffffcu) continue;
    found.push_back({name.substr(0, name.find(':')), address, mask});
  }
  freeifaddrs(interfaces);
  return found;
}

inline std::string Dotted(in_addr address) {
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

// Another address of the interface's subnet (the first or second host address), which the
// interface does not hold.
inline in_addr Neighbour(const Ipv4Interface& interface) {
  const uint32_t network = ntohl(interface.address.s_addr) & ntohl(interface.mask.s_addr);
  in_addr neighbour;
  neighbour.s_addr =
      htonl(network + 1 == ntohl(interface.address.s_addr) ? network + 2 : network + 1);
  return neighbour;
}

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_INTERFACES_H_
