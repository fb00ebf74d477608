// GrpcConnection: the client end of a gRPC connection. All calls to one server share one
// bidirectional stream (a callback-API reactor), multiplexed by call id; one write is in flight
// at a time and the rest queue behind it. If the stream breaks, its outstanding calls fail with
// Unavailable (or the status gRPC reports) and the next call opens a new stream.
#ifndef HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_
#define HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/timer_queue.h"
#include "transport/internal/call_tracker.h"
#include "transport/transport.h"

namespace hetps::transport::grpc_internal {

class ClientStream;

class GrpcConnection final : public Connection {
 public:
  // REQUIRES: `timers` outlives the connection.
  // `greeting`: sent with every stream it opens (ConnectOptions::greeting).
  GrpcConnection(std::string address, std::shared_ptr<grpc::Channel> channel, std::string greeting,
                 size_t max_message_bytes, TimerQueue* timers);
  ~GrpcConnection() override;

  void Call(Request request, ResponseCallback done) override;
  void Shutdown() override;
  const std::string& address() const override { return address_; }

 private:
  // The live stream, opening a new one if there is none; null after Shutdown.
  std::shared_ptr<ClientStream> CurrentStream();

  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
  const std::string greeting_;
  const size_t max_message_bytes_;
  TimerQueue* const timers_;
  const std::shared_ptr<internal::CallTracker> tracker_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<ClientStream> stream_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::transport::grpc_internal

#endif  // HETPS_TRANSPORT_GRPC_GRPC_CONNECTION_H_
