// When a UCX client must do without memory-mapped transports (transport/ucx/shared_memory.h):
// the machine-and-namespaces comparison and the UCX_TLS rewriting. (Across real network
// namespaces: tests/integration/net_devices_test.sh.)
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/shared_memory.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace hetps::transport::ucx_internal {
namespace {

TEST(SharedMemoryTest, ThisProcessNamesItsMachineAndNamespaces) {
  const std::string& own = MachineAndNamespaces();
  ASSERT_FALSE(own.empty()) << "/proc/sys/kernel/random/boot_id or /proc/self/ns unreadable";
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(own, ' ')).size(), 3u) << own;
  EXPECT_FALSE(WakeupsCannotCross(own, own));
}

TEST(SharedMemoryTest, OnlyAnotherNetworkNamespaceOfTheSameMachineAndIpcLosesWakeups) {
  EXPECT_TRUE(WakeupsCannotCross("boot ipc:1 net:1", "boot ipc:1 net:2"));
  EXPECT_FALSE(WakeupsCannotCross("boot ipc:1 net:1", "boot ipc:1 net:1"));
  EXPECT_FALSE(WakeupsCannotCross("boot ipc:1 net:1", "boot ipc:2 net:2"));   // no shared memory
  EXPECT_FALSE(WakeupsCannotCross("boot ipc:1 net:1", "other ipc:1 net:2"));  // other machine
  EXPECT_FALSE(WakeupsCannotCross("", "boot ipc:1 net:2"));  // an older client says nothing
  EXPECT_FALSE(WakeupsCannotCross("boot ipc:1 net:1", "garbage"));
}

TEST(SharedMemoryTest, TransportListsThatMayMapMemory) {
  for (const char* tls : {"", "all", "sm", "shm", "mm", "sysv", "tcp,posix", "^tcp", "^cma"}) {
    EXPECT_TRUE(MayMapMemory(tls)) << tls;
  }
  for (const char* tls : {"tcp", "rc,tcp", "cma,tcp", "^mm", "^sm", "^tcp,shm", "ib"}) {
    EXPECT_FALSE(MayMapMemory(tls)) << tls;
  }
}

TEST(SharedMemoryTest, WithoutMappedMemoryKeepsEveryOtherTransport) {
  EXPECT_EQ(WithoutMappedMemory(""), "^mm");
  EXPECT_EQ(WithoutMappedMemory("all"), "^mm");
  EXPECT_EQ(WithoutMappedMemory("^ib"), "^ib,mm");
  EXPECT_EQ(WithoutMappedMemory("sm,tcp"), "cma,knem,tcp");
  EXPECT_EQ(WithoutMappedMemory("sysv,posix,tcp"), "tcp");
  EXPECT_EQ(WithoutMappedMemory("sysv"), "");  // nothing left
  for (const char* tls : {"", "all", "^ib", "sm,tcp", "sysv,posix,tcp"}) {
    EXPECT_FALSE(MayMapMemory(WithoutMappedMemory(tls))) << tls;
  }
}

TEST(SharedMemoryTest, TheRefusalIsRecognisedAndNamesThePeer) {
  const absl::Status refused = MappedMemoryRefused("10.0.0.1:7000");
  EXPECT_TRUE(IsMappedMemoryRefused(refused));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("10.0.0.1:7000"), absl::string_view::npos);
  EXPECT_FALSE(IsMappedMemoryRefused(absl::FailedPreconditionError(refused.message())));
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
