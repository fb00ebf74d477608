#include "transport/grpc/grpc_listener.h"

#include <grpc/grpc.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_callback.h>

#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log.h"
#include "transport/grpc/frame_codec.h"
#include "transport/grpc/grpc_credentials.h"
#include "transport/grpc/grpc_deadline.h"
#include "transport/internal/server_connection.h"

namespace hetps::transport::grpc_internal {
namespace {

// How long Shutdown lets open streams finish before cancelling them.
constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

// The server end of one client's stream. Owned by itself (self_) until OnDone, and by the reply
// callbacks handed to the RequestHandler, so a late reply never touches freed memory; after the
// stream has finished, replies are dropped.
//
// Backpressure: the next frame is read only while the connection may read more
// (ServerConnection::MayReadMore); otherwise reading resumes once replies have gone out. A
// client that never reads its replies then finds its own writes held by flow control.
class ServerStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ServerStream(std::shared_ptr<internal::ServerConnection> connection, size_t max_message_bytes)
      : connection_(std::move(connection)), max_message_bytes_(max_message_bytes) {}

  void Start(std::shared_ptr<ServerStream> self) {
    self_ = std::move(self);
    StartRead(&read_buffer_);
  }

  // Ends a stream the sweeper found idle; the client opens a new one when it next calls.
  void CloseIdle() {
    mu_.Lock();
    if (finished_ || broken_) {
      mu_.Unlock();
      return;
    }
    broken_ = true;
    final_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed: idle for too long");
    UnlockAndFinishIfIdle();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      mu_.Lock();
      read_ended_ = true;
      UnlockAndFinishIfIdle();
      return;
    }
    DecodeError error;
    absl::StatusOr<Frame> frame = DecodeFrame(read_buffer_, &error);
    read_buffer_.Clear();
    if (!frame.ok() && !error.call_id.has_value()) {
      // Without a call id the error cannot be answered; end the stream with it instead.
      LogWarning("unreadable frame from %s: %s", connection_->peer(), frame.status().ToString());
      mu_.Lock();
      read_ended_ = true;
      final_status_ =
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(frame.status().message()));
      UnlockAndFinishIfIdle();
      return;
    }
    if (!frame.ok()) {
      QueueReply(*error.call_id, frame.status());
    } else if (frame->header.is_response()) {
      QueueReply(frame->header.call_id(),
                 absl::InvalidArgumentError("a response frame was sent to a server"));
    } else {
      Dispatch(*std::move(frame));
    }
    // The next frame is read only now, so the handler receives a stream's requests in the
    // order they were sent.
    mu_.Lock();
    read_paused_ = true;
    UnlockAndResumeReading();
  }

  void OnWriteDone(bool ok) override {
    mu_.Lock();
    connection_->Sent(writes_.front().Length());
    writes_.pop_front();
    if (!ok) {
      broken_ = true;
      DropWritesLocked();
    }
    if (!writes_.empty() && !broken_) {
      grpc::ByteBuffer* next = &writes_.front();
      mu_.Unlock();
      StartWrite(next);
    } else {
      writing_ = false;
      mu_.Unlock();
    }
    mu_.Lock();
    UnlockAndResumeReading();
  }

  void OnCancel() override {
    mu_.Lock();
    broken_ = true;
    final_status_ = grpc::Status::CANCELLED;
    if (!writing_) DropWritesLocked();
    UnlockAndFinishIfIdle();
  }

  void OnDone() override {
    connection_->End();
    std::shared_ptr<ServerStream> keep = std::move(self_);  // released when this returns
  }

 private:
  void Dispatch(Frame frame) {
    Request request;
    request.method = frame.header.method();
    request.header = std::move(*frame.header.mutable_header());
    request.payload = std::move(frame.payload);
    if (frame.header.timeout_us() > 0) {
      request.deadline = hetps::Now() + absl::Microseconds(frame.header.timeout_us());
    }
    const uint64_t id = frame.header.call_id();
    std::shared_ptr<ServerStream> self = self_;
    connection_->Dispatch(std::move(request),
                          [self = std::move(self), id](absl::StatusOr<Response> result) {
                            self->QueueReply(id, std::move(result), /*answers_request=*/true);
                          });
  }

  void QueueReply(uint64_t id, absl::StatusOr<Response> result, bool answers_request = false) {
    if (result.ok()) {
      const size_t size = EncodedFrameSize(ResponseHeader(id, result), result->payload);
      if (size > max_message_bytes_) {
        result = absl::ResourceExhaustedError(absl::StrFormat(
            "response of %d bytes exceeds the %d-byte message limit", size, max_message_bytes_));
      }
    }
    grpc::ByteBuffer frame =
        EncodeFrame(ResponseHeader(id, result), result.ok() ? result->payload : Payload());
    mu_.Lock();
    if (finished_ || broken_) {
      connection_->Answered(0, answers_request);
      UnlockAndFinishIfIdle();
      return;
    }
    connection_->Answered(frame.Length(), answers_request);
    writes_.push_back(std::move(frame));
    if (!writing_) {
      writing_ = true;
      grpc::ByteBuffer* to_write = &writes_.front();
      mu_.Unlock();
      StartWrite(to_write);
      mu_.Lock();
    }
    // An answered request may lift the limit on requests in progress.
    UnlockAndResumeReading();
  }

  // Starts the next read if reading is paused and the connection may read more, then finishes
  // the stream if it is done. No Finish can overtake a StartRead (starting_read_); a read that
  // completed while this thread was starting it may have left reading paused again: look again.
  void UnlockAndResumeReading() ABSL_UNLOCK_FUNCTION(mu_) {
    while (read_paused_ && !starting_read_ && !read_ended_ && !finished_ && !broken_ &&
           connection_->MayReadMore()) {
      read_paused_ = false;
      starting_read_ = true;
      mu_.Unlock();
      StartRead(&read_buffer_);
      mu_.Lock();
      starting_read_ = false;
    }
    UnlockAndFinishIfIdle();
  }

  void DropWritesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const grpc::ByteBuffer& write : writes_) connection_->Sent(write.Length());
    writes_.clear();
  }

  // Finishes the RPC once nothing more can be written: the client is gone (broken_), or it has
  // stopped sending and every request has been answered. Never while a write is in flight.
  // Finish is called after unlocking: it may lead to OnDone, which can free this stream.
  void UnlockAndFinishIfIdle() ABSL_UNLOCK_FUNCTION(mu_) {
    const bool drained =
        read_ended_ && connection_->IdleSince(absl::InfiniteFuture()) && writes_.empty();
    if (finished_ || writing_ || starting_read_ || (!broken_ && !drained)) {
      mu_.Unlock();
      return;
    }
    finished_ = true;
    grpc::Status status = final_status_;
    mu_.Unlock();
    Finish(std::move(status));
  }

  const std::shared_ptr<internal::ServerConnection> connection_;
  const size_t max_message_bytes_;
  grpc::ByteBuffer read_buffer_;
  std::shared_ptr<ServerStream> self_;

  absl::Mutex mu_;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // no read outstanding (backpressure)
  bool starting_read_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class GrpcListener::Service final : public grpc::CallbackGenericService {
 public:
  // `bulk_port`: told to every client that connects (0: none).
  Service(RequestHandler* handler, const TransportOptions& options, int bulk_port)
      : handler_(handler),
        options_(options),
        bulk_port_(bulk_port),
        sweeper_(options.idle_timeout) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    if (context->method() != kStreamMethod) {
      return grpc::CallbackGenericService::CreateReactor(context);  // UNIMPLEMENTED
    }
    std::string greeting;
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find(kGreetingMetadata); it != metadata.end()) {
      greeting.assign(it->second.data(), it->second.size());
    }
    if (bulk_port_ != 0) context->AddInitialMetadata(kBulkPortMetadata, absl::StrCat(bulk_port_));
    std::shared_ptr<internal::ServerConnection> connection = internal::ServerConnection::Create(
        handler_, options_, context->peer(), std::move(greeting));
    auto stream = std::make_shared<ServerStream>(connection, options_.max_message_bytes);
    sweeper_.Add(connection, [weak = std::weak_ptr<ServerStream>(stream)] {
      if (std::shared_ptr<ServerStream> alive = weak.lock()) alive->CloseIdle();
    });
    ServerStream* reactor = stream.get();
    reactor->Start(std::move(stream));
    return reactor;
  }

 private:
  RequestHandler* const handler_;
  const TransportOptions options_;
  const int bulk_port_;
  internal::ConnectionSweeper sweeper_;
};

