#include "transport/grpc/grpc_transport.h"

#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/timer_queue.h"
#include "transport/grpc/frame_codec.h"
#include "transport/grpc/grpc_connection.h"
#include "transport/grpc/grpc_credentials.h"
#include "transport/grpc/grpc_deadline.h"
#include "transport/grpc/grpc_listener.h"
#include "transport/internal/local_address.h"

namespace hetps::transport {
namespace {

class GrpcTransport final : public Transport {
 public:
  explicit GrpcTransport(const TransportOptions& options) : options_(options) {}

  absl::string_view name() const override { return "grpc"; }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address,
                                                   RequestHandler* handler) override {
    absl::StatusOr<std::unique_ptr<grpc_internal::GrpcListener>> listener =
        grpc_internal::GrpcListener::Start(address, handler, options_);
    if (!listener.ok()) return listener.status();
    return std::unique_ptr<Listener>(*std::move(listener));
  }

  using Transport::Connect;
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline,
                                                      const ConnectOptions& options) override {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        grpc_internal::ChannelCredentials(options_);
    if (!credentials.ok()) return credentials.status();
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(address, *credentials, ChannelArguments(/*bulk=*/false));
    if (!channel->WaitForConnected(GrpcDeadline(deadline))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
    }
    // The bulk connection runs without the bandwidth-delay probe, which stalls transfers of
    // 16 MiB and more between processes of one machine; across a network the probe is what
    // grows the windows to the link (without it a 1 Gbit/s link carried 64 MiB at 0.65 of its
    // rate), so a shard elsewhere gets every call on the first connection.
    grpc_internal::GrpcConnection::ChannelOpener open_bulk;
    if (internal::IsThisMachine(address)) {
      open_bulk = [credentials = *credentials,
                   args = ChannelArguments(/*bulk=*/true)](const std::string& bulk_address) {
        return grpc::CreateCustomChannel(bulk_address, credentials, args);
      };
    }
    return std::make_unique<grpc_internal::GrpcConnection>(address, std::move(channel),
                                                           std::move(open_bulk), options.greeting,
                                                           options_.max_message_bytes, &timers_);
  }

 private:
  grpc::ChannelArguments ChannelArguments(bool bulk) const {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    // One TCP connection per Connection, not shared with other clients in the process.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // Reconnect quickly after a server restart instead of gRPC's default backoff of up to 2 min.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    for (const auto& [name, value] : grpc_internal::KeepaliveArguments(options_, false)) {
      args.SetInt(name, value);
    }
    const auto [probe, on] = grpc_internal::BandwidthProbeArgument(bulk);
    args.SetInt(probe, on);
    return args;
  }

  const TransportOptions options_;
  TimerQueue timers_;
};

}  // namespace

std::shared_ptr<Transport> NewGrpcTransport(const TransportOptions& options) {
  return std::make_shared<GrpcTransport>(options);
}

}  // namespace hetps::transport
