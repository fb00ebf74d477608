#include "transport/transport.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/grpc/grpc_transport.h"
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace hetps::transport {

std::string AvailableTransports() {
#ifdef HETPS_HAVE_UCX
  return "grpc, ucx";
#else
  return "grpc";
#endif
}

absl::StatusOr<std::shared_ptr<Transport>> CreateTransport(absl::string_view name,
                                                           const TransportOptions& options) {
  if (name == "grpc") return NewGrpcTransport(options);
#ifdef HETPS_HAVE_UCX
  if (name == "ucx") {
    UcxOptions ucx;
    ucx.max_message_bytes = options.max_message_bytes;
    ucx.net_devices = options.ucx_net_devices;
    ucx.tls = options.ucx_tls;
    ucx.busy_poll = options.ucx_busy_poll;
    ucx.server_clients_per_worker = options.ucx_clients_per_worker;
    ucx.advertised_address = options.ucx_advertised_address;
    ucx.shared = options;
    return NewUcxTransport(ucx);
  }
#endif
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "' (available: ", AvailableTransports(), ")"));
}

}  // namespace hetps::transport