namespace {

// Serves `service` at `address`; `bulk`: the bulk server's channel settings. Sets `port`.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& address,
                                                          grpc::CallbackGenericService* service,
                                                          const TransportOptions& options,
                                                          bool bulk, int* port) {
  grpc::ServerBuilder builder;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(address, *credentials, port);
  builder.RegisterCallbackGenericService(service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  for (const auto& [name, value] : KeepaliveArguments(options, /*server=*/true)) {
    builder.AddChannelArgument(name, value);
  }
  const auto [probe, on] = BandwidthProbeArgument(bulk);
  builder.AddChannelArgument(probe, on);
  // A second server on a busy port must fail, not silently share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return server;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Start(const std::string& address,
                                                                  RequestHandler* handler,
                                                                  const TransportOptions& options) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has no port"));
  }
  std::unique_ptr<GrpcListener> listener(new GrpcListener());
  const std::string host = address.substr(0, colon);
  int bulk_port = 0;
  if (options.grpc_bulk_port >= 0) {
    // Without its own handler state: a bulk stream is one more connection of the same client.
    listener->bulk_service_ = std::make_unique<Service>(handler, options, /*bulk_port=*/0);
    absl::StatusOr<std::unique_ptr<grpc::Server>> bulk =
        StartServer(absl::StrCat(host, ":", options.grpc_bulk_port), listener->bulk_service_.get(),
                    options, /*bulk=*/true, &bulk_port);
    if (!bulk.ok()) {
      return absl::Status(bulk.status().code(), absl::StrCat(bulk.status().message(),
                                                             " (the bulk port, grpc_bulk_port)"));
    }
    listener->bulk_server_ = *std::move(bulk);
  }
  listener->service_ = std::make_unique<Service>(handler, options, bulk_port);
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartServer(address, listener->service_.get(), options, /*bulk=*/false, &port);
  if (!server.ok()) return server.status();
  listener->server_ = *std::move(server);
  listener->address_ = absl::StrCat(host, ":", port);
  // An operator opening ports for a firewall needs this one too (0 picks any free one).
  if (bulk_port != 0) {
    LogInfo("grpc: %s takes bursts of %d MiB and more on its bulk port %s:%d", listener->address_,
            kBulkBurstBytes >> 20, host, bulk_port);
  }
  return listener;
}

GrpcListener::~GrpcListener() { Shutdown(); }

void GrpcListener::Shutdown() {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const absl::Time deadline = hetps::Now() + kShutdownGrace;
  for (grpc::Server* server : {server_.get(), bulk_server_.get()}) {
    if (server != nullptr) server->Shutdown(GrpcDeadline(deadline));
  }
  for (grpc::Server* server : {server_.get(), bulk_server_.get()}) {
    if (server != nullptr) server->Wait();
  }
}

}  // namespace hetps::transport::grpc_internal
