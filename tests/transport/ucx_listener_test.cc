// The UCX transport's own behaviour, beyond what every transport does (transport_test.cc):
// its listener's gRPC side, its server's workers, and its client's bookkeeping.
#ifdef HETPS_HAVE_UCX
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "gtest/gtest.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/call.h"
#include "tests/testing/captured_stderr.h"
#include "tests/testing/one_cpu.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/transports.h"
#include "tests/transport/run_on_worker.h"
#include "tests/transport/test_handler.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/transport.h"
#include "transport/ucx/shared_memory.h"
#include "transport/ucx/spin_pacer.h"
#include "transport/ucx/ucx_client.h"
#include "transport/ucx/ucx_server.h"
#include "transport/ucx/ucx_transport.h"

namespace hetps::transport {
namespace {

using test_calls::kEcho;
using test_calls::kNeverReply;
using test_calls::kRecord;
using test_calls::kReplyLater;
using test_calls::MakeRequest;
using test_calls::TestHandler;
using testing::CallAndWait;

// A listener on `transport` at a free loopback port, and a connection to it from `transport`.
absl::Status ListenAndConnect(Transport& transport, RequestHandler* handler,
                              std::unique_ptr<Listener>* listener,
                              std::unique_ptr<Connection>* connection) {
  absl::StatusOr<std::unique_ptr<Listener>> listening = transport.Listen("127.0.0.1:0", handler);
  if (!listening.ok()) return listening.status();
  *listener = *std::move(listening);
  absl::StatusOr<std::unique_ptr<Connection>> connected =
      transport.Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
  if (!connected.ok()) return connected.status();
  *connection = *std::move(connected);
  return absl::OkStatus();
}

// A UCX listener serves gRPC clients on its port too (workers of a gRPC-only build); a UCX
// client facing a gRPC-only listener gets an error that says so, at once.
TEST(UcxListenerTest, ServesGrpcClientsOnTheSamePort) {
  TestHandler handler;
  std::shared_ptr<Transport> ucx = testing::NewTestTransport("ucx");
  auto listener = ucx->Listen("127.0.0.1:0", &handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto grpc = NewGrpcTransport({});
  auto connection = grpc->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(connection.ok()) << connection.status();
  absl::StatusOr<Response> response = CallAndWait(**connection, MakeRequest(kEcho, "over grpc"));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->header, "over grpc");
  (*connection)->Shutdown();
  (*listener)->Shutdown();

  auto grpc_only = grpc->Listen("127.0.0.1:0", &handler);
  ASSERT_OK(grpc_only);
  const absl::Time start = absl::Now();
  auto ucx_connection = ucx->Connect((*grpc_only)->address(), absl::Now() + absl::Seconds(10));
  absl::Status outcome = ucx_connection.status();
  if (ucx_connection.ok()) {
    // Connections may bootstrap lazily: then the first call fails.
    outcome = CallAndWait(**ucx_connection, MakeRequest(kEcho, "x", absl::Seconds(5))).status();
  }
  EXPECT_EQ(outcome.code(), absl::StatusCode::kUnavailable) << outcome;
  EXPECT_NE(outcome.message().find("does not serve UCX"), absl::string_view::npos) << outcome;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  (*grpc_only)->Shutdown();
}

// A server moves new clients to a new UCX worker once a few have left the old one
// (UcxOptions::server_clients_per_worker; PsServerUcxTest counts what that saves). A client that
// stays on an old worker keeps being served, and its probes (every second while a call waits)
// are answered with that worker's address, not taken for a restart of the server.
TEST(UcxListenerTest, AClientOfAReplacedWorkerIsServedAndNotTakenForARestart) {
  TestHandler handler;
  UcxOptions server_options;
  server_options.server_clients_per_worker = 2;
  std::shared_ptr<Transport> server = NewUcxTransport(server_options);
  auto listener = server->Listen("127.0.0.1:0", &handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::shared_ptr<Transport> staying_transport = NewUcxTransport({});
  auto staying =
      staying_transport->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(staying.ok()) << staying.status();
  ASSERT_OK(CallAndWait(**staying, MakeRequest(kEcho, "first")));
  for (int i = 0; i < 6; ++i) {  // the first worker is replaced after the second
    std::shared_ptr<Transport> client = NewUcxTransport({});
    auto connection = client->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(connection.ok()) << connection.status();
    ASSERT_TRUE(CallAndWait(**connection, MakeRequest(kEcho, "hello")).ok()) << i;
    (*connection)->Shutdown();
  }
  absl::Status waited =
      CallAndWait(**staying, MakeRequest(kNeverReply, "", absl::Milliseconds(2500))).status();
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  absl::StatusOr<Response> later = CallAndWait(**staying, MakeRequest(kEcho, "still here"));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->header, "still here");
  (*staying)->Shutdown();
  (*listener)->Shutdown();
}

// A UCX-over-TCP listener and connection (declared in the order they must end in).
struct OverTcp {
  TestHandler handler;
  std::shared_ptr<Transport> ucx = testing::NewTestTransport("ucx-tcp");
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> connection;
};

// Over TCP, a UCX server sends the replies that its handler gives at once (inside UCX's message
// callback) once UCX's round of progress is over: a send that fails at once (a worker killed,
// its socket reset) closed UCX 1.13's TCP endpoint while that round still held an event for
// it, and UCX aborted the server (TrainingTest's KilledWorker test, now and then). Over shared
// memory replies go at once.
TEST(UcxListenerTest, RepliesOverTcpAreNotSentFromInsideUcxCallbacks) {
  OverTcp tcp;
  ASSERT_OK(ListenAndConnect(*tcp.ucx, &tcp.handler, &tcp.listener, &tcp.connection));
  const uint64_t before = ucx_internal::SendsInsideProgressForTesting();
  for (int i = 0; i < 20; ++i) {
    Request request = MakeRequest(kEcho, "inline");
    const std::vector<uint8_t> bytes(i * 1000, 7);
    request.payload = Payload::Copy(bytes);
    ASSERT_TRUE(CallAndWait(*tcp.connection, std::move(request), tcp.ucx.get()).ok()) << i;
  }
  EXPECT_EQ(ucx_internal::SendsInsideProgressForTesting(), before);
  tcp.connection->Shutdown();
  tcp.listener->Shutdown();
}

// The same for a client's requests over TCP: calls that response callbacks start (a chain, one
// call after the other), large requests that the send window lets go when an earlier one
// completes, and a shutdown from a callback send nothing from inside UCX's callbacks.
TEST(UcxTransportTest, RequestsOverTcpAreNotSentFromInsideUcxCallbacks) {
  OverTcp tcp;
  ASSERT_OK(ListenAndConnect(*tcp.ucx, &tcp.handler, &tcp.listener, &tcp.connection));
  const uint64_t before = ucx_internal::SendsInsideProgressForTesting();

  // Four 1 MiB requests at once: the window holds some back until others complete.
  const std::vector<uint8_t> large(1 << 20, 3);
  absl::Mutex mu;
  int answered = 0;
  absl::Status failure;
  for (int i = 0; i < 4; ++i) {
    Request request = MakeRequest(kEcho, "large");
    request.payload = Payload::Copy(large);
    tcp.connection->Call(std::move(request), [&](absl::StatusOr<Response> response) {
      absl::MutexLock lock(&mu);
      if (!response.ok()) failure = response.status();
      ++answered;
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all_answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == 4; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_answered), absl::Seconds(20)));
    ASSERT_TRUE(failure.ok()) << failure;
  }

