// The test harness's ports (tests/testing/ports.h): a port StablePort gave stays reserved for
// the process that took it, even while nothing listens on it (a shard killed, to be restarted
// on its port), for this process and for others.
#include "tests/testing/ports.h"

#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "gtest/gtest.h"

namespace hetps::testing {
namespace {

int RandomLowPort() {
  std::mt19937 random(std::random_device{}());
  return std::uniform_int_distribution<int>(20000, 30000)(random);
}

TEST(PortsTest, APickedPortStaysReservedWhileNothingListensOnIt) {
  // Two ports, nothing listening on either: the first two picks take both, and the third finds
  // both reserved and falls back to the ephemeral range.
  const int lowest = RandomLowPort();
  const int first = StablePortIn(lowest, lowest + 1);
  const int second = StablePortIn(lowest, lowest + 1);
  const int third = StablePortIn(lowest, lowest + 1);
  for (int port : {first, second}) {
    EXPECT_GE(port, lowest);
    EXPECT_LE(port, lowest + 1);
  }
  EXPECT_NE(first, second);
  EXPECT_TRUE(third < lowest || third > lowest + 1) << third << " was picked twice";
}

TEST(PortsTest, AnotherProcessDoesNotPickAReservedPort) {
  const int lowest = RandomLowPort();
  const int port = StablePortIn(lowest, lowest + 1000);
  ASSERT_NE(port, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(StablePortIn(port, port) == port ? 1 : 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the other process picked port " << port << " too";
}

}  // namespace
}  // namespace hetps::testing
