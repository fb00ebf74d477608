#include "transport/transport.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/grpc/grpc_transport.h"

namespace hetps::transport {

absl::StatusOr<std::shared_ptr<Transport>> CreateTransport(absl::string_view name,
                                                           const TransportOptions& options) {
  if (name == "grpc") return NewGrpcTransport(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "' (available: grpc)"));
}

}  // namespace hetps::transport
