#include "server/replicator.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/cycle_clock.h"
#include "common/log.h"
#include "proto/ps.pb.h"
#include "server/random_draws.h"

namespace hetps::server {
namespace {

constexpr absl::Duration kFirstPause = absl::Milliseconds(20);
constexpr absl::Duration kLongestPause = absl::Seconds(1);
constexpr absl::Duration kWarningEvery = absl::Seconds(10);

// The backup answered, but cannot take the batch: it does not have the tensor or the version
// the batch follows (it restarted without its copies). Sending again would not help.
bool LostItsCopies(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kFailedPrecondition ||
         status.code() == absl::StatusCode::kDataLoss;
}

}  // namespace

struct Replicator::Batch {
  std::string header;
  transport::Payload payload;
  absl::AnyInvocable<void(absl::Status)> done;
  absl::Duration pause = kFirstPause;
  int64_t sent_ticks = 0;  // when Send took it (CycleClock), if timed
  std::atomic<bool> finished{false};
};

Replicator::Replicator(const ReplicatorOptions& options, transport::Transport* transport,
                       TimerQueue* timers)
    : options_(options),
      transport_(transport),
      timers_(timers),
      thread_(std::make_unique<TaskThread>("shard-replicate")),
      backup_address_(options.backup_address) {}

Replicator::~Replicator() { Stop(); }

void Replicator::SetBackupAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (backup_address_.empty()) backup_address_ = address;
}

bool Replicator::Stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

int64_t Replicator::in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

uint64_t Replicator::resends() const {
  absl::MutexLock lock(&mu_);
  return resends_;
}

void Replicator::Send(std::vector<ReplicatedChange> changes,
                      absl::AnyInvocable<void(absl::Status)> done) {
  auto batch = std::make_shared<Batch>();
  hetps::v1::ReplicateRequest request;
  request.set_source_shard(options_.shard_index);
  for (ReplicatedChange& change : changes) {
    *request.add_changes() = std::move(change.meta);
    batch->payload.Append(change.bytes);
  }
  batch->header = request.SerializeAsString();
  batch->done = std::move(done);
  if (options_.round_trips != nullptr) batch->sent_ticks = CycleClock::Now();
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  transport::Connection* connected = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      std::erase_if(open_, [](const std::weak_ptr<Batch>& open) { return open.expired(); });
      open_.push_back(batch);
      connected = connected_;
    }
  }
  // Connected: sent from here (a call does not block), sparing a hand-off to the thread.
  if (connected != nullptr) {
    Call(*connected, std::move(batch));
  } else if (!thread_->Post([this, batch] { Attempt(batch); })) {
    Finish(*batch, absl::CancelledError("the shard is stopping"));
  }
}

absl::StatusOr<transport::Connection*> Replicator::Connection() {
  if (connection_ != nullptr) return connection_.get();
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    address = backup_address_;
  }
  if (options_.find_backup) {  // authoritative where it is given (etcd)
    absl::StatusOr<std::string> found = options_.find_backup();
    if (!found.ok()) return found.status();
    address = *found;
    absl::MutexLock lock(&mu_);
    backup_seen_ = true;
  }
  if (address.empty()) {
    return absl::UnavailableError(
        "its address is not known yet (ps-server --servers, or a worker's hello lists it)");
  }
  hetps::v1::HelloRequest hello;
  hello.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
  hello.set_job_id(options_.job_id);
  hello.set_shard_index(options_.backup_index);
  hello.set_num_shards(options_.num_shards);
  hello.set_peer_shard(options_.shard_index + 1);
  hello.set_initializer_draws(kInitializerDraws);
  hello.set_auth_token(options_.auth_token);
  transport::ConnectOptions connect;
  connect.greeting = hello.SerializeAsString();
  absl::StatusOr<std::unique_ptr<transport::Connection>> connection =
      transport_->Connect(address, hetps::Now() + options_.connect_timeout, connect);
  if (!connection.ok()) return connection.status();
  connection_ = *std::move(connection);
  absl::MutexLock lock(&mu_);
  connected_ = connection_.get();
  return connection_.get();
}

