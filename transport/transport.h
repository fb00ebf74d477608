// The transport interface: asynchronous request/response between workers and shards.
//
// A Transport opens client Connections and server Listeners. A call is one Request (a method
// number, a small serialized header and a Payload of tensor bytes) answered by one Response or an
// error. Every call has a deadline; the transport completes it with DeadlineExceeded when no
// response came by then. Implementations: gRPC (transport/grpc) and in-process (transport/inproc,
// for unit tests). Nothing here depends on the implementation's own types.
//
//   HETPS_ASSIGN_OR_RETURN(std::shared_ptr<Transport> grpc, CreateTransport("grpc", {}));
//   HETPS_ASSIGN_OR_RETURN(auto listener, grpc->Listen("127.0.0.1:0", &handler));
//   HETPS_ASSIGN_OR_RETURN(auto connection, grpc->Connect(listener->address(), deadline));
//   connection->Call(std::move(request), [](absl::StatusOr<Response> r) { ... });
//
// Thread safety: all methods of Transport, Connection and Listener may be called from any thread.
// Lifetime: a Transport must outlive the connections and listeners it made.
#ifndef HETPS_TRANSPORT_TRANSPORT_H_
#define HETPS_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/payload.h"

namespace hetps::transport {

// Where a response's payload should land: a few spans (the pulled tensors' memory).
using ResponseSink = absl::InlinedVector<absl::Span<uint8_t>, 2>;

struct Request {
  uint32_t method = 0;
  std::string header;
  Payload payload;
  // Client side: when the caller stops waiting. Server side: the same moment, as received.
  absl::Time deadline = absl::InfiniteFuture();
  // Server side: the connection the request came on (ConnectionInfo::id).
  uint64_t connection = 0;
  // Client side, optional: where the response's payload should end up, in order. A transport
  // that can (UCX) receives a payload of exactly this size straight into these spans and the
  // response's payload then refers to them; others ignore it. The memory must stay valid until
  // the call completes.
  ResponseSink response_sink;
  // Client side, optional: the payload bytes that this call and the calls issued with it to the
  // same server move, one way (a client operation's messages to one shard); 0: this call's
  // own. gRPC sends bursts of 16 MiB or more on a connection of their own
  // (TransportOptions::grpc_bulk_port).
  size_t burst_bytes = 0;
};

struct Response {
  std::string header;
  Payload payload;
};

// Runs exactly once per call, never inside the Call() that started it (not even for an error
// found at once): on a transport thread, or inside Drive() or Progress() on a caller's thread. So a
// caller may hold a lock around Call() that its callback takes, and a thread inside Call() always
// leaves it promptly. It must not block for long.
using ResponseCallback = absl::AnyInvocable<void(absl::StatusOr<Response>)>;
// Given to a RequestHandler; must be called exactly once, from any thread.
using ReplyCallback = absl::AnyInvocable<void(absl::StatusOr<Response>)>;

// The client end of a connection to one server.
class Connection {
 public:
  virtual ~Connection() = default;

  // Sends `request` and completes `done` with the server's response, or with:
  //   DeadlineExceeded    no response by request.deadline
  //   Unavailable         the connection broke or the server cannot be reached (retryable)
  //   ResourceExhausted   the request is larger than the message size limit
  //   Cancelled           the connection was shut down while the call was outstanding
  //   FailedPrecondition  the connection was already shut down
  // or the error status the server's handler replied with.
  virtual void Call(Request request, ResponseCallback done) = 0;

  // Completes outstanding calls with Cancelled and refuses later ones. Idempotent. Returns once
  // the transport has let go of the connection's resources; it waits for its own threads for
  // that, never a fixed time, so it is not to be called from a callback that blocks them.
  virtual void Shutdown() = 0;

  virtual const std::string& address() const = 0;
};

// How a client introduces itself on every connection it opens (a reconnection too).
struct ConnectOptions {
  // Opaque to the transport, handed to the server's RequestHandler::Admit (hetps: the worker's
  // HelloRequest). Small: it travels in gRPC metadata.
  std::string greeting;
};

// Server side: one client connection, as its handler sees it.
struct ConnectionInfo {
  // Unique among the connections of this process; requests carry it (Request::connection).
  uint64_t id = 0;
  // The client's address as the transport knows it ("ipv4:10.0.0.1:50212").
  std::string peer;
  // ConnectOptions::greeting, or empty when the client sent none.
  std::string greeting;
};

// Server-side logic behind a Listener.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // Called once per connection, on a transport thread, before any of its requests reaches
  // HandleRequest. An error refuses the connection: the transport answers each of its requests
  // with that error itself, so what Admit checks holds for every request of the connection.
  virtual absl::Status Admit(const ConnectionInfo& connection) { return absl::OkStatus(); }

  // Handles one request and calls `reply` exactly once, now or later, from any thread. Runs on
  // a transport thread: it must hand long work elsewhere instead of blocking.
  virtual void HandleRequest(Request request, ReplyCallback reply) = 0;

  // Called once when an admitted connection has ended: the client left or broke, it was idle
  // (or silent) too long, or the listener shut down. Replies to its requests go nowhere from
  // now on, so requests that wait can be let go. May run while requests of the connection are
  // still in HandleRequest on other threads.
  virtual void Disconnected(uint64_t connection_id) {}
};

