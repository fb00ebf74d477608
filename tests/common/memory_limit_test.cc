// The memory a process may use, from cgroup files laid out as the kernel shows them: v2 and v1,
// limits on ancestors, "no limit" spellings, and a container whose cgroup namespace hides the
// path /proc/self/cgroup names.
#include "common/memory_limit.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace hetps {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

class MemoryLimitTest : public ::testing::Test {
 protected:
  // Writes `contents` to `relative` under the fake root, making its directories.
  void Write(const std::string& relative, const std::string& contents) {
    std::string path = dir_.path();
    for (size_t at = 1; (at = relative.find('/', at)) != std::string::npos; ++at) {
      mkdir((path + relative.substr(0, at)).c_str(), 0755);
    }
    std::ofstream(path + relative) << contents;
  }
  MemoryLimit Limit() { return MemoryLimitUnder(dir_.path(), 64 * kGiB); }

  testing::ScopedTempDir dir_;
};

TEST_F(MemoryLimitTest, WithoutCgroupsItIsThePhysicalMemory) {
  const MemoryLimit limit = Limit();
  EXPECT_EQ(limit.bytes, 64 * kGiB);
  EXPECT_EQ(limit.source, "physical memory");
}

TEST_F(MemoryLimitTest, CgroupV2TakesTheSmallestLimitAlongThePath) {
  Write("/proc/self/cgroup", "0::/kubepods/pod1/shard\n");
  Write("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  Write("/sys/fs/cgroup/kubepods/memory.max", "max\n");
  Write("/sys/fs/cgroup/kubepods/pod1/memory.max", "8589934592\n");
  Write("/sys/fs/cgroup/kubepods/pod1/shard/memory.max", "max\n");
  const MemoryLimit limit = Limit();
  EXPECT_EQ(limit.bytes, 8 * kGiB);
  EXPECT_EQ(limit.source, dir_.path() + "/sys/fs/cgroup/kubepods/pod1/memory.max");
}

TEST_F(MemoryLimitTest, CgroupV2UnlimitedLeavesThePhysicalMemory) {
  Write("/proc/self/cgroup", "0::/system.slice/ps-server.service\n");
  Write("/sys/fs/cgroup/cgroup.controllers", "memory\n");
  Write("/sys/fs/cgroup/system.slice/ps-server.service/memory.max", "max\n");
  EXPECT_EQ(Limit().bytes, 64 * kGiB);
}

TEST_F(MemoryLimitTest, CgroupV1ReadsTheMemoryControllersLimit) {
  Write("/proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // none
  Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "4294967296\n");
  EXPECT_EQ(Limit().bytes, 4 * kGiB);
}

TEST_F(MemoryLimitTest, AHybridHierarchyReadsTheUnifiedMount) {
  Write("/proc/self/cgroup", "4:memory:/\n0::/job\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("/sys/fs/cgroup/unified/cgroup.controllers", "memory\n");
  Write("/sys/fs/cgroup/unified/job/memory.max", "2147483648\n");
  EXPECT_EQ(Limit().bytes, 2 * kGiB);
}

TEST_F(MemoryLimitTest, InsideACgroupNamespaceTheMountIsTheContainersOwnCgroup) {
  // The path names the container's cgroup on the host; the mount shows that cgroup as its
  // root, so the path does not exist below it.
  Write("/proc/self/cgroup", "0::/kubepods/pod7/container\n");
  Write("/sys/fs/cgroup/cgroup.controllers", "memory\n");
  Write("/sys/fs/cgroup/memory.max", "1073741824\n");
  EXPECT_EQ(Limit().bytes, kGiB);
}

TEST_F(MemoryLimitTest, ALimitAboveThePhysicalMemoryDoesNotRaiseIt) {
  Write("/proc/self/cgroup", "0::/big\n");
  Write("/sys/fs/cgroup/cgroup.controllers", "memory\n");
  Write("/sys/fs/cgroup/big/memory.max", "137438953472\n");  // 128 GiB
  EXPECT_EQ(Limit().bytes, 64 * kGiB);
}

TEST_F(MemoryLimitTest, MalformedFilesAreIgnored) {
  Write("/proc/self/cgroup", "garbage\n0::/x\n");
  Write("/sys/fs/cgroup/cgroup.controllers", "memory\n");
  Write("/sys/fs/cgroup/x/memory.max", "lots\n");
  EXPECT_EQ(Limit().bytes, 64 * kGiB);
}

TEST(ProcessMemoryLimitTest, ThisProcessHasALimitNoLargerThanTheMachine) {
  const MemoryLimit limit = ProcessMemoryLimit();
  EXPECT_GT(limit.bytes, 0u);
  EXPECT_FALSE(limit.source.empty());
}

}  // namespace
}  // namespace hetps
