#include "transport/grpc/grpc_connection.h"

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/log.h"
#include "transport/grpc/frame_codec.h"
#include "transport/internal/call_scope.h"

namespace hetps::transport::grpc_internal {
namespace {

// The stream whose reactor callback this thread runs, if any: Shutdown from there (a response
// callback that shuts its connection down) must not wait for OnDone, which gRPC runs only after
// that callback has returned.
thread_local const void* reacting_stream = nullptr;

class Reacting {
 public:
  explicit Reacting(const void* stream) : previous_(reacting_stream) { reacting_stream = stream; }
  ~Reacting() { reacting_stream = previous_; }

 private:
  const void* const previous_;
};

}  // namespace

// One bidirectional stream. It keeps itself alive (self_) until gRPC calls OnDone.
//
// Writes may be started from any thread, so the reactor holds one gRPC "hold" while the stream
// is usable; the hold is removed once the read side has ended and no write is in flight.
class ClientStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ClientStream(std::string peer, std::shared_ptr<internal::CallTracker> tracker)
      : peer_(std::move(peer)), tracker_(std::move(tracker)) {}

  void Start(grpc::GenericStub* stub, const std::string& greeting,
             std::shared_ptr<ClientStream> self) {
    self_ = std::move(self);
    if (!greeting.empty()) context_.AddMetadata(kGreetingMetadata, greeting);
    stub->PrepareBidiStreamingCall(&context_, kStreamMethod, grpc::StubOptions(), this);
    AddHold();  // after binding the stream, before StartCall
    StartRead(&read_buffer_);
    StartCall();
  }

  // Queues `frame` for call `id`. False if the stream has ended (the caller fails the call).
  bool Send(uint64_t id, grpc::ByteBuffer frame) {
    grpc::ByteBuffer* to_write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return false;
      calls_.insert(id);
      writes_.push_back(std::move(frame));
      if (!writing_) {
        writing_ = true;
        to_write = &writes_.front();
      }
    }
    if (to_write != nullptr) StartWrite(to_write);
    return true;
  }

  bool ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  void Cancel() { context_.TryCancel(); }

  // Waits until gRPC has finished with the stream and let go of it, unless called from the
  // stream's own reactor callback. Nothing is freed under the stream if this gives up: it keeps
  // itself alive until OnDone. The wait is for an orderly teardown only, so it is bounded: gRPC
  // 1.51 may never finish a write held by flow control after a cancel (seen with a stopped
  // peer), and then OnDone never comes. False if it gave up.
  bool AwaitDone(absl::Duration grace) {
    if (reacting_stream == this) return true;
    return done_->WaitForNotificationWithTimeout(grace);
  }

  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer* next = nullptr;
    bool release_hold = false;
    {
      absl::MutexLock lock(&mu_);
      writes_.pop_front();
      if (!ok) {
        // The stream is broken; queued frames will never go out. Their calls fail in OnDone.
        ended_ = true;
        writes_.clear();
      }
      if (!writes_.empty()) {
        next = &writes_.front();
      } else {
        writing_ = false;
        release_hold = TakeHoldLocked();
      }
    }
    if (next != nullptr) StartWrite(next);
    if (release_hold) RemoveHold();
  }

  void OnReadDone(bool ok) override {
    Reacting reacting(this);
    if (!ok) {
      EndReadSide();
      return;
    }
    DecodeError error;
    absl::StatusOr<Frame> frame = DecodeFrame(read_buffer_, &error);
    read_buffer_.Clear();
    if (!frame.ok() || !frame->header.is_response()) {
      LogError("bad frame from %s: %s; closing the stream", peer_,
               frame.ok() ? "not a response" : frame.status().ToString());
      Cancel();
      EndReadSide();
      return;
    }
    const uint64_t id = frame->header.call_id();
    StartRead(&read_buffer_);  // the decoded frame holds its own references to the slices
    {
      absl::MutexLock lock(&mu_);
      calls_.erase(id);
    }
    tracker_->Finish(id, ResponseFromFrame(*std::move(frame)));
  }

  void OnDone(const grpc::Status& status) override {
    Reacting reacting(this);
    absl::flat_hash_set<uint64_t> orphans;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      orphans.swap(calls_);
    }
    absl::Status error = status.ok()
                             ? absl::UnavailableError(absl::StrCat("stream to ", peer_, " ended"))
                             : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                            absl::StrCat(peer_, ": ", status.error_message()));
    for (uint64_t id : orphans) tracker_->Finish(id, error);
    // Let go of ourselves before telling the connection: if it is waiting in Shutdown, the
    // stream (and its ClientContext, which holds the channel) is then destroyed on that thread.
    // Destroyed here instead, on a gRPC thread, the last channel reference could start gRPC's
    // library shutdown on a detached thread and race with the process's exit.
    std::shared_ptr<TimedNotification> done = done_;
    self_.reset();  // `this` may be gone from here on
    done->Notify();
  }

 private:
  void EndReadSide() {
    bool release_hold;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      read_ended_ = true;
      release_hold = TakeHoldLocked();
    }
    if (release_hold) RemoveHold();
  }

  // The hold goes once the read side has ended and no write is in flight.
  bool TakeHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!read_ended_ || writing_ || hold_released_) return false;
    hold_released_ = true;
    return true;
  }

  const std::string peer_;
  const std::shared_ptr<internal::CallTracker> tracker_;
  grpc::ClientContext context_;
  grpc::ByteBuffer read_buffer_;
  const std::shared_ptr<TimedNotification> done_ = std::make_shared<TimedNotification>();
  std::shared_ptr<ClientStream> self_;

  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> calls_ ABSL_GUARDED_BY(mu_);
};

