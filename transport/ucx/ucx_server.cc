// The server side of the UCX transport: a gRPC listener (for gRPC clients and for UCX
// bootstraps) and a UCX worker that receives requests as active messages and sends the replies.
#include "transport/ucx/ucx_server.h"

#include <atomic>
#include <deque>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/frame.pb.h"
#include "transport/internal/server_connection.h"
#include "transport/ucx/send_window.h"
#include "transport/ucx/shared_memory.h"
#include "transport/ucx/ucx_lanes.h"

namespace hetps::transport::ucx_internal {

// Frames of a peer the server does not know (or an unreadable header) are dropped, as are
// payloads it refuses: the handler returns UCS_OK without taking them, and UCX drops a
// rendezvous descriptor itself (ucp_am_recv_callback_t; releasing it as well would free it
// twice).

// State shared with reply callbacks (weakly), so a late reply never touches a gone listener.
struct UcxListener::Core : std::enable_shared_from_this<Core> {
  // A request received while its peer was over its bounds (ServerConnection::MayReadMore).
  struct Parked {
    UcxFrame frame;  // its text is `header`
    std::string header;
    Payload payload;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    uint64_t client_connection = 0;
    // The gRPC connection it was bootstrapped on: the client's keepalives travel there, so a
    // client that goes silent loses both.
    uint64_t bootstrap_connection = 0;
    std::shared_ptr<internal::ServerConnection> carrier;  // that connection, pinned
    bool lanes_logged = false;
    bool over_tcp = false;  // its lanes are UCX's TCP transport (see SendReply)
    std::shared_ptr<internal::ServerConnection> connection;
    std::deque<Parked> parked;
    size_t parked_bytes = 0;
    SendWindow large_replies;
  };

  // A core for `handler` with a new UCX worker.
  static absl::StatusOr<std::shared_ptr<Core>> Create(RequestHandler* handler,
                                                      const UcxOptions& options);

  RequestHandler* handler = nullptr;
  size_t max_message_bytes = 0;
  TransportOptions options;  // the server-side limits shared with gRPC
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<internal::ConnectionSweeper> sweeper;
  // Only by the thread holding the worker. Peers are numbered at random: a request names its
  // peer, and another client must not be able to guess that number.
  absl::flat_hash_map<uint64_t, Peer> peers;
  std::mt19937_64 peer_numbers{std::random_device()()};
  // For the listener, which ends a core that nobody uses (any thread reads them): clients
  // connected, clients gone, bootstraps under way.
  std::atomic<int> peers_live{0};
  std::atomic<int> peers_gone{0};
  std::atomic<int> bootstrapping{0};