  // A chain of 20 calls, each started by the previous one's callback; the last shuts down.
  struct Chain {
    Connection* connection;
    int left = 20;
    absl::Status failure;
    absl::Notification over;
    void Next() {
      Request request = MakeRequest(kEcho, "chained");
      request.payload = Payload::Copy(std::vector<uint8_t>(left * 1000, 5));
      connection->Call(std::move(request), [this](absl::StatusOr<Response> response) {
        if (!response.ok()) failure = response.status();
        if (--left > 0 && failure.ok()) return Next();
        connection->Shutdown();
        over.Notify();
      });
    }
  };
  Chain chain{tcp.connection.get()};
  chain.Next();
  ASSERT_TRUE(chain.over.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(chain.failure.ok()) << chain.failure;
  EXPECT_EQ(chain.left, 0);
  EXPECT_EQ(ucx_internal::SendsInsideProgressForTesting(), before);
  tcp.listener->Shutdown();
}

// A client worker that UCX cannot create (here: a transport name UCX does not know) fails the
// connection, and leaves nothing behind that a later Drive() would touch.
TEST(UcxTransportTest, AFailedClientWorkerLeavesNoHoleForDrive) {
  UcxOptions options;
  options.tls = "no_such_ucx_transport";
  std::shared_ptr<Transport> ucx = NewUcxTransport(options);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto connection = ucx->Connect("127.0.0.1:1", absl::Now() + absl::Seconds(5));
    ASSERT_FALSE(connection.ok());
    EXPECT_FALSE(ucx->Drive([] { return false; }));
  }
}

// Calls that end at their deadline without a reply take their response sinks with them.
TEST(UcxTransportTest, CallsThatExpireLeaveNoResponseSinkBehind) {
  TestHandler handler;
  std::shared_ptr<Transport> ucx = testing::NewTestTransport("ucx");
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> connection;
  ASSERT_OK(ListenAndConnect(*ucx, &handler, &listener, &connection));
  auto* ucx_connection = dynamic_cast<ucx_internal::UcxConnection*>(connection.get());
  ASSERT_NE(ucx_connection, nullptr);
  std::vector<uint8_t> memory(4096);
  for (int i = 0; i < 20; ++i) {
    Request request = MakeRequest(kNeverReply, "", absl::Milliseconds(50));
    request.response_sink.emplace_back(memory.data(), memory.size());
    absl::Status status = CallAndWait(*connection, std::move(request)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (ucx_connection->HeldSinksForTesting() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ucx_connection->HeldSinksForTesting(), 0u);
  connection->Shutdown();
  listener->Shutdown();
}

// A client that leaves says goodbye over UCX as its bootstrap connection (gRPC) ends, and the
// server may see the end of that connection first and drop the peer: the goodbye that comes
// after is no news, and is not warned about (it was, at the end of some embedded ps-bench runs).
// Any other request from an unknown peer still is. The client here is made by hand, so that
// its goodbye goes after the server has dropped it.
TEST(UcxListenerTest, AGoodbyeFromAPeerAlreadyDroppedIsNotWarnedAbout) {
  using ucx_internal::kGoodbyeMethod;
  using ucx_internal::kRequestAm;
  using ucx_internal::kResponseAm;
  using ucx_internal::UcxFrame;
  using ucx_internal::UcxWorker;
  TestHandler handler;
  std::shared_ptr<Transport> ucx = testing::NewTestTransport("ucx");
  auto listener = ucx->Listen("127.0.0.1:0", &handler);
  ASSERT_OK(listener);
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create({}, "test-client");
  ASSERT_OK(worker);
  UcxWorker& client = **worker;
  auto said_goodbye = std::make_shared<TimedNotification>();
  ASSERT_TRUE(RunOn(client, [&client, said_goodbye] {
    client.SetAmHandler(kResponseAm, [said_goodbye](const void* header, size_t header_length, void*,
                                                    size_t, const ucp_am_recv_param_t*) {
      absl::StatusOr<UcxFrame> frame = ucx_internal::DecodeUcxFrame(header, header_length);
      if (frame.ok() && frame->method == kGoodbyeMethod) said_goodbye->Notify();
      return UCS_OK;
    });
  }));
  std::shared_ptr<Transport> grpc = NewGrpcTransport({});
  auto bootstrap = grpc->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
  ASSERT_OK(bootstrap);
  hetps::v1::UcxBootstrapRequest hello;
  hello.set_worker_address(client.address());
  hello.set_connection_id(1);
  hello.set_frame_version(ucx_internal::kUcxFrameVersion);
  hello.set_machine(ucx_internal::MachineAndNamespaces());
  hello.set_maps_memory(true);
  Request request;
  request.method = ucx_internal::kBootstrapMethod;
  request.header = hello.SerializeAsString();
  request.deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<Response> answer = CallAndWait(**bootstrap, std::move(request));
  ASSERT_OK(answer);
  hetps::v1::UcxBootstrapResponse server;
  ASSERT_TRUE(server.ParseFromString(answer->header));
  ucp_ep_h ep = nullptr;
  ASSERT_TRUE(RunOn(client, [&] {
    absl::StatusOr<ucp_ep_h> created =
        ucx_internal::CreateEndpoint(client, server.worker_address(), [](ucs_status_t) {});
    if (created.ok()) ep = *created;
  }));
  ASSERT_NE(ep, nullptr);

  // The bootstrap connection ends: the server drops the peer, saying goodbye.
  (*bootstrap)->Shutdown();
  ASSERT_TRUE(said_goodbye->WaitForNotificationWithTimeout(absl::Seconds(10)));

  testing::CapturedStderr logged;
  ASSERT_TRUE(logged.active());
  ASSERT_TRUE(RunOn(client, [&] {
    UcxFrame frame;
    frame.connection_id = server.connection_id();
    frame.method = kGoodbyeMethod;
    ucx_internal::SendFrame(client, ep, kRequestAm, frame, Payload(), /*eager=*/false,
                            [](ucs_status_t) {});
    frame.method = kEcho;  // after the goodbye on the same endpoint: it arrives after it
    ucx_internal::SendFrame(client, ep, kRequestAm, frame, Payload(), /*eager=*/false,
                            [](ucs_status_t) {});
  }));
  const std::string warning = "dropping a request: from an unknown peer";
  auto warnings = [&] {
    const std::string text = logged.Text();
    size_t count = 0;
    for (size_t at = text.find(warning); at != std::string::npos; at = text.find(warning, at + 1)) {
      ++count;
    }
    return count;
  };
  EXPECT_TRUE(testing::AwaitCondition([&] { return warnings() >= 1; }, absl::Seconds(10)));
  EXPECT_EQ(warnings(), 1u) << logged.Text();

  EXPECT_TRUE(
      RunOn(client, [&] { ucx_internal::CloseEndpoint(client, ep, ucx_internal::kCloseWait); }));
  client.Stop();
  (*listener)->Shutdown();
}

// A server and a client on transports of their own, and one connection between them.
struct ServerAndClient {
  ServerAndClient(const UcxOptions& server_options, const UcxOptions& client_options)
      : server(NewUcxTransport(server_options)), client(NewUcxTransport(client_options)) {
    listener = server->Listen("127.0.0.1:0", &handler);
    if (listener.ok()) {
      connection = client->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
    }
  }
  ~ServerAndClient() {
    if (connection.ok()) (*connection)->Shutdown();
    if (listener.ok()) (*listener)->Shutdown();
  }
  // Calls, waiting and driving the client's transport as workers do; how long it took.
  absl::Duration TimedCall(Request request) {
    const absl::Time start = absl::Now();
    EXPECT_OK(CallAndWait(**connection, std::move(request), client.get()));
    return absl::Now() - start;
  }

  std::shared_ptr<Transport> server;
  std::shared_ptr<Transport> client;
  TestHandler handler;
  absl::StatusOr<std::unique_ptr<Listener>> listener = absl::UnknownError("not listening");
  absl::StatusOr<std::unique_ptr<Connection>> connection = absl::UnknownError("not connected");
};

// A worker and a shard on one CPU (more busy threads than CPUs), sleeping when idle: each
// side's spin only keeps the other from answering, so after a call or two each hands the CPU
// over soon (SpinPacer on each side, DriveWindow on the caller) instead of spinning its window
// out. Under SCHED_FIFO on one CPU a spinning thread keeps the CPU until it yields or blocks,
// so with windows of 300 ms a call takes at least 300 ms where either side spins its window,
// a few hand-overs where neither does.
TEST(UcxTransportTest, AWorkerAndAShardOnOneCpuHandItOverInsteadOfSpinning) {
  testing::OneCpuFifo one_cpu;
  if (!one_cpu.active()) GTEST_SKIP() << one_cpu.reason();
  constexpr absl::Duration kWindow = absl::Milliseconds(300);
  UcxOptions server_options;
  server_options.poll_alone = kWindow;
  server_options.server_poll_before_sleep = 3 * kWindow;
  UcxOptions client_options;
  client_options.poll_before_sleep = kWindow;
  ServerAndClient ends(server_options, client_options);
  ASSERT_OK(ends.listener);
  ASSERT_OK(ends.connection);
  // The first calls spin their windows out: that is what shows a shared CPU. After them, only
  // the caller's probes (one wait in kProbeEvery tries the full window again) may.
  for (int call = 0; call < 2; ++call) ends.TimedCall(MakeRequest(kEcho, "x"));
  constexpr int kCalls = 2 * ucx_internal::DriveWindow::kProbeEvery;
  int handed_over = 0;
  for (int call = 0; call < kCalls; ++call) {
    if (ends.TimedCall(MakeRequest(kEcho, "x")) < kWindow / 2) ++handed_over;
  }
  EXPECT_GE(handed_over, kCalls - 2);
}

// A caller waiting for its call within its window yields its CPU once it has spun for a while
// (sleeping when idle): a shard that waits for that CPU then answers at once. Under SCHED_FIFO
// on one CPU, a caller that spun its 300 ms window out before it blocked would take 300 ms a
// call, the first one included (the shard spins its default 50 us, then yields).
TEST(UcxTransportTest, AWaitingCallerYieldsItsCpuToTheShardItWaitsFor) {
  testing::OneCpuFifo one_cpu;
  if (!one_cpu.active()) GTEST_SKIP() << one_cpu.reason();
  constexpr absl::Duration kWindow = absl::Milliseconds(300);
  UcxOptions client_options;
  client_options.poll_before_sleep = kWindow;
  ServerAndClient ends(UcxOptions(), client_options);
  ASSERT_OK(ends.listener);
  ASSERT_OK(ends.connection);
  for (int call = 0; call < 4; ++call) {
    EXPECT_LT(ends.TimedCall(MakeRequest(kEcho, "x")), kWindow / 2) << call;
  }
}

// A caller that gives up waiting (sleeping when idle, its window over) wakes the client's
// progress thread, which stands by asleep while callers drive, to receive the answer: with a
// nap longer than the calls' deadlines, answers that come 20 ms late would otherwise be lost.
TEST(UcxTransportTest, ACallerThatGivesUpWaitingIsAnsweredThroughTheProgressThread) {
  UcxOptions client_options;
  client_options.standby_nap = absl::Seconds(30);
  ServerAndClient ends(UcxOptions(), client_options);
  ASSERT_OK(ends.listener);
  ASSERT_OK(ends.connection);
  for (int call = 0; call < 3; ++call) {
    EXPECT_LT(ends.TimedCall(MakeRequest(kReplyLater, "x", absl::Seconds(5))), absl::Seconds(2))
        << call;
  }
}

// A call started right after a wait, that nobody waits for yet, leaves at once: the client's
// progress thread stands by while callers drive and runs a posted send only when its nap ends
// (30 s here), so whatever the caller does meanwhile would not overlap the call.
TEST(UcxTransportTest, ACallNobodyWaitsForLeavesWhileTheProgressThreadStandsBy) {
  UcxOptions client_options;
  client_options.poll_before_sleep = absl::Seconds(5);  // the caller drives until answered
  client_options.standby_nap = absl::Seconds(30);
  ServerAndClient ends(UcxOptions(), client_options);
  ASSERT_OK(ends.listener);
  ASSERT_OK(ends.connection);
  // Answered 20 ms later: the progress thread stands by meanwhile, and after.
  ends.TimedCall(MakeRequest(kReplyLater, "x", absl::Seconds(5)));
  (*ends.connection)->Call(MakeRequest(kRecord, "7"), [](absl::StatusOr<Response>) {});
  EXPECT_TRUE(
      testing::AwaitCondition([&] { return !ends.handler.recorded().empty(); }, absl::Seconds(10)));
}

}  // namespace
}  // namespace hetps::transport
#endif  // HETPS_HAVE_UCX
