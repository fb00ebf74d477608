#include "transport/inproc/inproc_transport.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/task_thread.h"
#include "common/timer_queue.h"
#include "transport/internal/call_scope.h"
#include "transport/internal/call_tracker.h"
#include "transport/internal/server_connection.h"

namespace hetps::transport {
namespace {

// One listening address: the handler and the thread that runs it.
struct Endpoint {
  explicit Endpoint(RequestHandler* handler, std::string address)
      : handler(handler), thread("inproc-" + address) {}

  RequestHandler* const handler;
  TaskThread thread;
  std::atomic<bool> open{true};
  // Only on `thread`: the connections it admitted, ended when the listener shuts down.
  std::vector<std::weak_ptr<internal::ServerConnection>> connections;
};

// A client connection's server side at one endpoint (a restarted listener is another), made
// on the endpoint's thread at the first request. Only on that thread.
struct ServerSide {
  std::shared_ptr<Endpoint> endpoint;
  std::shared_ptr<internal::ServerConnection> connection;
};

absl::Status CheckSize(const std::string& header, const Payload& payload, size_t limit) {
  const size_t size = header.size() + payload.size();
  if (size > limit) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("message of %d bytes exceeds the %d-byte limit", size, limit));
  }
  return absl::OkStatus();
}

// Copies the payload, as a network would: the receiver never shares the sender's memory.
Payload CopyPayload(const Payload& payload) {
  return Payload::Copy(AsBytes(absl::MakeConstSpan(payload.ToString())));
}

class InProcNetwork;

class InProcConnection final : public Connection {
 public:
  InProcConnection(std::string address, std::string greeting, InProcNetwork* network,
                   TimerQueue* timers)
      : address_(std::move(address)),
        greeting_(std::move(greeting)),
        network_(network),
        timers_(timers),
        tracker_(std::make_shared<internal::CallTracker>(timers, address_)) {}
  ~InProcConnection() override { Shutdown(); }

  void Call(Request request, ResponseCallback done) override;
  void Shutdown() override;
  const std::string& address() const override { return address_; }

 private:
  const std::string address_;
  const std::string greeting_;
  InProcNetwork* const network_;
  TimerQueue* const timers_;
  const std::shared_ptr<internal::CallTracker> tracker_;
  const std::shared_ptr<ServerSide> server_side_ = std::make_shared<ServerSide>();
  std::atomic<bool> shut_down_{false};
};

class InProcListener final : public Listener {
 public:
  InProcListener(std::string address, std::shared_ptr<Endpoint> endpoint, InProcNetwork* network)
      : address_(std::move(address)), endpoint_(std::move(endpoint)), network_(network) {}
  ~InProcListener() override { Shutdown(); }
  std::string address() const override { return address_; }
  void Shutdown() override;

 private:
  const std::string address_;
  const std::shared_ptr<Endpoint> endpoint_;
  InProcNetwork* const network_;
};

class InProcNetwork final : public InProcTransport {
 public:
  explicit InProcNetwork(const TransportOptions& options) : options_(options) {}

  absl::string_view name() const override { return "inproc"; }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address,
                                                   RequestHandler* handler) override {
    absl::MutexLock lock(&mu_);
    std::string bound = address;
    if (bound.empty() || absl::EndsWith(bound, ":0")) {
      bound = absl::StrCat(bound.empty() ? "inproc" : bound.substr(0, bound.size() - 2), ":",
                           next_port_++);
    }
    if (endpoints_.contains(bound)) {
      return absl::UnavailableError(absl::StrCat("address ", bound, " is already in use"));
    }
    auto endpoint = std::make_shared<Endpoint>(handler, bound);
    endpoints_[bound] = endpoint;
    return std::make_unique<InProcListener>(bound, std::move(endpoint), this);
  }

  using Transport::Connect;
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline,
                                                      const ConnectOptions& options) override {
    absl::MutexLock lock(&mu_);
    auto it = endpoints_.find(address);
    if (it == endpoints_.end()) {
      return absl::UnavailableError(absl::StrCat("nothing listens on ", address));
    }
    return std::make_unique<InProcConnection>(address, options.greeting, this, &timers_);
  }

  void SetFaults(const InProcFaults& faults) override {
    absl::MutexLock lock(&mu_);
    faults_ = faults;
  }

  void RemoveEndpoint(const std::string& address) {
    absl::MutexLock lock(&mu_);
    endpoints_.erase(address);
  }

  // Whoever listens on `address` now (a restarted listener too), or null.
  std::shared_ptr<Endpoint> Find(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto it = endpoints_.find(address);
    return it == endpoints_.end() ? nullptr : it->second;
  }

  // How many times the next request is delivered: 0 (dropped), 1, or 2 (duplicated).
  int NextDeliveryCount() {
    absl::MutexLock lock(&mu_);
    ++requests_;
    if (faults_.drop_every_nth_request > 0 && requests_ % faults_.drop_every_nth_request == 0) {
      return 0;
    }
    return faults_.duplicate_requests ? 2 : 1;
  }

  const TransportOptions& options() const { return options_; }

 private:
  const TransportOptions options_;
  TimerQueue timers_;
  absl::Mutex mu_;
  int next_port_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  InProcFaults faults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
};

