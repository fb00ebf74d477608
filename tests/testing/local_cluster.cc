#include "tests/testing/local_cluster.h"

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace hetps::testing {

absl::Status LocalCluster::Start(int num_shards, int num_workers,
                                 const std::vector<std::string>& extra_flags) {
  if (dir().empty()) return absl::InternalError("cannot make a temporary directory");
  for (int i = 0; i < num_shards; ++i) {
    std::vector<std::string> argv = {BinaryPath("server/ps-server"),
                                     "--host=127.0.0.1",
                                     "--port=0",
                                     absl::StrCat("--port_file=", dir(), "/port", i),
                                     absl::StrCat("--shard_index=", i),
                                     absl::StrCat("--num_shards=", num_shards),
                                     absl::StrCat("--num_workers=", num_workers),
                                     "--threads=2",
                                     "--lifetime_s=300"};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    shards_.push_back(std::make_unique<Subprocess>(argv, shard_log(i)));
    if (!shards_.back()->started()) return absl::InternalError("cannot start ps-server");
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < num_shards; ++i) {
    int port = 0;
    while (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(absl::StrCat(dir(), "/port", i))),
                             &port)) {
      if (!shards_[i]->running()) {
        return absl::InternalError(absl::StrCat("shard ", i, " exited: ", ReadFile(shard_log(i))));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("shard ", i, " did not start"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  }
  return absl::OkStatus();
}

LocalCluster::~LocalCluster() {
  shards_.clear();  // stop the shards before their directory goes
}

std::string LocalCluster::servers_flag() const { return absl::StrJoin(addresses_, ","); }

std::string LocalCluster::shard_log(int i) const {
  return absl::StrCat(dir(), "/shard", i, ".log");
}

}  // namespace hetps::testing
