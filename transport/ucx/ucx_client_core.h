// The state of one UCX client connection (ucx_client.h), shared by ucx_client.cc (connecting,
// probing, sending) and ucx_client_responses.cc (taking responses in).
#ifndef HETPS_TRANSPORT_UCX_UCX_CLIENT_CORE_H_
#define HETPS_TRANSPORT_UCX_UCX_CLIENT_CORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/timer_queue.h"
#include "proto/frame.pb.h"
#include "transport/internal/call_tracker.h"
#include "transport/transport.h"
#include "transport/ucx/send_window.h"
#include "transport/ucx/ucx_client.h"
#include "transport/ucx/ucx_frame.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

// One connection's state, shared with callbacks (which hold it weakly or only briefly).
struct ClientCore : std::enable_shared_from_this<ClientCore> {
  std::string address;
  ClientWorker* client_worker = nullptr;
  UcxWorker* worker = nullptr;
  uint64_t local_id = 0;
  TimerQueue* timers = nullptr;
  size_t max_message_bytes = 0;
  std::string greeting;
  absl::Duration keepalive_interval;
  absl::Duration keepalive_timeout;
  std::shared_ptr<internal::CallTracker> tracker;
  std::unique_ptr<Connection> bootstrap;  // gRPC, to the same server
  absl::Time last_probe = hetps::Now();   // only on the timer thread

  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  bool ready ABSL_GUARDED_BY(mu) = false;  // the endpoint is up
  bool bootstrapping ABSL_GUARDED_BY(mu) = false;
  bool probing ABSL_GUARDED_BY(mu) = false;
  uint64_t server_id ABSL_GUARDED_BY(mu) = 0;
  std::string server_address ABSL_GUARDED_BY(mu);  // the UCX worker connected to
  // This worker's address as the last bootstrap gave it (it changes if the worker starts afresh).
  std::string bootstrapped_from ABSL_GUARDED_BY(mu);
  absl::Status last_error ABSL_GUARDED_BY(mu);

  // Only by the thread holding the worker.
  struct Receiving {
    void* request = nullptr;
    ResponseCallback done;
    std::string header;
    Payload payload;
    TimerQueue::TimerId timer = 0;
    absl::Status cancelled;  // why it was cancelled, if it was
    // UCX reads the list of destination pieces until the receive completes.
    std::vector<ucp_dt_iov_t> pieces;
  };
  ucp_ep_h ep = nullptr;
  bool lanes_logged = false;
  bool over_tcp = false;  // the endpoint's lanes are UCX's TCP transport (see SendRequest)
  absl::flat_hash_map<uint64_t, ResponseSink> sinks;   // by call
  SendWindow large_sends;                              // of requests
  absl::flat_hash_map<uint64_t, Receiving> receiving;  // by call

  void StartBootstrap();
  // Calls the server's bootstrap method over gRPC; `then` gets the answer if this still lives.
  void CallBootstrap(const hetps::v1::UcxBootstrapRequest& message, absl::Duration timeout,
                     void (ClientCore::*then)(absl::StatusOr<Response>));
  void OnBootstrapped(absl::StatusOr<Response> response);
  // After a call ran out of time: is the server still the one connected to? Without peer
  // failure detection (see CreateEndpoint) this is how a restarted or vanished server shows.
  void Probe();
  void OnProbe(absl::StatusOr<Response> response);
  // Probes every keepalive_interval while connected, and every kProbeWhileCallsWait while
  // calls wait for the server.
  void ScheduleKeepalive();
  void Connected(const std::string& server_address, uint64_t id);
  void Fail(const absl::Status& status);
  // Forgets the sinks of calls that ended without a response (at their deadlines): the caller
  // may have freed that memory, and the map must not grow with every lost reply.
  void DropSinksOfEndedCalls();
  ucs_status_t OnResponse(const UcxFrame& frame, void* data, size_t length,
                          const ucp_am_recv_param_t* param);
  // Sends call `id`'s request (from Call's task, or from the window once a large one may go).
  void SendRequest(uint64_t id, UcxFrame frame, std::string method_header, Payload payload,
                   bool large, bool eager);
  // Says goodbye to the server on `closing` (Shutdown), then closes it.
  void SayGoodbyeAndClose(ucp_ep_h closing);
  void FinishReceive(uint64_t call, ucs_status_t status);
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_CLIENT_CORE_H_
