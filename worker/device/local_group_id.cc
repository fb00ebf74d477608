// Handing a local group's id from rank 0 to the others through a file.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "worker/local_group.h"

namespace hetps {

absl::StatusOr<LocalGroupId> LocalGroup::IdThroughFile(const std::string& path, int rank,
                                                       absl::Time deadline) {
  if (rank == 0) {
    HETPS_ASSIGN_OR_RETURN(LocalGroupId id, NewId());
    // Written beside the final name and renamed, so a reader never sees half an id.
    const std::string temporary = absl::StrFormat("%s.%d.tmp", path, getpid());
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(id.data(), static_cast<std::streamsize>(id.size()));
      if (!out.good()) {
        return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", temporary));
      }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot rename %s to %s: %s", temporary, path, std::strerror(errno)));
    }
    return id;
  }
  absl::Duration backoff = absl::Milliseconds(1);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    LocalGroupId id;
    if (in.read(id.data(), static_cast<std::streamsize>(id.size())) &&
        in.gcount() == static_cast<std::streamsize>(id.size())) {
      return id;
    }
    if (hetps::Now() + backoff > deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "local rank %d: rank 0 did not write the group id to %s in time", rank, path));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(50));
  }
}

}  // namespace hetps