  ucs_status_t OnRequest(const void* header, size_t header_length, void* data, size_t length,
                         const ucp_am_recv_param_t* param);
  // `frame.text` is ignored: `header` is the method's header. Hands the request to the handler,
  // or parks it while the peer is over its bounds.
  void Deliver(const UcxFrame& frame, std::string header, Payload payload);
  void HandOn(Peer& peer, const UcxFrame& frame, std::string header, Payload payload);
  // Hands parked requests on while the peer's bounds allow; MaybeUnpark does it from a task of
  // its own (not inside a reply's completion) when there are any.
  void Unpark(uint64_t peer);
  void MaybeUnpark(uint64_t peer);
  void Reply(uint64_t peer, uint64_t call_id, absl::StatusOr<Response> result,
             bool answers_request);
  // Sends a reply now; `large` ones hold a place in the peer's window until sent, and go
  // eagerly if the window says so.
  void SendReply(uint64_t peer, uint64_t call_id, bool answers_request,
                 absl::StatusOr<Response> result, bool large, bool eager);
  void Bootstrap(Request request, ReplyCallback reply);
  // Says goodbye to every peer and ends the worker. Not from the worker's own thread.
  void Shutdown();
  void SayGoodbye(Peer& peer);
  void Drop(uint64_t peer);
  void SayGoodbyeAndDrop(uint64_t peer);
  // Says goodbye to, and drops, the peers bootstrapped on gRPC connection `connection`, which
  // has ended.
  void DropBootstrappedOn(uint64_t connection);
};

ucs_status_t UcxListener::Core::OnRequest(const void* header, size_t header_length, void* data,
                                          size_t length, const ucp_am_recv_param_t* param) {
  absl::StatusOr<UcxFrame> frame = DecodeUcxFrame(header, header_length);
  auto peer = frame.ok() ? peers.find(frame->connection_id) : peers.end();
  if (peer == peers.end()) {
    // A client that leaves ends its bootstrap connection as it says goodbye, and the end of the
    // bootstrap connection may drop the peer first: its goodbye then has nothing left to do.
    if (frame.ok() && frame->method == kGoodbyeMethod) return UCS_OK;
    LogWarning("ucx: dropping a request: %s",
               frame.ok() ? "from an unknown peer" : frame.status().message());
    return UCS_OK;
  }
  if (frame->method == kGoodbyeMethod) {
    Drop(peer->first);
    return UCS_OK;
  }
  if (!peer->second.lanes_logged) {
    peer->second.lanes_logged = true;
    const std::string lanes = DescribeLanes(peer->second.ep);
    LogInfo("ucx: peer %d connected over %s", peer->first, lanes);
    peer->second.large_replies.AllowEager(LanesCrossANetworkOverTcp(lanes));
    peer->second.over_tcp = LanesUseTcp(lanes);
  }
  if (header_length + length > max_message_bytes) {
    Reply(peer->first, frame->call_id,
          absl::ResourceExhaustedError(
              absl::StrFormat("request of %d bytes exceeds the %d-byte message limit",
                              header_length + length, max_message_bytes)),
          /*answers_request=*/false);
    return UCS_OK;
  }
  if (length > 0 && frame->payload_bytes != length) {
    Reply(peer->first, frame->call_id,
          absl::InvalidArgumentError(absl::StrFormat("frame announces %d payload bytes, %d arrived",
                                                     frame->payload_bytes, length)),
          /*answers_request=*/false);
    return UCS_OK;
  }
  uint8_t* destination = nullptr;
  Payload payload = length > 0 ? worker->Buffer(length, &destination) : Payload();
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    if (length > 0) std::memcpy(destination, data, length);  // eager: small, or a slow link's
    Deliver(*frame, std::string(frame->text), std::move(payload));
    return UCS_OK;
  }
  // Rendezvous: the payload lands in the buffer it is handed over in, no copy after.
  struct Receive {
    std::weak_ptr<Core> core;
    UcxFrame frame;  // its text is `header`, the UCX header being gone after this handler
    std::string header;
    Payload payload;
  };
  auto* receive =
      new Receive{weak_from_this(), *frame, std::string(frame->text), std::move(payload)};
  ucp_request_param_t params = {};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  params.user_data = receive;
  params.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<Receive> done(static_cast<Receive*>(user_data));
    if (request != nullptr) ucp_request_free(request);
    std::shared_ptr<Core> core = done->core.lock();
    if (core == nullptr) return;
    if (status != UCS_OK) {
      core->Reply(done->frame.connection_id, done->frame.call_id,
                  UcxError("receiving the request's payload", status), /*answers_request=*/false);
      return;
    }
    core->Deliver(done->frame, std::move(done->header), std::move(done->payload));
  };
  ucs_status_ptr_t request =
      ucp_am_recv_data_nbx(worker->worker(), data, destination, length, &params);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    params.cb.recv_am(nullptr, request == nullptr ? UCS_OK : UCS_PTR_STATUS(request), length,
                      receive);
  }
  return UCS_OK;
}

void UcxListener::Core::Deliver(const UcxFrame& frame, std::string header, Payload payload) {
  auto it = peers.find(frame.connection_id);
  if (it == peers.end()) return;  // gone while its payload arrived
  Peer& peer = it->second;
  if (!peer.parked.empty() || !peer.connection->MayReadMore()) {
    peer.parked_bytes += header.size() + payload.size();
    if (peer.parked_bytes > options.max_unsent_reply_bytes) {
      LogWarning(
          "ucx: closing connection %d: %d bytes of its requests wait for its earlier ones to be "
          "answered and taken, past the bound (a client that does not read its replies?)",
          peer.connection->id(), peer.parked_bytes);
      SayGoodbye(peer);
      Drop(it->first);
      return;
    }
    peer.parked.push_back({frame, std::move(header), std::move(payload)});
    return;
  }
  HandOn(peer, frame, std::move(header), std::move(payload));
}

