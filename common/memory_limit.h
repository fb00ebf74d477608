// The memory this process may use: the machine's RAM, or less where a cgroup of the process or
// one of its ancestors caps it (a container's limit, a systemd unit's MemoryMax=): cgroup v2's
// memory.max and v1's memory.limit_in_bytes, the smallest along the path. What a shard sizes
// its default --max_memory_bytes from, so that it refuses a declaration instead of being
// killed by the kernel's OOM killer.
#ifndef HETPS_COMMON_MEMORY_LIMIT_H_
#define HETPS_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace hetps {

struct MemoryLimit {
  uint64_t bytes = 0;
  // Where it comes from: "physical memory", or the cgroup file that sets it.
  std::string source;
};

// Of this process.
MemoryLimit ProcessMemoryLimit();
// The same, reading /proc/self/cgroup and /sys/fs/cgroup under `root` (tests give a directory
// laid out like them), for a machine of `physical_bytes`.
MemoryLimit MemoryLimitUnder(const std::string& root, uint64_t physical_bytes);

}  // namespace hetps

#endif  // HETPS_COMMON_MEMORY_LIMIT_H_
