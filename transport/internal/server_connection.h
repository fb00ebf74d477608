// The server side's record of one client connection, shared by the transports: its identity,
// the handler's verdict on its greeting (RequestHandler::Admit), what it has in progress (for
// backpressure), and when it was last used (for the idle timeout). ConnectionSweeper closes
// the connections that stayed idle too long.
//
// Thread-safe.
#ifndef HETPS_TRANSPORT_INTERNAL_SERVER_CONNECTION_H_
#define HETPS_TRANSPORT_INTERNAL_SERVER_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/timer_queue.h"
#include "transport/transport.h"

namespace hetps::transport::internal {

class ServerConnection {
 public:
  // Asks `handler` to admit the connection. REQUIRES: `handler` outlives End().
  static std::shared_ptr<ServerConnection> Create(RequestHandler* handler,
                                                  const TransportOptions& options, std::string peer,
                                                  std::string greeting);
  ~ServerConnection();
  // The live connection numbered `id`, or null.
  static std::shared_ptr<ServerConnection> Find(uint64_t id);

  uint64_t id() const { return info_.id; }
  const std::string& peer() const { return info_.peer; }
  const absl::Status& admission() const { return admission_; }

  // Hands `request` to the handler as one of this connection's, or answers it with the reason
  // the connection was refused. `reply` must report the bytes it queued through Answered().
  void Dispatch(Request request, ReplyCallback reply);
  // A reply of `bytes` is queued for the client (`answers_request`: it ends a request that
  // Dispatch handed on, rather than an error the transport found itself).
  void Answered(size_t bytes, bool answers_request);
  // The client has taken `bytes` of queued replies (or they were dropped with the connection).
  void Sent(size_t bytes);
  // Backpressure: false while the replies the client has not taken, or the requests in
  // progress, are over the bounds of TransportOptions.
  bool MayReadMore() const;
  // No request in progress, nothing unsent, nothing received since `cutoff`, and not pinned.
  bool IdleSince(absl::Time cutoff) const;
  // While pinned, the connection is not idle: a UCX connection pins the gRPC connection it was
  // bootstrapped on, which carries its keepalives but none of its requests.
  void Pin();
  void Unpin();
  // The connection has ended: tells the handler once, when it had been admitted.
  void End();

 private:
  ServerConnection(RequestHandler* handler, const TransportOptions& options, std::string peer,
                   std::string greeting);

  RequestHandler* const handler_;
  const size_t max_unsent_bytes_;
  const size_t max_in_progress_;
  const ConnectionInfo info_;
  const absl::Status admission_;

  mutable absl::Mutex mu_;
  size_t in_progress_ ABSL_GUARDED_BY(mu_) = 0;
  size_t unsent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int pins_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_request_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

// Closes connections idle for longer than TransportOptions::idle_timeout: every quarter of it,
// `close` runs (on the sweeper's thread) for each connection found idle. A connection leaves
// the sweeper when it is gone (only a weak reference is kept) or closed.
class ConnectionSweeper {
 public:
  explicit ConnectionSweeper(absl::Duration idle_timeout);
  ~ConnectionSweeper();  // no sweep runs after this returns

  void Add(std::weak_ptr<ServerConnection> connection, absl::AnyInvocable<void()> close);

 private:
  struct Entry {
    std::weak_ptr<ServerConnection> connection;
    absl::AnyInvocable<void()> close;
  };
  void Sweep();
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration idle_timeout_;
  absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool scheduled_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<TimerQueue> timers_;  // last: destroyed (and joined) first
};

}  // namespace hetps::transport::internal

#endif  // HETPS_TRANSPORT_INTERNAL_SERVER_CONNECTION_H_