void UcxListener::Core::HandOn(Peer& peer, const UcxFrame& frame, std::string header,
                               Payload payload) {
  Request request;
  request.method = frame.method;
  request.header = std::move(header);
  request.payload = std::move(payload);
  if (frame.timeout_us > 0) {
    request.deadline = Now() + absl::Microseconds(frame.timeout_us);
  }
  // A copy: the peer may be dropped while the handler runs.
  std::shared_ptr<internal::ServerConnection> connection = peer.connection;
  connection->Dispatch(std::move(request), [core = weak_from_this(), peer = frame.connection_id,
                                            call = frame.call_id](absl::StatusOr<Response> result) {
    if (std::shared_ptr<Core> alive = core.lock()) {
      alive->Reply(peer, call, std::move(result), /*answers_request=*/true);
    }
  });
}

void UcxListener::Core::Unpark(uint64_t id) {
  auto it = peers.find(id);
  while (it != peers.end() && !it->second.parked.empty() && it->second.connection->MayReadMore()) {
    Parked next = std::move(it->second.parked.front());
    it->second.parked.pop_front();
    it->second.parked_bytes -= next.header.size() + next.payload.size();
    HandOn(it->second, next.frame, std::move(next.header), std::move(next.payload));
    it = peers.find(id);  // the handler may have answered at once, and that may drop the peer
  }
}

void UcxListener::Core::MaybeUnpark(uint64_t id) {
  auto it = peers.find(id);
  if (it == peers.end() || it->second.parked.empty()) return;
  worker->Post([core = shared_from_this(), id] { core->Unpark(id); });
}

void UcxListener::Core::Reply(uint64_t peer, uint64_t call_id, absl::StatusOr<Response> result,
                              bool answers_request) {
  if (result.ok() && result->header.size() + result->payload.size() > max_message_bytes) {
    result = absl::ResourceExhaustedError(
        absl::StrFormat("response of %d bytes exceeds the %d-byte message limit",
                        result->payload.size(), max_message_bytes));
  }
  worker->RunOrPost([core = shared_from_this(), peer, call_id, answers_request,
                     result = std::move(result)]() mutable {
    auto it = core->peers.find(peer);
    if (it == core->peers.end()) return;  // the client is gone
    const bool large = result.ok() && result->payload.size() >= SendWindow::kLargeBytes;
    if (!large) {
      core->SendReply(peer, call_id, answers_request, std::move(result), /*large=*/false,
                      /*eager=*/false);
      return;
    }
    const size_t bytes = result->payload.size();
    it->second.large_replies.Send(bytes, [core, peer, call_id, answers_request,
                                          result = std::move(result)](bool eager) mutable {
      core->SendReply(peer, call_id, answers_request, std::move(result), /*large=*/true, eager);
    });
  });
}

void UcxListener::Core::SendReply(uint64_t peer, uint64_t call_id, bool answers_request,
                                  absl::StatusOr<Response> result, bool large, bool eager) {
  auto it = peers.find(peer);
  if (it == peers.end()) return;  // the client is gone (with its window)
  if (it->second.over_tcp && worker->InsideProgress()) {
    // Over TCP, a send that fails at once (the peer's socket reset: a worker killed) closes
    // UCX's endpoint while the round of progress under way may still hold an event for it, and
    // UCX 1.13 aborts on that. So a reply from UCX's callbacks goes once the round is over.
    worker->RunAfterProgress([core = shared_from_this(), peer, call_id, answers_request,
                              result = std::move(result), large, eager]() mutable {
      core->SendReply(peer, call_id, answers_request, std::move(result), large, eager);
    });
    return;
  }
  UcxFrame frame;
  frame.call_id = call_id;
  frame.connection_id = it->second.client_connection;
  Payload payload;
  if (result.ok()) {
    frame.text = result->header;
    frame.payload_bytes = result->payload.size();
    payload = std::move(result->payload);
  } else {
    frame.status_code = static_cast<int32_t>(result.status().code());
    frame.text = result.status().message();
  }
  const size_t bytes = EncodedUcxFrameSize(frame) + payload.size();
  std::shared_ptr<internal::ServerConnection> connection = it->second.connection;
  connection->Answered(bytes, answers_request);
  SendFrame(*worker, it->second.ep, kResponseAm, frame, std::move(payload), eager,
            [core = shared_from_this(), peer, connection, bytes, large](ucs_status_t status) {
              if (status != UCS_OK) {
                LogWarning("ucx: a reply was not delivered: %s", ucs_status_string(status));
              }
              if (auto sender = core->peers.find(peer); large && sender != core->peers.end()) {
                sender->second.large_replies.Done();
              }
              connection->Sent(bytes);
              core->MaybeUnpark(peer);
            });
  MaybeUnpark(peer);
}

