// The gRPC transport: every connection is one long-lived bidirectional stream carrying frames
// (proto/frame.proto) with the tensor payload as its own slices. Built on gRPC's callback API.
#ifndef HETPS_TRANSPORT_GRPC_GRPC_TRANSPORT_H_
#define HETPS_TRANSPORT_GRPC_GRPC_TRANSPORT_H_

#include <memory>

#include "transport/transport.h"

namespace hetps::transport {

std::shared_ptr<Transport> NewGrpcTransport(const TransportOptions& options);

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_GRPC_GRPC_TRANSPORT_H_
