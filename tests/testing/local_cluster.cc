#include "tests/testing/local_cluster.h"

#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/testing/ports.h"

namespace hetps::testing {

absl::Status LocalCluster::Start(int num_shards, int num_workers,
                                 const std::vector<std::string>& extra_flags,
                                 const std::vector<std::string>& env) {
  if (dir().empty()) return absl::InternalError("cannot make a temporary directory");
  num_shards_ = num_shards;
  num_workers_ = num_workers;
  extra_flags_ = extra_flags;
  env_ = env;
  shards_.resize(num_shards);
  addresses_.resize(num_shards);
  for (int i = 0; i < num_shards; ++i) {
    if (absl::Status started = StartShard(i); !started.ok()) return started;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < num_shards; ++i) {
    absl::Status listening = AwaitPort(i, deadline);
    // Another test's server may have taken the port picked for it: then it picks another.
    for (int retry = 0;
         retry < 3 && !listening.ok() && absl::StrContains(listening.message(), "cannot listen");
         ++retry) {
      if (absl::Status started = StartShard(i); !started.ok()) return started;
      listening = AwaitPort(i, deadline);
    }
    if (!listening.ok()) return listening;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartShard(int i, const std::vector<std::string>& more_flags) {
  // A restarted shard takes the port it had; a new one a port that no outgoing connection can
  // take while it is down (see ports.h).
  const std::string port = addresses_[i].empty()
                               ? absl::StrCat(StablePort())
                               : addresses_[i].substr(addresses_[i].rfind(':') + 1);
  std::remove(absl::StrCat(dir(), "/port", i).c_str());
  std::vector<std::string> argv = {BinaryPath("server/ps-server"),
                                   "--host=127.0.0.1",
                                   "--port=" + port,
                                   absl::StrCat("--port_file=", dir(), "/port", i),
                                   absl::StrCat("--shard_index=", i),
                                   absl::StrCat("--num_shards=", num_shards_),
                                   absl::StrCat("--num_workers=", num_workers_),
                                   "--threads=2",
                                   "--lifetime_s=300"};
  argv.insert(argv.end(), extra_flags_.begin(), extra_flags_.end());
  argv.insert(argv.end(), more_flags.begin(), more_flags.end());
  shards_[i] = std::make_unique<Subprocess>(argv, shard_log(i), env_);
  if (!shards_[i]->started()) return absl::InternalError("cannot start ps-server");
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitPort(int i, absl::Time deadline) {
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
  addresses_[i] = absl::StrCat("127.0.0.1:", port);
  return absl::OkStatus();
}

absl::Status LocalCluster::Restart(int i, const std::vector<std::string>& more_flags) {
  shards_[i].reset();  // ends it if it still runs
  if (absl::Status started = StartShard(i, more_flags); !started.ok()) return started;
  return AwaitPort(i, absl::Now() + absl::Seconds(30));
}

LocalCluster::~LocalCluster() {
  shards_.clear();  // stop the shards before their directory goes
}

std::string LocalCluster::servers_flag() const { return absl::StrJoin(addresses_, ","); }

std::string LocalCluster::shard_log(int i) const {
  return absl::StrCat(dir(), "/shard", i, ".log");
}

}  // namespace hetps::testing