void UcxListener::Core::Bootstrap(Request request, ReplyCallback reply) {
  absl::StatusOr<hetps::v1::UcxBootstrapRequest> parsed =
      ParseBootstrapRequest(request.header, worker->address());
  if (!parsed.ok()) {
    reply(parsed.status());
    return;
  }
  hetps::v1::UcxBootstrapRequest bootstrap = *std::move(parsed);
  if (bootstrap.maps_memory() && WakeupsCannotCross(bootstrap.machine(), MachineAndNamespaces())) {
    hetps::v1::UcxBootstrapResponse response;
    response.set_without_mapped_memory(true);
    response.set_frame_version(kUcxFrameVersion);
    Response out;
    out.header = response.SerializeAsString();
    reply(std::move(out));
    return;
  }
  // The UCX connection is one of its own for the handler, admitted on the same greeting as
  // the gRPC connection that bootstraps it; refused, it gets no endpoint.
  std::shared_ptr<internal::ServerConnection> connection = internal::ServerConnection::Create(
      handler, options, absl::StrCat("ucx, bootstrapped on connection ", request.connection),
      bootstrap.greeting());
  if (!connection->admission().ok()) {
    reply(connection->admission());
    return;
  }
  const bool posted =
      worker->Post([core = shared_from_this(), bootstrap = std::move(bootstrap),
                    bootstrap_connection = request.connection, connection = std::move(connection),
                    reply = std::move(reply)]() mutable {
        uint64_t id = 0;
        while (id == 0 || core->peers.contains(id)) id = core->peer_numbers();
        Peer peer;
        peer.client_connection = bootstrap.connection_id();
        peer.bootstrap_connection = bootstrap_connection;
        peer.carrier = internal::ServerConnection::Find(bootstrap_connection);
        if (peer.carrier != nullptr) peer.carrier->Pin();
        absl::StatusOr<ucp_ep_h> ep = CreateEndpoint(
            *core->worker, bootstrap.worker_address(),
            [weak = core->weak_from_this(), id](ucs_status_t status) {
              if (std::shared_ptr<Core> alive = weak.lock()) {
                LogInfo("ucx: peer %016x is gone (%s)", id, ucs_status_string(status));
                alive->worker->Post([alive, id] { alive->Drop(id); });
              }
            });
        if (!ep.ok()) {
          connection->End();
          reply(ep.status());
          return;
        }
        peer.ep = *ep;
        peer.connection = connection;
        core->peers.emplace(id, std::move(peer));
        core->peers_live.fetch_add(1);
        if (core->sweeper != nullptr) {
          core->sweeper->Add(connection, [weak = core->weak_from_this(), id] {
            std::shared_ptr<Core> alive = weak.lock();
            if (alive == nullptr) return;
            alive->worker->Post([alive, id] { alive->SayGoodbyeAndDrop(id); });
          });
        }
        hetps::v1::UcxBootstrapResponse response;
        response.set_worker_address(core->worker->address());
        response.set_connection_id(id);
        response.set_frame_version(kUcxFrameVersion);
        Response out;
        out.header = response.SerializeAsString();
        reply(std::move(out));
      });
  if (!posted) reply(absl::UnavailableError("the UCX listener is shutting down"));
}

void UcxListener::Core::SayGoodbye(Peer& peer) {
  UcxFrame goodbye;
  goodbye.method = kGoodbyeMethod;
  goodbye.connection_id = peer.client_connection;
  if (peer.over_tcp && worker->InsideProgress()) {
    // As in SendReply; before the close that Drop defers alike: the endpoint is still open.
    worker->RunAfterProgress([core = shared_from_this(), ep = peer.ep, goodbye] {
      SendFrame(*core->worker, ep, kResponseAm, goodbye, Payload(), /*eager=*/false,
                [](ucs_status_t) {});
    });
    return;
  }
  SendFrame(*worker, peer.ep, kResponseAm, goodbye, Payload(), /*eager=*/false,
            [](ucs_status_t) {});
}

