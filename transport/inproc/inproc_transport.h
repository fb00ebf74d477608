// The in-process transport: listeners and connections inside one process, for unit tests.
//
// It behaves like a network where it matters to the code above it: request and response payloads
// are copied (the caller's memory is never shared with the handler), handlers run on the
// listener's own thread, size limits and deadlines apply, and faults can be switched on:
// dropped requests (the caller then sees DeadlineExceeded) and duplicated requests (to test that
// retries are recognised).
//
//   auto transport = NewInProcTransport();
//   auto listener = transport->Listen("shard0:0", &handler);       // any "name:port"
//   auto connection = transport->Connect(listener->address(), deadline);
#ifndef HETPS_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
#define HETPS_TRANSPORT_INPROC_INPROC_TRANSPORT_H_

#include <memory>

#include "transport/transport.h"

namespace hetps::transport {

struct InProcFaults {
  // Every n-th request (counted per transport) is lost; 0 = none.
  int drop_every_nth_request = 0;
  // Every request is delivered to the handler twice (the second reply is discarded).
  bool duplicate_requests = false;
};

class InProcTransport : public Transport {
 public:
  virtual void SetFaults(const InProcFaults& faults) = 0;
};

std::shared_ptr<InProcTransport> NewInProcTransport(const TransportOptions& options = {});

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
