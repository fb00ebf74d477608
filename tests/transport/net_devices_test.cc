// UCX's "auto" network devices: lo for loopback addresses, the interface that holds a
// listener's address, the interface that routes to a peer, every device for a wildcard or an
// address that does not resolve, and the operator's UCX_NET_DEVICES where set. (Between
// namespaces with interfaces that lead nowhere: tests/integration/net_devices_test.sh.)
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/net_devices.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/interfaces.h"

namespace hetps::transport::ucx_internal {
namespace {

using ::hetps::testing::Dotted;
using ::hetps::testing::Ipv4Interface;
using ::hetps::testing::Neighbour;
using ::hetps::testing::NonLoopbackInterfaces;

// Clears UCX_NET_DEVICES for a test and puts back what was there.
class NetDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* set = std::getenv("UCX_NET_DEVICES")) saved_ = set;
    unsetenv("UCX_NET_DEVICES");
  }
  void TearDown() override {
    if (saved_.has_value()) setenv("UCX_NET_DEVICES", saved_->c_str(), 1);
  }

 private:
  std::optional<std::string> saved_;
};

// The first device of a list ("eth0,mlx5_0:1" -> "eth0").
std::string First(const std::string& devices) {
  return std::vector<std::string>(absl::StrSplit(devices, ','))[0];
}

TEST_F(NetDevicesTest, LoopbackAddressesUseLo) {
  for (const char* address : {"127.0.0.1:7000", "127.0.1.1:7000", "localhost:7000", "[::1]:7000"}) {
    EXPECT_EQ(AutoNetDevices(address, /*listening=*/false), "lo") << address;
    EXPECT_EQ(AutoNetDevices(address, /*listening=*/true), "lo") << address;
  }
}

TEST_F(NetDevicesTest, WildcardsAndUnresolvedNamesLeaveUcxEveryDevice) {
  EXPECT_EQ(AutoNetDevices("0.0.0.0:7000", /*listening=*/true), "");
  EXPECT_EQ(AutoNetDevices("[::]:7000", /*listening=*/true), "");
  EXPECT_EQ(AutoNetDevices("no-such-host.invalid:7000", /*listening=*/false), "");
}

TEST_F(NetDevicesTest, AListenerUsesTheInterfaceHoldingItsAddressAndAPeerTheOneRoutingToIt) {
  const std::vector<Ipv4Interface> interfaces = NonLoopbackInterfaces();
  if (interfaces.empty()) GTEST_SKIP() << "no IPv4 interface other than lo here";
  for (const Ipv4Interface& interface : interfaces) {
    const std::string own = absl::StrCat(Dotted(interface.address), ":7000");
    EXPECT_EQ(First(AutoNetDevices(own, /*listening=*/true)), interface.name) << own;
    // The kernel routes to one's own address through lo; UCX's TCP there reaches loopback
    // addresses only, so the interface that holds it serves.
    EXPECT_EQ(First(AutoNetDevices(own, /*listening=*/false)), interface.name) << own;
    // Another address of the interface's subnet is routed through it.
    const std::string peer = absl::StrCat(Dotted(Neighbour(interface)), ":7000");
    EXPECT_EQ(First(AutoNetDevices(peer, /*listening=*/false)), interface.name) << peer;
  }
}

TEST_F(NetDevicesTest, RdmaPortsComeAfterTheInterface) {
  const std::vector<Ipv4Interface> interfaces = NonLoopbackInterfaces();
  if (interfaces.empty()) GTEST_SKIP() << "no IPv4 interface other than lo here";
  std::vector<std::string> expected = RdmaPorts();
  expected.insert(expected.begin(), interfaces[0].name);
  EXPECT_EQ(AutoNetDevices(absl::StrCat(Dotted(interfaces[0].address), ":1"), true),
            absl::StrJoin(expected, ","));
}

TEST_F(NetDevicesTest, TheOperatorsUcxNetDevicesWinsOverAuto) {
  setenv("UCX_NET_DEVICES", "eth7", 1);
  EXPECT_EQ(AutoNetDevices("10.1.2.3:7000", /*listening=*/false), "");
  EXPECT_EQ(AutoNetDevices("127.0.0.1:7000", /*listening=*/false), "lo");
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
