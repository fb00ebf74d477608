#include "transport/internal/server_connection.h"

#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log.h"

namespace hetps::transport::internal {
namespace {

uint64_t NextConnectionId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Every live connection by its id, for ServerConnection::Find.
absl::Mutex registry_mu(absl::kConstInit);
absl::flat_hash_map<uint64_t, std::weak_ptr<ServerConnection>>& Registry()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry = new absl::flat_hash_map<uint64_t, std::weak_ptr<ServerConnection>>();
  return *registry;
}

// Whether no connection from the host of `peer` ("ipv4:10.0.0.1:50212") was refused before:
// a host that keeps connecting must not fill the log. Forgets every host past 4096 of them.
bool FirstRefusalOf(const std::string& peer) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* hosts = new absl::flat_hash_set<std::string>();
  const std::string host = peer.substr(0, peer.rfind(':'));
  absl::MutexLock lock(&mu);
  if (hosts->size() >= 4096) hosts->clear();
  return hosts->insert(host).second;
}

ConnectionInfo MakeInfo(std::string peer, std::string greeting) {
  ConnectionInfo info;
  info.id = NextConnectionId();
  info.peer = std::move(peer);
  info.greeting = std::move(greeting);
  return info;
}

}  // namespace

ServerConnection::ServerConnection(RequestHandler* handler, const TransportOptions& options,
                                   std::string peer, std::string greeting)
    : handler_(handler),
      max_unsent_bytes_(options.max_unsent_reply_bytes),
      max_in_progress_(options.max_requests_in_progress),
      info_(MakeInfo(std::move(peer), std::move(greeting))),
      admission_(handler_->Admit(info_)),
      last_request_(hetps::Now()) {
  if (!admission_.ok() && FirstRefusalOf(info_.peer)) {
    LogWarning("refused connection %d from %s: %s (further refusals of this host not logged)",
               info_.id, info_.peer, admission_.ToString());
  }
}

std::shared_ptr<ServerConnection> ServerConnection::Create(RequestHandler* handler,
                                                           const TransportOptions& options,
                                                           std::string peer, std::string greeting) {
  std::shared_ptr<ServerConnection> connection(
      new ServerConnection(handler, options, std::move(peer), std::move(greeting)));
  absl::MutexLock lock(&registry_mu);
  Registry()[connection->id()] = connection;
  return connection;
}

ServerConnection::~ServerConnection() {
  absl::MutexLock lock(&registry_mu);
  Registry().erase(id());
}

std::shared_ptr<ServerConnection> ServerConnection::Find(uint64_t id) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(id);
  return it == Registry().end() ? nullptr : it->second.lock();
}

void ServerConnection::Dispatch(Request request, ReplyCallback reply) {
  {
    absl::MutexLock lock(&mu_);
    last_request_ = hetps::Now();
    if (admission_.ok()) ++in_progress_;
  }
  if (!admission_.ok()) {
    reply(admission_);
    return;
  }
  request.connection = info_.id;
  handler_->HandleRequest(std::move(request), std::move(reply));
}

void ServerConnection::Answered(size_t bytes, bool answers_request) {
  absl::MutexLock lock(&mu_);
  if (answers_request && in_progress_ > 0) --in_progress_;
  unsent_bytes_ += bytes;
}

void ServerConnection::Sent(size_t bytes) {
  absl::MutexLock lock(&mu_);
  unsent_bytes_ -= std::min(bytes, unsent_bytes_);
}

bool ServerConnection::MayReadMore() const {
  absl::MutexLock lock(&mu_);
  return unsent_bytes_ <= max_unsent_bytes_ && in_progress_ < max_in_progress_;
}

bool ServerConnection::IdleSince(absl::Time cutoff) const {
  absl::MutexLock lock(&mu_);
  return in_progress_ == 0 && unsent_bytes_ == 0 && pins_ == 0 && last_request_ < cutoff;
}

void ServerConnection::Pin() {
  absl::MutexLock lock(&mu_);
  ++pins_;
}

void ServerConnection::Unpin() {
  absl::MutexLock lock(&mu_);
  --pins_;
}

void ServerConnection::End() {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
  }
  if (admission_.ok()) handler_->Disconnected(info_.id);
}

ConnectionSweeper::ConnectionSweeper(absl::Duration idle_timeout)
    : idle_timeout_(idle_timeout),
      timers_(idle_timeout == absl::InfiniteDuration() ? nullptr : std::make_unique<TimerQueue>()) {
}

ConnectionSweeper::~ConnectionSweeper() { timers_.reset(); }

void ConnectionSweeper::Add(std::weak_ptr<ServerConnection> connection,
                            absl::AnyInvocable<void()> close) {
  if (timers_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  entries_.push_back({std::move(connection), std::move(close)});
  ScheduleLocked();
}

void ConnectionSweeper::ScheduleLocked() {
  if (scheduled_ || entries_.empty()) return;
  scheduled_ = true;
  timers_->Schedule(hetps::Now() + idle_timeout_ / 4, [this] { Sweep(); });
}

void ConnectionSweeper::Sweep() {
  const absl::Time cutoff = hetps::Now() - idle_timeout_;
  std::vector<absl::AnyInvocable<void()>> to_close;
  {
    absl::MutexLock lock(&mu_);
    scheduled_ = false;
    std::vector<Entry> kept;
    for (Entry& entry : entries_) {
      std::shared_ptr<ServerConnection> connection = entry.connection.lock();
      if (connection == nullptr) continue;
      if (connection->IdleSince(cutoff)) {
        LogInfo("closing connection %d from %s: idle for over %s", connection->id(),
                connection->peer(), absl::FormatDuration(idle_timeout_));
        to_close.push_back(std::move(entry.close));
        continue;
      }
      kept.push_back(std::move(entry));
    }
    entries_.swap(kept);
    ScheduleLocked();
  }
  for (auto& close : to_close) close();
}

}  // namespace hetps::transport::internal