void Replicator::Attempt(std::shared_ptr<Batch> batch) {
  if (batch->finished.load()) return;
  if (Stopped()) {
    Finish(*batch, absl::CancelledError("the shard is stopping"));
    return;
  }
  // A batch sent again: is the backup still there at all (registered in etcd)? Only one seen
  // registered can be gone (at the start, one may not be registered yet).
  bool seen = false;
  {
    absl::MutexLock lock(&mu_);
    seen = backup_seen_;
  }
  if (seen && batch->pause > kFirstPause && options_.find_backup) {
    absl::StatusOr<std::string> found = options_.find_backup();
    if (found.status().code() == absl::StatusCode::kNotFound) {
      GiveUp(*batch, found.status());
      return;
    }
  }
  absl::StatusOr<transport::Connection*> connection = Connection();
  if (!connection.ok()) {
    Retry(std::move(batch), connection.status());
    return;
  }
  Call(**connection, std::move(batch));
}

void Replicator::Call(transport::Connection& connection, std::shared_ptr<Batch> batch) {
  transport::Request request;
  request.method = hetps::v1::METHOD_REPLICATE;
  request.header = batch->header;
  request.payload = batch->payload;
  request.deadline = hetps::Now() + options_.attempt_timeout;
  connection.Call(
      std::move(request), [this, batch](absl::StatusOr<transport::Response> result) mutable {
        if (result.ok()) {
          Finish(*batch, absl::OkStatus());
        } else if (LostItsCopies(result.status())) {
          GiveUp(*batch, absl::NotFoundError(absl::StrCat("it lost its copies (restarted?): ",
                                                          result.status().message())));
        } else {
          Retry(std::move(batch), result.status());
        }
      });
}

void Replicator::Retry(std::shared_ptr<Batch> batch, const absl::Status& why) {
  const absl::Time now = hetps::Now();
  bool stopped = false;
  {
    absl::MutexLock lock(&mu_);
    stopped = stopped_;
    ++resends_;
    if (!stopped && now - last_warning_ >= kWarningEvery) {
      last_warning_ = now;
      LogWarning("shard %d: backup shard %d (%s) did not take a batch of changes, trying again: %s",
                 options_.shard_index, options_.backup_index, backup_address_, why.ToString());
    }
  }
  if (stopped) {
    Finish(*batch, absl::CancelledError("the shard is stopping"));
    return;
  }
  const absl::Duration pause = batch->pause;
  batch->pause = std::min(pause * 2, kLongestPause);
  timers_->Schedule(now + pause, [this, batch] {
    if (!thread_->Post([this, batch] { Attempt(batch); })) {
      Finish(*batch, absl::CancelledError("the shard is stopping"));
    }
  });
}

void Replicator::GiveUp(Batch& batch, const absl::Status& why) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    first = !backup_gone_;
    backup_gone_ = true;
  }
  if (first) {
    LogWarning(
        "shard %d: backup shard %d is gone, its partitions go on without a copy until a shard "
        "rejoins: %s",
        options_.shard_index, options_.backup_index, why.ToString());
  }
  Finish(batch, why);
}

void Replicator::Finish(Batch& batch, absl::Status status) {
  if (batch.finished.exchange(true)) return;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (batch.sent_ticks != 0 && status.ok()) {
    options_.round_trips->ObserveTicks(CycleClock::Now() - batch.sent_ticks);
  }
  absl::AnyInvocable<void(absl::Status)> done = std::move(batch.done);
  done(std::move(status));
}

void Replicator::Stop() {
  std::vector<std::weak_ptr<Batch>> open;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    open = std::move(open_);
    open_.clear();
  }
  thread_->Stop();
  // Outstanding calls end with Cancelled, and Retry finishes them.
  if (connection_ != nullptr) connection_->Shutdown();
  for (const std::weak_ptr<Batch>& weak : open) {
    if (std::shared_ptr<Batch> batch = weak.lock()) {
      Finish(*batch, absl::CancelledError("the shard is stopping"));
    }
  }
}

}  // namespace hetps::server