class Listener {
 public:
  virtual ~Listener() = default;
  // The address clients connect to, with the port resolved when 0 was asked for.
  virtual std::string address() const = 0;
  // Stops accepting, ends open connections and returns within a bounded time. Idempotent.
  virtual void Shutdown() = 0;
};

struct TransportOptions {
  // Largest frame (header + payload) sent or received; larger ones are refused with
  // ResourceExhausted. Both ends of a connection must agree on it.
  size_t max_message_bytes = 64 << 20;
  // UCX only (see transport/ucx/ucx_transport.h): network devices ("auto": those that reach
  // the peer), transports (UCX_TLS, empty: UCX's choice) and busy polling.
  std::string ucx_net_devices = "auto";
  std::string ucx_tls;
  bool ucx_busy_poll = false;
  // A UCX server moves new clients to a new UCX worker once this many have left the current
  // one (UcxOptions::server_clients_per_worker).
  int ucx_clients_per_worker = 64;
  // UCX only, for a listener on a wildcard address (0.0.0.0, ::): the address peers reach it
  // at (a shard's entry in --servers). "auto" devices then follow it as they follow a
  // listener's own address; empty: every device.
  std::string ucx_advertised_address;

  // Liveness: each end pings the other after this long without traffic, and a connection whose
  // ping is not answered within keepalive_timeout is closed (its calls fail with Unavailable;
  // the client reconnects on its next call). gRPC: HTTP/2 pings; UCX: the client checks the
  // server over its bootstrap connection.
  absl::Duration keepalive_interval = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Server side: a connection with no request in progress and none received for this long is
  // closed (a client reconnects by itself when it next calls); so is one that connects and
  // never sends a request. absl::InfiniteDuration(): never.
  absl::Duration idle_timeout = absl::Minutes(10);
  // Server side, per connection: while its replies not yet taken by the client exceed this many
  // bytes, or this many of its requests are in progress, the server reads no more of its
  // requests (a client that never reads cannot make the server queue without bound).
  size_t max_unsent_reply_bytes = 256 << 20;
  size_t max_requests_in_progress = 4096;

  // TLS for gRPC (and so for UCX's bootstrap, which runs over it), from PEM files; all empty:
  // plaintext. Server: tls_cert_file and tls_key_file are its certificate and key; with
  // tls_ca_file too, it requires client certificates signed by that CA. Client: tls_ca_file
  // verifies the server (whose certificate must name the address connected to); with
  // tls_cert_file and tls_key_file it presents a certificate of its own. A file that cannot
  // be read fails Listen or Connect with InvalidArgument.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;

  // gRPC, server side: bursts of calls that move 16 MiB or more (Request::burst_bytes) travel
  // on a second connection, to this port (0: any free one; -1: none, they share the first
  // connection). It runs without gRPC's bandwidth-delay probe, under which transfers with tens
  // of MiB in flight stall, while the first keeps it, which moves a few MiB faster and whose
  // pings cut small calls' latency (measured in bench/PERFORMANCE.md). The server tells each
  // client the port when it connects; only a client on the server's machine uses it (across a
  // network the probe grows the windows to the link), and one that cannot reach it keeps every
  // call on the first connection.
  int grpc_bulk_port = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual absl::string_view name() const = 0;

  // Serves `handler` at `address` ("host:port"; port 0 picks a free port).
  // REQUIRES: `handler` outlives the listener.
  virtual absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address,
                                                           RequestHandler* handler) = 0;

  // Connects to `address`; Unavailable if it cannot be reached before `deadline`. A server
  // that refuses the greeting (RequestHandler::Admit) answers every call with its reason.
  virtual absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                              absl::Time deadline,
                                                              const ConnectOptions& options) = 0;
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline) {
    return Connect(address, deadline, ConnectOptions());
  }

  // For a thread about to block until some of its calls complete: moves the transport's client
  // side along from this thread until `done()`, where that is faster than waiting for a
  // transport thread (UCX with busy polling: no hand-off between threads per call). Response
  // callbacks may then run on this thread. Returns done(); returns at once where the transport
  // has nothing to drive, and also stops early once it cannot drive (the caller then blocks as
  // usual). Bounded by the calls themselves: each ends by its deadline. `done` must be cheap
  // and thread-safe. Not from a response callback.
  virtual bool Drive(absl::FunctionRef<bool()> done) { return done(); }

  // For a thread that has just made calls and has more work to do before it waits (a client
  // converting its next message's floats): moves the transport's client side along once from
  // this thread, without waiting, so that what it sent goes out and what arrived is handled
  // now rather than when a transport thread, which this thread keeps off its CPU, gets to run.
  // Response callbacks may then run on this thread. Does nothing where the transport has
  // nothing to drive. Not from a response callback.
  virtual void Progress() {}
};

// Creates a transport by name: "grpc", or "ucx" when built with UCX (a UCX listener serves
// gRPC clients too). The in-process transport is made directly with NewInProcTransport(),
// since both ends must share one instance.
absl::StatusOr<std::shared_ptr<Transport>> CreateTransport(absl::string_view name,
                                                           const TransportOptions& options);

// The names CreateTransport knows, e.g. "grpc, ucx".
std::string AvailableTransports();

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_TRANSPORT_H_
