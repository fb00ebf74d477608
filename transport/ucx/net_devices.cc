#include "transport/ucx/net_devices.h"

#include <arpa/inet.h>
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
#include "transport/internal/local_address.h"

namespace hetps::transport::ucx_internal {
namespace {

using internal::HostPort;
using internal::InterfaceHolding;
using internal::IsLoopbackAddress;
using internal::NumericHost;
using internal::SplitHostPort;

// The local address the kernel would send from to reach `peer` (no packet is sent).
std::string SourceAddressFor(const sockaddr* peer, socklen_t length) {
  const int fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_storage source = {};
  socklen_t source_length = sizeof(source);
  const bool routed = connect(fd, peer, length) == 0 &&
                      getsockname(fd, reinterpret_cast<sockaddr*>(&source), &source_length) == 0;
  close(fd);
  return routed ? NumericHost(reinterpret_cast<sockaddr*>(&source), source_length) : "";
}

// The devices for `interface`: it and every RDMA port.
std::string WithRdma(const std::string& interface) {
  std::vector<std::string> devices = RdmaPorts();
  devices.insert(devices.begin(), interface);
  return absl::StrJoin(devices, ",");
}

}  // namespace

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
  const HostPort split = SplitHostPort(address);
  if (split.host.empty() || split.host == "0.0.0.0" || split.host == "::") return "";
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(split.host.c_str(), split.port.empty() ? "9" : split.port.c_str(), &hints,
                  &resolved) != 0) {
    return "";
  }
  const std::string peer = NumericHost(resolved->ai_addr, resolved->ai_addrlen);
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
