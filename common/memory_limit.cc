#include "common/memory_limit.h"

#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace hetps {
namespace {

// cgroup v1 writes a page-rounded 2^63 - 1 for "no limit"; anything this large is none.
constexpr uint64_t kUnlimited = uint64_t{1} << 62;

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool IsFile(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// The limit in `file` ("max", or a number of bytes), if it sets one.
std::optional<uint64_t> LimitIn(const std::string& file) {
  std::optional<std::string> text = ReadSmallFile(file);
  if (!text.has_value()) return std::nullopt;
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &bytes) || bytes >= kUnlimited) {
    return std::nullopt;
  }
  return bytes;
}

// The smallest limit in `file_name` from `mount` + `path` up to `mount` itself. Without cgroup
// namespaces the path names a directory below the mount; inside one (a container), the mount
// is the process's own cgroup and the path does not exist under it: then the walk starts at
// the deepest level that does.
void TightenAlong(const std::string& mount, std::string path, const std::string& file_name,
                  MemoryLimit* limit) {
  while (true) {
    const std::string file = mount + path + "/" + file_name;
    if (std::optional<uint64_t> bytes = LimitIn(file); bytes.has_value() && *bytes < limit->bytes) {
      limit->bytes = *bytes;
      limit->source = file;
    }
    if (path.empty() || path == "/") return;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
}

}  // namespace

MemoryLimit MemoryLimitUnder(const std::string& root, uint64_t physical_bytes) {
  MemoryLimit limit{physical_bytes, "physical memory"};
  const std::optional<std::string> cgroups = ReadSmallFile(root + "/proc/self/cgroup");
  if (!cgroups.has_value()) return limit;
  // Lines "id:controllers:path"; v2's is "0::path", v1's memory one names "memory".
  for (absl::string_view line : absl::StrSplit(*cgroups, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    std::string path = fields[2];
    if (path == "/") path.clear();
    if (fields[0] == "0" && fields[1].empty()) {
      // A pure v2 hierarchy at /sys/fs/cgroup, or a hybrid's at /sys/fs/cgroup/unified.
      for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        if (IsFile(root + mount + "/cgroup.controllers")) {
          TightenAlong(root + mount, path, "memory.max", &limit);
          break;
        }
      }
    } else {
      for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
        if (controller == "memory") {
          TightenAlong(root + "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", &limit);
        }
      }
    }
  }
  return limit;
}

MemoryLimit ProcessMemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  const uint64_t physical =
      pages > 0 && page_bytes > 0 ? static_cast<uint64_t>(pages) * page_bytes : ~uint64_t{0};
  return MemoryLimitUnder("", physical);
}

}  // namespace hetps
