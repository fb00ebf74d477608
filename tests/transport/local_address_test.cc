// Which addresses are this machine (transport/internal/local_address.h): loopback, names that
// resolve to it and the addresses its interfaces hold; a neighbour on a subnet and a name that
// does not resolve are not.
#include "transport/internal/local_address.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/interfaces.h"

namespace hetps::transport::internal {
namespace {

using ::hetps::testing::Dotted;
using ::hetps::testing::Ipv4Interface;
using ::hetps::testing::Neighbour;
using ::hetps::testing::NonLoopbackInterfaces;

TEST(LocalAddressTest, LoopbackAddressesAreThisMachine) {
  for (const char* address : {"127.0.0.1:7000", "127.0.1.1:7000", "localhost:7000", "[::1]:7000"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
    EXPECT_TRUE(IsThisMachine(address)) << address;
  }
}

TEST(LocalAddressTest, AnInterfacesOwnAddressIsThisMachineAndItsNeighbourIsNot) {
  const std::vector<Ipv4Interface> interfaces = NonLoopbackInterfaces();
  if (interfaces.empty()) GTEST_SKIP() << "no IPv4 interface other than lo here";
  for (const Ipv4Interface& interface : interfaces) {
    const std::string own = Dotted(interface.address);
    EXPECT_EQ(InterfaceHolding(own), interface.name) << own;
    EXPECT_TRUE(IsThisMachine(absl::StrCat(own, ":7000"))) << own;
    EXPECT_FALSE(IsLoopbackAddress(absl::StrCat(own, ":7000"))) << own;
    const std::string neighbour = Dotted(Neighbour(interface));
    EXPECT_EQ(InterfaceHolding(neighbour), "") << neighbour;
    EXPECT_FALSE(IsThisMachine(absl::StrCat(neighbour, ":7000"))) << neighbour;
  }
}

TEST(LocalAddressTest, UnresolvedNamesAndOtherNetworksAreNotThisMachine) {
  EXPECT_FALSE(IsThisMachine("no-such-host.invalid:7000"));
  EXPECT_FALSE(IsThisMachine("192.0.2.1:7000"));  // TEST-NET-1, held by no interface here
  EXPECT_FALSE(IsThisMachine(":7000"));
}

TEST(LocalAddressTest, HostAndPortSplit) {
  EXPECT_EQ(SplitHostPort("10.0.0.1:7000").host, "10.0.0.1");
  EXPECT_EQ(SplitHostPort("10.0.0.1:7000").port, "7000");
  EXPECT_EQ(SplitHostPort("[fe80::1]:7000").host, "fe80::1");
  EXPECT_EQ(SplitHostPort("[fe80::1]:7000").port, "7000");
}

}  // namespace
}  // namespace hetps::transport::internal