GrpcConnection::GrpcConnection(std::string address, std::shared_ptr<grpc::Channel> channel,
                               std::string greeting, size_t max_message_bytes, TimerQueue* timers)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(channel_),
      greeting_(std::move(greeting)),
      max_message_bytes_(max_message_bytes),
      timers_(timers),
      tracker_(std::make_shared<internal::CallTracker>(timers, address_)) {}

GrpcConnection::~GrpcConnection() { Shutdown(); }

std::shared_ptr<ClientStream> GrpcConnection::CurrentStream() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return nullptr;
  if (stream_ == nullptr || stream_->ended()) {
    stream_ = std::make_shared<ClientStream>(address_, tracker_);
    stream_->Start(&stub_, greeting_, stream_);
  }
  return stream_;
}

void GrpcConnection::Call(Request request, ResponseCallback done) {
  internal::CallScope scope;
  hetps::v1::FrameHeader header;
  header.set_method(request.method);
  header.set_header(std::move(request.header));
  if (request.deadline != absl::InfiniteFuture()) {
    header.set_timeout_us(
        std::max<int64_t>(1, absl::ToInt64Microseconds(request.deadline - hetps::Now())));
  }
  const size_t frame_size = EncodedFrameSize(header, request.payload);
  if (frame_size > max_message_bytes_) {
    internal::CompleteOutsideCall(timers_, std::move(done),
                                  absl::ResourceExhaustedError(absl::StrFormat(
                                      "request of %d bytes exceeds the %d-byte message limit",
                                      frame_size, max_message_bytes_)));
    return;
  }
  std::shared_ptr<ClientStream> stream = CurrentStream();
  if (stream == nullptr) {
    internal::CompleteOutsideCall(
        timers_, std::move(done),
        absl::FailedPreconditionError(absl::StrCat("connection to ", address_, " is shut down")));
    return;
  }
  const uint64_t id = tracker_->Start(request.deadline, std::move(done));
  header.set_call_id(id);
  if (!stream->Send(id, EncodeFrame(std::move(header), request.payload))) {
    tracker_->Finish(id, absl::UnavailableError(absl::StrCat("stream to ", address_, " ended")));
  }
}

void GrpcConnection::Shutdown() {
  std::shared_ptr<ClientStream> stream;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stream = std::move(stream_);
  }
  tracker_->FailAll(absl::CancelledError(absl::StrCat("connection to ", address_, " shut down")));
  if (stream != nullptr) {
    stream->Cancel();
    if (!stream->AwaitDone(absl::Seconds(5))) {
      LogWarning(
          "grpc: the stream to %s did not finish within 5 s of its cancellation (a write "
          "held by flow control?); it is left to finish by itself",
          address_);
      // When it does, its context drops its channel reference on a gRPC thread; were that the
      // last one, gRPC would tear the channel down there, which crashes (seen: SIGBUS in
      // ~Subchannel). A channel given up on is kept for the life of the process instead.
      static absl::Mutex abandoned_mu(absl::kConstInit);
      static auto* abandoned = new std::vector<std::shared_ptr<grpc::Channel>>();
      absl::MutexLock lock(&abandoned_mu);
      abandoned->push_back(channel_);
    }
  }
}

}  // namespace hetps::transport::grpc_internal
