#include "transport/ucx/ucx_client.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/frame.pb.h"
#include "transport/internal/call_scope.h"
#include "transport/internal/call_tracker.h"
#include "transport/ucx/send_window.h"
#include "transport/ucx/shared_memory.h"
#include "transport/ucx/ucx_client_core.h"
#include "transport/ucx/ucx_lanes.h"
#include "transport/ucx/ucx_server.h"

namespace hetps::transport::ucx_internal {
namespace {

// While calls wait for the server, it is checked at least this often: a server that died with
// calls in flight (its replicated partitions served elsewhere by now) is noticed in about a
// second, not a whole keepalive_interval.
constexpr absl::Duration kProbeWhileCallsWait = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<ClientWorker>> ClientWorker::Create(const UcxOptions& options) {
  auto client = std::make_unique<ClientWorker>();
  client->maps_memory = MayMapMemory(EffectiveTls(options.tls));
  HETPS_ASSIGN_OR_RETURN(client->worker, UcxWorker::Create(options, "ucx-client"));
  ClientWorker* raw = client.get();
  raw->worker->Post([raw] {
    raw->worker->SetAmHandler(
        kResponseAm, [raw](const void* header, size_t header_length, void* data, size_t length,
                           const ucp_am_recv_param_t* param) {
          absl::StatusOr<UcxFrame> frame = DecodeUcxFrame(header, header_length);
          std::shared_ptr<ClientCore> core;
          if (frame.ok()) {
            auto it = raw->connections.find(frame->connection_id);
            if (it != raw->connections.end()) core = it->second.lock();
          }
          if (core == nullptr) return UCS_OK;  // a connection closed in the meantime: drop
          return core->OnResponse(*frame, data, length, param);
        });
    // Each connection bootstraps again with the new worker's address at its next call. A list
    // first: a failed call's callback may shut its connection down (out of the map) at once.
    raw->worker->OnRenewal([raw] {
      std::vector<std::shared_ptr<ClientCore>> cores;
      for (const auto& [id, weak] : raw->connections) {
        if (std::shared_ptr<ClientCore> core = weak.lock()) cores.push_back(std::move(core));
      }
      for (const std::shared_ptr<ClientCore>& core : cores) {
        core->Fail(absl::UnavailableError(absl::StrCat(
            "this process's UCX receive queue was stuck; reconnecting to ", core->address)));
      }
    });
  });
  return client;
}

void ClientCore::StartBootstrap() {
  hetps::v1::UcxBootstrapRequest bootstrap_request;
  {
    absl::MutexLock lock(&mu);
    if (shut_down || bootstrapping || ready) return;
    bootstrapping = true;
    bootstrapped_from = worker->address();
    bootstrap_request.set_worker_address(bootstrapped_from);
  }
  bootstrap_request.set_connection_id(local_id);
  bootstrap_request.set_frame_version(kUcxFrameVersion);
  bootstrap_request.set_greeting(greeting);
  bootstrap_request.set_machine(MachineAndNamespaces());
  bootstrap_request.set_maps_memory(client_worker->maps_memory);
  CallBootstrap(bootstrap_request, absl::Seconds(5), &ClientCore::OnBootstrapped);
}

void ClientCore::CallBootstrap(const hetps::v1::UcxBootstrapRequest& message,
                               absl::Duration timeout,
                               void (ClientCore::*then)(absl::StatusOr<Response>)) {
  Request request;
  request.method = kBootstrapMethod;
  request.header = message.SerializeAsString();
  request.deadline = hetps::Now() + timeout;
  bootstrap->Call(std::move(request),
                  [weak = weak_from_this(), then](absl::StatusOr<Response> response) {
                    if (std::shared_ptr<ClientCore> core = weak.lock()) {
                      (core.get()->*then)(std::move(response));
                    }
                  });
}

void ClientCore::OnBootstrapped(absl::StatusOr<Response> response) {
  hetps::v1::UcxBootstrapResponse bootstrap_response;
  absl::Status status = response.status();
  if (status.ok() && !bootstrap_response.ParseFromString(response->header)) {
    status = absl::UnavailableError("malformed UCX bootstrap response");
  }
  if (status.ok() && bootstrap_response.frame_version() != kUcxFrameVersion) {
    status = absl::FailedPreconditionError(
        absl::StrFormat("the server speaks UCX frame version %d, this client %d (mixed hetps "
                        "versions?)",
                        bootstrap_response.frame_version(), kUcxFrameVersion));
  }
  if (status.ok() && bootstrap_response.without_mapped_memory()) {
    status = MappedMemoryRefused(address);
  }
  if (status.code() == absl::StatusCode::kUnimplemented) {
    status = absl::UnavailableError(
        absl::StrCat("the server does not serve UCX (a shard started with --transport=grpc?): ",
                     status.message()));
  }
  if (status.ok()) {
    const bool posted = worker->Post([core = shared_from_this(), bootstrap_response] {
      core->Connected(bootstrap_response.worker_address(), bootstrap_response.connection_id());
    });
    if (posted) return;
    status = absl::UnavailableError("the UCX client is shutting down");
  }
  absl::MutexLock lock(&mu);
  bootstrapping = false;
  last_error = status;
}

void ClientCore::Probe() {
  {
    absl::MutexLock lock(&mu);
    if (shut_down || probing || !ready) return;
    probing = true;
  }
  hetps::v1::UcxBootstrapRequest probe;
  probe.set_address_only(true);
  {
    absl::MutexLock lock(&mu);
    probe.set_worker_address(server_address);  // the server may run several workers
  }
  CallBootstrap(probe, keepalive_timeout, &ClientCore::OnProbe);
}

void ClientCore::ScheduleKeepalive() {
  if (keepalive_interval == absl::InfiniteDuration()) return;
  const absl::Duration tick = std::min(keepalive_interval, kProbeWhileCallsWait);
  timers->Schedule(hetps::Now() + tick, [weak = weak_from_this()] {
    std::shared_ptr<ClientCore> core = weak.lock();
    if (core == nullptr) return;
    {
      absl::MutexLock lock(&core->mu);
      if (core->shut_down) return;
    }
    const absl::Time now = hetps::Now();
    if (core->tracker->outstanding() > 0 || now - core->last_probe >= core->keepalive_interval) {
      core->last_probe = now;
      core->Probe();
    }
    core->ScheduleKeepalive();
  });
}

void ClientCore::OnProbe(absl::StatusOr<Response> response) {
  hetps::v1::UcxBootstrapResponse answer;
  absl::Status gone;
  {
    absl::MutexLock lock(&mu);
    probing = false;
    if (!response.ok()) {
      gone = absl::UnavailableError(
          absl::StrCat(address, " does not answer: ", response.status().message()));
    } else if (answer.ParseFromString(response->header) &&
               answer.worker_address() != server_address) {
      gone = absl::UnavailableError(absl::StrCat(address, " restarted"));
    }
  }
  if (gone.ok()) return;
  worker->Post([core = shared_from_this(), gone] { core->Fail(gone); });
}

void ClientCore::Connected(const std::string& server_address, uint64_t id) {
  {
    absl::MutexLock lock(&mu);
    if (bootstrapped_from != worker->address()) {
      // The worker started afresh since: the server would answer the old one. The next call
      // bootstraps again.
      bootstrapping = false;
      last_error = absl::UnavailableError("this process's UCX worker started afresh meanwhile");
      return;
    }
  }
  large_sends.Clear();  // nothing waiting goes to the endpoint that closes here
  if (ep != nullptr) CloseEndpoint(*worker, std::exchange(ep, nullptr));  // the server restarted
  absl::StatusOr<ucp_ep_h> created =
      CreateEndpoint(*worker, server_address, [weak = weak_from_this()](ucs_status_t status) {
        if (std::shared_ptr<ClientCore> core = weak.lock()) {
          // Not from inside UCX's callback: close the endpoint from a task of our own.
          core->worker->Post([core, status] {
            core->Fail(UcxError(absl::StrCat("connection to ", core->address, " failed"), status));
          });
        }
      });
  absl::MutexLock lock(&mu);
  bootstrapping = false;
  if (!created.ok()) {
    last_error = created.status();
    return;
  }
  ep = *created;
  over_tcp = LanesUseTcp(DescribeLanes(ep));
  ready = true;
  server_id = id;
  this->server_address = server_address;
  lanes_logged = false;
}

void ClientCore::Fail(const absl::Status& status) {
  // Receives in progress are cancelled before their endpoint goes (as Shutdown does): each
  // then ends with `status` through FinishReceive, instead of waiting on an endpoint that
  // will never deliver.
  for (auto& [call, entry] : receiving) {
    if (entry.request == nullptr || !entry.cancelled.ok()) continue;
    entry.cancelled = status;
    ucp_request_cancel(worker->worker(), entry.request);
  }
  // Their calls fail below; a send still under way ends with an error (maybe while the
  // endpoint closes: nothing waiting may start then).
  large_sends.Clear();
  if (ep != nullptr) CloseEndpoint(*worker, std::exchange(ep, nullptr));
  sinks.clear();
  {
    absl::MutexLock lock(&mu);
    ready = false;
    last_error = status;
  }
  tracker->FailAll(status);
}

absl::StatusOr<std::unique_ptr<UcxConnection>> UcxConnection::Connect(
    const std::string& address, absl::Time deadline, const ConnectOptions& connect,
    ClientWorker* client_worker, const std::shared_ptr<Transport>& grpc, TimerQueue* timers,
    const UcxOptions& options) {
  auto core = std::make_shared<ClientCore>();
  core->address = address;
  core->client_worker = client_worker;
  core->worker = client_worker->worker.get();
  core->local_id = client_worker->next_connection.fetch_add(1);
  core->timers = timers;
  core->max_message_bytes = options.max_message_bytes;
  core->greeting = connect.greeting;
  core->keepalive_interval = options.shared.keepalive_interval;
  core->keepalive_timeout = options.shared.keepalive_timeout;
  core->tracker = std::make_shared<internal::CallTracker>(timers, address);
  // A call that runs out of time may mean the server is gone or restarted: check. Its sink
  // goes too.
  core->tracker->OnExpiry([weak = std::weak_ptr<ClientCore>(core)] {
    std::shared_ptr<ClientCore> alive = weak.lock();
    if (alive == nullptr) return;
    alive->Probe();
    alive->worker->Post([alive] { alive->DropSinksOfEndedCalls(); });
  });
  HETPS_ASSIGN_OR_RETURN(core->bootstrap, grpc->Connect(address, deadline, connect));
  std::unique_ptr<UcxConnection> connection(new UcxConnection(core));
  core->worker->Post([core, client_worker] { client_worker->connections[core->local_id] = core; });
  core->StartBootstrap();
  absl::MutexLock lock(&core->mu);
  auto settled = [&core]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core->mu) {
    return core->ready || !core->bootstrapping;
  };
  AwaitUntil(core->mu, absl::Condition(&settled), deadline);
  if (!core->ready) {
    if (IsMappedMemoryRefused(core->last_error)) return core->last_error;  // the caller retries
    // A refusal keeps its code (the server did not admit this client's greeting).
    return absl::Status(
        core->last_error.ok() ? absl::StatusCode::kUnavailable : core->last_error.code(),
        absl::StrCat("no UCX connection to ", address, ": ",
                     core->last_error.ok() ? "bootstrap timed out" : core->last_error.message()));
  }
  core->ScheduleKeepalive();
  return connection;
}

void ClientCore::SendRequest(uint64_t id, UcxFrame frame, std::string method_header,
                             Payload payload, bool large, bool eager) {
  if (ep == nullptr) {  // the connection failed while this waited
    if (large) large_sends.Done();
    tracker->Finish(id,
                    absl::UnavailableError(absl::StrCat("connection to ", address, " is down")));
    return;
  }
  if (over_tcp && worker->InsideProgress()) {
    // As a server's replies (UcxListener's SendReply): over TCP, a send that fails at once (the
    // server killed, its socket reset) closes UCX's endpoint while the round of progress under
    // way may still hold an event for it, and UCX 1.13 aborts the process on that. A request
    // made from a response callback (the next call of a chain), or let go by the window when
    // a send completes, goes once the round is over.
    worker->RunAfterProgress([core = shared_from_this(), id, frame,
                              method_header = std::move(method_header),
                              payload = std::move(payload), large, eager]() mutable {
      core->SendRequest(id, frame, std::move(method_header), std::move(payload), large, eager);
    });
    return;
  }
  frame.text = method_header;  // here: the task (and the string) may have moved
  SendFrame(*worker, ep, kRequestAm, frame, std::move(payload), eager,
            [core = shared_from_this(), id, large](ucs_status_t status) {
              if (large) core->large_sends.Done();
              if (status == UCS_OK) return;
              core->sinks.erase(id);
              core->tracker->Finish(id, UcxError("sending the request", status));
            });
}

void ClientCore::SayGoodbyeAndClose(ucp_ep_h closing) {
  if (over_tcp && worker->InsideProgress()) {
    // As in SendRequest (Shutdown from a response callback); the close would wait alike.
    worker->RunAfterProgress(
        [core = shared_from_this(), closing] { core->SayGoodbyeAndClose(closing); });
    return;
  }
  UcxFrame goodbye;
  goodbye.method = kGoodbyeMethod;
  {
    absl::MutexLock lock(&mu);
    goodbye.connection_id = server_id;
  }
  SendFrame(*worker, closing, kRequestAm, goodbye, Payload(), /*eager=*/false, [](ucs_status_t) {});
  CloseEndpoint(*worker, closing, kCloseWait);
}

UcxConnection::~UcxConnection() { Shutdown(); }

size_t UcxConnection::HeldSinksForTesting() {
  auto held = std::make_shared<std::atomic<size_t>>(0);
  auto counted = std::make_shared<TimedNotification>();
  if (!core_->worker->Post([core = core_, held, counted] {
        held->store(core->sinks.size());
        counted->Notify();
      })) {
    return 0;
  }
  counted->WaitForNotificationWithTimeout(absl::Seconds(10));
  return held->load();
}

const std::string& UcxConnection::address() const { return core_->address; }

void UcxConnection::Call(Request request, ResponseCallback done) {
  internal::CallScope scope;
  uint64_t server_id = 0;
  bool shut_down, ready;
  absl::Status why;
  {
    absl::MutexLock lock(&core_->mu);
    shut_down = core_->shut_down;
    ready = core_->ready;
    server_id = core_->server_id;
    why = core_->last_error;
  }
  if (shut_down) {
    internal::CompleteOutsideCall(core_->timers, std::move(done),
                                  absl::FailedPreconditionError(absl::StrCat(
                                      "connection to ", core_->address, " is shut down")));
    return;
  }
  if (!ready) {
    core_->StartBootstrap();  // the caller retries Unavailable; we reconnect meanwhile
    internal::CompleteOutsideCall(
        core_->timers, std::move(done),
        absl::UnavailableError(
            absl::StrCat("reconnecting to ", core_->address, why.ok() ? "" : ": ", why.message())));
    return;
  }
  const size_t size = request.header.size() + request.payload.size();
  if (size > core_->max_message_bytes) {
    internal::CompleteOutsideCall(core_->timers, std::move(done),
                                  absl::ResourceExhaustedError(absl::StrFormat(
                                      "request of %d bytes exceeds the %d-byte message limit", size,
                                      core_->max_message_bytes)));
    return;
  }
  const uint64_t id = core_->tracker->Start(request.deadline, std::move(done));
  UcxFrame frame;
  frame.call_id = id;
  frame.method = request.method;
  frame.payload_bytes = request.payload.size();
  frame.connection_id = server_id;
  if (request.deadline != absl::InfiniteFuture()) {
    frame.timeout_us = std::max<int64_t>(1, absl::ToInt64Microseconds(request.deadline - Now()));
  }
  // Sent from this thread when it may (busy polling, the worker free): a waiting caller then
  // drives the rest itself, with no hand-off to the progress thread.
  const bool posted = core_->worker->RunOrPost(
      [core = core_, id, frame, method_header = std::move(request.header),
       payload = std::move(request.payload), sink = std::move(request.response_sink)]() mutable {
        if (core->ep == nullptr) {
          core->tracker->Finish(id, absl::UnavailableError(
                                        absl::StrCat("connection to ", core->address, " is down")));
          return;
        }
        if (!sink.empty()) core->sinks[id] = std::move(sink);
        const bool large = payload.size() >= SendWindow::kLargeBytes;
        const size_t bytes = payload.size();
        auto send = [core, id, large, frame, method_header = std::move(method_header),
                     payload = std::move(payload)](bool eager) mutable {
          core->SendRequest(id, frame, std::move(method_header), std::move(payload), large, eager);
        };
        if (large) {
          core->large_sends.Send(bytes, std::move(send));
        } else {
          send(/*eager=*/false);  // UCX's choice: eager below the rendezvous threshold
        }
      });
  if (!posted) {
    core_->tracker->Finish(id, absl::UnavailableError("the UCX client is shutting down"));
  }
}

void UcxConnection::Shutdown() {
  {
    absl::MutexLock lock(&core_->mu);
    if (core_->shut_down) return;
    core_->shut_down = true;
  }
  core_->tracker->FailAll(
      absl::CancelledError(absl::StrCat("connection to ", core_->address, " shut down")));
  // Waits for the worker to let go of the endpoint, with no time limit: the task runs (even when
  // the worker stops: tasks posted before are run), and runs here when this thread holds the
  // worker (Shutdown from a response callback).
  auto closed = std::make_shared<absl::Notification>();
  const bool posted = core_->worker->RunOrPost([core = core_, closed] {
    for (auto& [call, entry] : core->receiving) {
      entry.cancelled =
          absl::CancelledError(absl::StrCat("connection to ", core->address, " shut down"));
      if (entry.request != nullptr) ucp_request_cancel(core->worker->worker(), entry.request);
    }
    core->large_sends.Clear();  // their calls failed above
    if (core->ep != nullptr) {
      // Nothing else sends on it once it closes (the close progresses the worker).
      core->SayGoodbyeAndClose(std::exchange(core->ep, nullptr));
    }
    core->sinks.clear();
    core->client_worker->connections.erase(core->local_id);
    closed->Notify();
  });
  if (posted) closed->WaitForNotification();
  core_->bootstrap->Shutdown();
}

}  // namespace hetps::transport::ucx_internal