void UcxListener::Core::Drop(uint64_t peer) {
  auto it = peers.find(peer);
  if (it == peers.end()) return;
  // Out of the map first: ending the connection answers its requests, and those answers must
  // find the peer gone, not send on the endpoint that closes here.
  auto gone = peers.extract(it);
  peers_live.fetch_sub(1);
  peers_gone.fetch_add(1);
  gone.mapped().large_replies.Clear();
  CloseEndpoint(*worker, gone.mapped().ep);
  gone.mapped().connection->End();
  if (gone.mapped().carrier != nullptr) gone.mapped().carrier->Unpin();
}

void UcxListener::Core::SayGoodbyeAndDrop(uint64_t peer) {
  auto it = peers.find(peer);
  if (it == peers.end()) return;
  SayGoodbye(it->second);
  Drop(peer);
}

void UcxListener::Core::DropBootstrappedOn(uint64_t connection) {
  worker->Post([core = shared_from_this(), connection] {
    std::vector<uint64_t> gone;
    for (const auto& [id, peer] : core->peers) {
      if (peer.bootstrap_connection == connection) gone.push_back(id);
    }
    for (uint64_t id : gone) {
      LogInfo("ucx: closing connection %d: its bootstrap connection ended",
              core->peers[id].connection->id());
      core->SayGoodbyeAndDrop(id);
    }
  });
}

// The gRPC side: UCX bootstraps are answered here, everything else goes to the handler.
class UcxListener::Front final : public RequestHandler {
 public:
  explicit Front(UcxListener* listener) : listener_(listener) {}
  absl::Status Admit(const ConnectionInfo& connection) override {
    return listener_->handler_->Admit(connection);
  }
  void HandleRequest(Request request, ReplyCallback reply) override {
    if (request.method != kBootstrapMethod) {
      listener_->handler_->HandleRequest(std::move(request), std::move(reply));
      return;
    }
    hetps::v1::UcxBootstrapRequest probe;
    if (probe.ParseFromString(request.header) && probe.address_only()) {
      listener_->AnswerProbe(probe.worker_address(), std::move(reply));
      return;
    }
    std::shared_ptr<Core> core = listener_->CoreForBootstrap();
    if (core == nullptr) {
      reply(absl::UnavailableError("the UCX listener is shutting down"));
      return;
    }
    core->Bootstrap(std::move(request),
                    [core, reply = std::move(reply)](absl::StatusOr<Response> response) mutable {
                      reply(std::move(response));
                      core->bootstrapping.fetch_sub(1);
                    });
  }
  void Disconnected(uint64_t connection_id) override {
    listener_->handler_->Disconnected(connection_id);
    absl::MutexLock lock(&listener_->mu_);
    for (const std::shared_ptr<Core>& core : listener_->cores_) {
      core->DropBootstrappedOn(connection_id);
    }
  }

 private:
  UcxListener* const listener_;
};

absl::StatusOr<std::shared_ptr<UcxListener::Core>> UcxListener::Core::Create(
    RequestHandler* handler, const UcxOptions& options) {
  auto core = std::make_shared<Core>();
  core->handler = handler;
  core->max_message_bytes = options.max_message_bytes;
  core->options = options.shared;
  core->options.max_message_bytes = options.max_message_bytes;
  core->sweeper = std::make_unique<internal::ConnectionSweeper>(options.shared.idle_timeout);
  UcxOptions worker_options = options;
  worker_options.poll_before_sleep = options.server_poll_before_sleep;
  HETPS_ASSIGN_OR_RETURN(core->worker, UcxWorker::Create(worker_options, "ucx-server"));
  std::weak_ptr<Core> weak = core;
  UcxWorker* worker = core->worker.get();
  worker->Post([worker, weak] {
    worker->SetAmHandler(kRequestAm, [weak](const void* header, size_t header_length, void* data,
                                            size_t length, const ucp_am_recv_param_t* param) {
      std::shared_ptr<Core> core = weak.lock();
      if (core == nullptr) return UCS_OK;
      return core->OnRequest(header, header_length, data, length, param);
    });
    // Clients told goodbye reconnect (they bootstrap to the new worker); those that miss it
    // learn the new address from their next probe.
    worker->OnRenewal([weak] {
      std::shared_ptr<Core> core = weak.lock();
      if (core == nullptr) return;
      std::vector<uint64_t> all;
      for (const auto& [id, peer] : core->peers) all.push_back(id);
      for (uint64_t id : all) core->SayGoodbyeAndDrop(id);
    });
  });
  return core;
}

