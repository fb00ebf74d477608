#include "transport/grpc/grpc_connection.h"

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
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
  // `bulk_port`: where the server's bulk port goes when it names one (null: not looked for).
  ClientStream(std::string peer, std::shared_ptr<internal::CallTracker> tracker,
               std::shared_ptr<std::atomic<int>> bulk_port)
      : peer_(std::move(peer)), tracker_(std::move(tracker)), bulk_port_(std::move(bulk_port)) {}

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

  void OnReadInitialMetadataDone(bool ok) override {
    if (!ok || bulk_port_ == nullptr) return;
    const auto& metadata = context_.GetServerInitialMetadata();
    auto it = metadata.find(kBulkPortMetadata);
    int port = 0;
    if (it == metadata.end() ||
        !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &port) ||
        port <= 0 || port > 65535) {
      return;
    }
    bulk_port_->store(port, std::memory_order_release);
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
  const std::shared_ptr<std::atomic<int>> bulk_port_;
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

namespace {

// `address` with its port replaced; empty if it has none.
std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  int old_port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &old_port)) {
    return "";
  }
  return absl::StrCat(address.substr(0, colon + 1), port);
}

}  // namespace

GrpcConnection::GrpcConnection(std::string address, std::shared_ptr<grpc::Channel> channel,
                               ChannelOpener open_bulk, std::string greeting,
                               size_t max_message_bytes, TimerQueue* timers)
    : address_(std::move(address)),
      open_bulk_(std::move(open_bulk)),
      greeting_(std::move(greeting)),
      max_message_bytes_(max_message_bytes),
      timers_(timers),
      tracker_(std::make_shared<internal::CallTracker>(timers, address_)),
      bulk_port_(std::make_shared<std::atomic<int>>(0)) {
  first_.stub = std::make_unique<grpc::GenericStub>(channel);
  first_.channel = std::move(channel);
}

GrpcConnection::~GrpcConnection() { Shutdown(); }

bool GrpcConnection::BulkReadyLocked() {
  const int port = bulk_port_->load(std::memory_order_acquire);
  if (port == 0 || open_bulk_ == nullptr) return false;
  if (bulk_.channel != nullptr && port != bulk_lane_port_) {
    retired_.push_back(std::move(bulk_));
    bulk_ = Lane();
  }
  if (bulk_.channel == nullptr) {
    const std::string address = WithPort(address_, port);
    if (address.empty()) return false;
    bulk_.channel = open_bulk_(address);
    bulk_.stub = std::make_unique<grpc::GenericStub>(bulk_.channel);
    bulk_lane_port_ = port;
  }
  return bulk_.channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY;
}

std::shared_ptr<ClientStream> GrpcConnection::CurrentStream(bool large) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return nullptr;
  const bool bulk = large && BulkReadyLocked();
  Lane& lane = bulk ? bulk_ : first_;
  if (lane.stream == nullptr || lane.stream->ended()) {
    lane.stream = std::make_shared<ClientStream>(address_, tracker_, bulk ? nullptr : bulk_port_);
    lane.stream->Start(lane.stub.get(), greeting_, lane.stream);
  }
  return lane.stream;
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
  const bool large = std::max(request.payload.size(), request.burst_bytes) >= kBulkBurstBytes;
  std::shared_ptr<ClientStream> stream = CurrentStream(large);
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
  std::vector<std::pair<std::shared_ptr<ClientStream>, std::shared_ptr<grpc::Channel>>> lanes;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    auto take = [&lanes](Lane& lane) {
      if (lane.stream != nullptr) lanes.emplace_back(std::move(lane.stream), lane.channel);
    };
    take(first_);
    take(bulk_);
    for (Lane& lane : retired_) take(lane);
  }
  tracker_->FailAll(absl::CancelledError(absl::StrCat("connection to ", address_, " shut down")));
  for (auto& [stream, channel] : lanes) stream->Cancel();
  for (auto& [stream, channel] : lanes) {
    if (stream->AwaitDone(absl::Seconds(5))) continue;
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
    abandoned->push_back(channel);
  }
}

}  // namespace hetps::transport::grpc_internal