void InProcConnection::Call(Request request, ResponseCallback done) {
  internal::CallScope scope;
  if (shut_down_.load()) {
    internal::CompleteOutsideCall(
        timers_, std::move(done),
        absl::FailedPreconditionError(absl::StrCat("connection to ", address_, " is shut down")));
    return;
  }
  const size_t limit = network_->options().max_message_bytes;
  if (absl::Status size = CheckSize(request.header, request.payload, limit); !size.ok()) {
    internal::CompleteOutsideCall(timers_, std::move(done), size);
    return;
  }
  const uint64_t id = tracker_->Start(request.deadline, std::move(done));
  std::shared_ptr<Endpoint> endpoint = network_->Find(address_);
  if (endpoint == nullptr || !endpoint->open.load()) {
    tracker_->Finish(id, absl::UnavailableError(absl::StrCat("nothing listens on ", address_)));
    return;
  }
  request.payload = CopyPayload(request.payload);
  const int deliveries = network_->NextDeliveryCount();
  for (int i = 0; i < deliveries; ++i) {
    std::weak_ptr<internal::CallTracker> weak_tracker = tracker_;
    Request copy = request;
    const bool posted = endpoint->thread.Post([network = network_, greeting = greeting_, endpoint,
                                               weak_tracker, id, limit, server_side = server_side_,
                                               request = std::move(copy)]() mutable {
      auto reply = [weak_tracker, id, limit](absl::StatusOr<Response> result) {
        std::shared_ptr<internal::CallTracker> tracker = weak_tracker.lock();
        if (tracker == nullptr) return;
        if (result.ok()) {
          if (absl::Status size = CheckSize(result->header, result->payload, limit); !size.ok()) {
            result = size;
          } else {
            result->payload = CopyPayload(result->payload);
          }
        }
        tracker->Finish(id, std::move(result));
      };
      if (!endpoint->open.load()) {
        reply(absl::UnavailableError("the listener shut down before handling the request"));
        return;
      }
      if (server_side->endpoint != endpoint) {
        server_side->endpoint = endpoint;
        server_side->connection = internal::ServerConnection::Create(
            endpoint->handler, network->options(), "inproc", greeting);
        endpoint->connections.push_back(server_side->connection);
      }
      server_side->connection->Dispatch(
          std::move(request), [connection = server_side->connection,
                               reply = std::move(reply)](absl::StatusOr<Response> result) mutable {
            connection->Answered(0, /*answers_request=*/true);
            reply(std::move(result));
          });
    });
    if (!posted) {
      tracker_->Finish(id, absl::UnavailableError(absl::StrCat(address_, " stopped listening")));
      return;
    }
  }
}

void InProcConnection::Shutdown() {
  if (shut_down_.exchange(true)) return;
  tracker_->FailAll(absl::CancelledError(absl::StrCat("connection to ", address_, " shut down")));
  if (std::shared_ptr<Endpoint> endpoint = network_->Find(address_)) {
    endpoint->thread.Post([server_side = server_side_] {
      if (server_side->connection != nullptr) server_side->connection->End();
    });
  }
}

void InProcListener::Shutdown() {
  if (!endpoint_->open.exchange(false)) return;
  network_->RemoveEndpoint(address_);
  // Requests already queued see `open == false` and are answered Unavailable.
  endpoint_->thread.Post([endpoint = endpoint_.get()] {
    for (const auto& weak : endpoint->connections) {
      if (std::shared_ptr<internal::ServerConnection> connection = weak.lock()) connection->End();
    }
  });
  endpoint_->thread.Stop();
}

}  // namespace

std::shared_ptr<InProcTransport> NewInProcTransport(const TransportOptions& options) {
  return std::make_shared<InProcNetwork>(options);
}

}  // namespace hetps::transport