void UcxListener::Core::Shutdown() {
  std::shared_ptr<Core> core = shared_from_this();
  worker->Stop([core] {
    // Replies already posted have gone out; say goodbye to every peer and flush. Out of the
    // map first, as in Drop: requests that arrive or are answered meanwhile find no peer.
    absl::flat_hash_map<uint64_t, Peer> leaving;
    leaving.swap(core->peers);
    for (auto& [id, peer] : leaving) {
      core->SayGoodbye(peer);
      CloseEndpoint(*core->worker, peer.ep, kCloseWait);
      peer.connection->End();
      if (peer.carrier != nullptr) peer.carrier->Unpin();
    }
    core->sweeper.reset();  // here: bootstraps add to it from this thread
  });
}

absl::StatusOr<std::unique_ptr<UcxListener>> UcxListener::Start(
    const std::string& address, RequestHandler* handler, const UcxOptions& options,
    const std::shared_ptr<Transport>& grpc) {
  std::unique_ptr<UcxListener> listener(new UcxListener());
  listener->handler_ = handler;
  listener->options_ = options;
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<Core> core, Core::Create(handler, options));
  {
    absl::MutexLock lock(&listener->mu_);
    listener->cores_.push_back(std::move(core));
  }
  listener->front_ = std::make_unique<Front>(listener.get());
  HETPS_ASSIGN_OR_RETURN(listener->grpc_listener_, grpc->Listen(address, listener->front_.get()));
  return listener;
}

std::shared_ptr<UcxListener::Core> UcxListener::CoreForBootstrap() {
  std::vector<std::shared_ptr<Core>> unused;
  std::shared_ptr<Core> newest;
  {
    absl::MutexLock lock(&mu_);
    if (cores_.empty()) return nullptr;  // shut down
    // Older cores take no bootstraps: once the last of theirs has ended and their clients
    // have left, nothing can reach them again.
    for (auto it = cores_.begin(); it + 1 < cores_.end();) {
      if ((*it)->bootstrapping.load() == 0 && (*it)->peers_live.load() == 0) {
        unused.push_back(std::move(*it));
        it = cores_.erase(it);
      } else {
        ++it;
      }
    }
    if (cores_.back()->peers_gone.load() >= options_.server_clients_per_worker) {
      absl::StatusOr<std::shared_ptr<Core>> fresh = Core::Create(handler_, options_);
      if (fresh.ok()) {
        LogInfo("ucx: %d clients have left the server's worker: new ones get a new worker",
                cores_.back()->peers_gone.load());
        cores_.push_back(*std::move(fresh));
      } else {
        LogWarning("ucx: cannot start a new worker, the old one serves on: %s",
                   fresh.status().message());
        cores_.back()->peers_gone.store(0);  // not again at every bootstrap
      }
    }
    newest = cores_.back();
    newest->bootstrapping.fetch_add(1);
  }
  for (const std::shared_ptr<Core>& core : unused) core->Shutdown();
  return newest;
}

void UcxListener::AnswerProbe(const std::string& known_address, ReplyCallback reply) {
  hetps::v1::UcxBootstrapResponse response;
  {
    absl::MutexLock lock(&mu_);
    if (!cores_.empty()) response.set_worker_address(cores_.back()->worker->address());
    for (const std::shared_ptr<Core>& core : cores_) {
      if (core->worker->address() == known_address) response.set_worker_address(known_address);
    }
  }
  if (response.worker_address().empty()) {
    reply(absl::UnavailableError("the UCX listener is shutting down"));
    return;
  }
  Response out;
  out.header = response.SerializeAsString();
  reply(std::move(out));
}

UcxListener::~UcxListener() { Shutdown(); }

std::string UcxListener::address() const { return grpc_listener_->address(); }

void UcxListener::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (grpc_listener_ != nullptr) grpc_listener_->Shutdown();  // no new bootstraps
  std::vector<std::shared_ptr<Core>> cores;
  {
    absl::MutexLock lock(&mu_);
    cores.swap(cores_);
  }
  for (const std::shared_ptr<Core>& core : cores) core->Shutdown();
}

}  // namespace hetps::transport::ucx_internal
