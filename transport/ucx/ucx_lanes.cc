#include "transport/ucx/ucx_lanes.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace hetps::transport::ucx_internal {

std::string DescribeLanes(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "unknown";
  ucp_ep_print_info(ep, stream);
  fclose(stream);
  // Lines look like "#   lane[0]:  3:posix/memory.0 md[2]  ... am am_bw#0".
  std::vector<std::string> lanes;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text, size), '\n')) {
    const size_t at = line.find("lane[");
    if (at == absl::string_view::npos) continue;
    lanes.emplace_back(absl::StripAsciiWhitespace(line.substr(at)));
  }
  std::free(text);
  return lanes.empty() ? "unknown" : absl::StrJoin(lanes, "; ");
}

bool LanesCrossANetworkOverTcp(absl::string_view lanes) {
  // A TCP lane reads "0:tcp/eth0.0 md[0] ..."; loopback's device is "lo".
  for (absl::string_view lane : absl::StrSplit(lanes, "; ")) {
    const size_t at = lane.find(":tcp/");
    if (at != absl::string_view::npos && !absl::StartsWith(lane.substr(at), ":tcp/lo.")) {
      return true;
    }
  }
  return false;
}

bool LanesUseTcp(absl::string_view lanes) { return absl::StrContains(lanes, ":tcp/"); }

size_t RendezvousThreshold(size_t configured, const char* rdma_class_dir) {
  if (configured > 0) return configured;
  if (std::getenv("UCX_RNDV_THRESH") != nullptr) return 0;  // UCX reads it itself
  if (DIR* devices = opendir(rdma_class_dir)) {
    bool any = false;
    while (const dirent* entry = readdir(devices)) {
      if (entry->d_name[0] != '.') any = true;
    }
    closedir(devices);
    if (any) return 0;
  }
  return size_t{512} << 10;
}

}  // namespace hetps::transport::ucx_internal
