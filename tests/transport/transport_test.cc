// Behaviour every Transport must have, run once per transport (in-process, gRPC, UCX over shared
// memory, TCP, and shared memory with busy polling, where waiting callers drive the transport).
#include "transport/transport.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/transports.h"
#include "tests/transport/test_handler.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/inproc/inproc_transport.h"

namespace hetps::transport {
namespace {

using test_calls::kDeadline;
using test_calls::kEcho;
using test_calls::kFail;
using test_calls::kNeverReply;
using test_calls::kRecord;
using test_calls::kReplyLater;
using test_calls::MakeRequest;
using test_calls::TestHandler;
using testing::CallAndWait;

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TransportOptions options;
    options.max_message_bytes = 4 << 20;
    address_ = "127.0.0.1:0";
    if (GetParam() == "inproc") {
      transport_ = NewInProcTransport(options);
      address_ = "test:0";
    } else if (GetParam() == "grpc") {
      transport_ = NewGrpcTransport(options);
    } else {
      transport_ = testing::NewTestTransport(GetParam(), options.max_message_bytes);
    }
    auto listener = transport_->Listen(address_, &handler_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    auto connection = transport_->Connect(listener_->address(), absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = *std::move(connection);
  }

  void TearDown() override {
    if (connection_) connection_->Shutdown();
    if (listener_) listener_->Shutdown();
  }

  // One call on connection_, waited for the way the client waits: driving the transport.
  absl::StatusOr<Response> Call(Request request) {
    return CallAndWait(*connection_, std::move(request), transport_.get());
  }

  TestHandler handler_;
  std::shared_ptr<Transport> transport_;
  std::string address_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> connection_;
};

TEST_P(TransportTest, EchoesHeaderAndMultiSegmentPayload) {
  std::vector<float> a(100000), b(12345);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i);
  Request request = MakeRequest(kEcho, "header bytes");
  request.payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(a)));
  request.payload.Append(Payload::Borrow(AsBytes(absl::MakeConstSpan(b))));
  absl::StatusOr<Response> response = Call(std::move(request));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->header, "header bytes");
  ASSERT_EQ(response->payload.size(), (a.size() + b.size()) * sizeof(float));
  std::vector<float> back(a.size() + b.size());
  response->payload.CopyTo(0, AsWritableBytes(absl::MakeSpan(back)));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(back[i], a[i]) << i;
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(back[a.size() + i], b[i]) << i;
}

TEST_P(TransportTest, HandlerErrorReachesTheCallerWithItsCode) {
  absl::StatusOr<Response> response = Call(MakeRequest(kFail, "x"));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(response.status().message(), "handler says no: x");
}

TEST_P(TransportTest, UnansweredCallEndsAtItsDeadline) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Response> response = Call(MakeRequest(kNeverReply, "", absl::Milliseconds(200)));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The connection still works.
  EXPECT_OK(Call(MakeRequest(kEcho, "after")));
}

TEST_P(TransportTest, ServerSeesTheCallersDeadline) {
  absl::StatusOr<Response> response = Call(MakeRequest(kDeadline, "", absl::Seconds(30)));
  ASSERT_TRUE(response.ok()) << response.status();
  const int remaining_ms = std::stoi(response->header);
  EXPECT_GT(remaining_ms, 25000);
  EXPECT_LE(remaining_ms, 30000);
}

// Half the threads drive the transport while they wait (where it can be driven), half block:
// neither kind may leave the other's calls behind.
TEST_P(TransportTest, ManyConcurrentCallsFromSeveralThreads) {
  constexpr int kThreads = 4, kCalls = 200;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<absl::Notification>> done;
      for (int i = 0; i < kCalls; ++i) done.push_back(std::make_unique<absl::Notification>());
      std::vector<absl::StatusOr<Response>> results(kCalls);
      for (int i = 0; i < kCalls; ++i) {
        const uint32_t method = i % 3 == 0 ? kReplyLater : kEcho;
        connection_->Call(MakeRequest(method, std::to_string(t * 100000 + i)),
                          [&, i](absl::StatusOr<Response> r) {
                            results[i] = std::move(r);
                            done[i]->Notify();
                          });
      }
      for (int i = 0; i < kCalls; ++i) {
        if (t % 2 == 0) transport_->Drive([&] { return done[i]->HasBeenNotified(); });
        done[i]->WaitForNotification();
        if (results[i].ok() && results[i]->header == std::to_string(t * 100000 + i)) ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * kCalls);
}

// A caller that drives the transport (UCX with busy polling) completes its own call: the
// response callback runs on its thread, with no hand-off from a transport thread. Elsewhere
// Drive() gives up at once or after a short poll, and the call completes all the same.
TEST_P(TransportTest, AWaitingCallerDrivesItsCallWhereTheTransportCanBeDriven) {
  const bool drivable = GetParam() == "ucx-busy";
  bool completed_here = false;
  // Answered 20 ms later from another thread: the caller is driving by then, unless this
  // thread lost its CPU for that long (a loaded machine), hence a few tries.
  for (int attempt = 0; attempt < 3 && !completed_here; ++attempt) {
    std::atomic<bool> done{false};
    std::thread::id callback_thread;
    absl::StatusOr<Response> result;
    connection_->Call(MakeRequest(kReplyLater, "driven"), [&](absl::StatusOr<Response> r) {
      callback_thread = std::this_thread::get_id();
      result = std::move(r);
      done.store(true);
    });
    const bool drove = transport_->Drive([&done] { return done.load(); });
    if (drivable) {
      EXPECT_TRUE(drove);
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!done.load() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    ASSERT_TRUE(done.load());
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->header, "driven");
    completed_here = callback_thread == std::this_thread::get_id();
    if (!drivable) break;
  }
  if (drivable) {
    EXPECT_TRUE(completed_here);
  }
}

// A caller that calls Progress() after each call and while its calls are in flight (as a client
// does while it converts its next message) gets every response once and right, payloads above
// the rendezvous threshold included, on every transport; Progress() never waits, not even with
// nothing in flight.
TEST_P(TransportTest, ProgressBetweenCallsNeverWaitsAndLosesNothing) {
  transport_->Progress();
  constexpr int kCalls = 48;
  const size_t sizes[] = {0, 4096, 3 * testing::kTestRendezvousThreshold, 1 << 20};
  std::vector<std::vector<uint8_t>> sent(kCalls);
  std::vector<absl::StatusOr<Response>> results(kCalls);
  std::vector<std::unique_ptr<absl::Notification>> done;
  std::atomic<int> callbacks{0};
  for (int i = 0; i < kCalls; ++i) {
    done.push_back(std::make_unique<absl::Notification>());
    sent[i].resize(sizes[i % 4]);
    for (size_t k = 0; k < sent[i].size(); ++k) sent[i][k] = static_cast<uint8_t>(k * 13 + i);
    Request request = MakeRequest(i % 5 == 0 ? kReplyLater : kEcho, std::to_string(i));
    request.payload = Payload::Borrow(sent[i]);
    connection_->Call(std::move(request), [&, i](absl::StatusOr<Response> response) {
      results[i] = std::move(response);
      callbacks.fetch_add(1);
      done[i]->Notify();
    });
    transport_->Progress();
  }
  // Progress() alone until every call is answered: it returns each time, whoever completes them.
  EXPECT_TRUE(testing::AwaitCondition(
      [&] {
        transport_->Progress();
        return callbacks.load() == kCalls;
      },
      absl::Seconds(30), absl::ZeroDuration()));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(done[i]->WaitForNotificationWithTimeout(absl::Seconds(10))) << i;
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->header, std::to_string(i));
    if (i % 5 != 0) {
      EXPECT_EQ(results[i]->payload.ToString(), std::string(sent[i].begin(), sent[i].end())) << i;
    }
  }
  transport_->Progress();
  EXPECT_EQ(callbacks.load(), kCalls);
  // Nobody is left driving: the transport's own threads complete a call nobody drives.
  absl::Notification answered;
  absl::StatusOr<Response> after;
  connection_->Call(MakeRequest(kEcho, "after"), [&](absl::StatusOr<Response> response) {
    after = std::move(response);
    answered.Notify();
  });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "a call nobody drives was not answered after Progress()";
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->header, "after");
}

// Shutting a connection down ends a call whose caller is driving the transport, and the
// driving caller returns; the transport serves new connections afterwards.
TEST_P(TransportTest, ShutdownEndsACallWhileItsCallerDrives) {
  absl::Notification done;
  absl::Status status;
  connection_->Call(MakeRequest(kNeverReply, "", absl::Seconds(20)),
                    [&](absl::StatusOr<Response> r) {
                      status = r.status();
                      done.Notify();
                    });
  std::thread stopper([this] {
    absl::SleepFor(absl::Milliseconds(50));
    connection_->Shutdown();
  });
  transport_->Drive([&done] { return done.HasBeenNotified(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  stopper.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  auto again = transport_->Connect(listener_->address(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_OK(CallAndWait(**again, MakeRequest(kEcho, "again"), transport_.get()));
  (*again)->Shutdown();
}

TEST_P(TransportTest, RequestsOfOneConnectionReachTheHandlerInOrder) {
  constexpr int kCalls = 2000;
  std::vector<std::unique_ptr<absl::Notification>> done;
  for (int i = 0; i < kCalls; ++i) done.push_back(std::make_unique<absl::Notification>());
  for (int i = 0; i < kCalls; ++i) {
    connection_->Call(MakeRequest(kRecord, std::to_string(i)),
                      [&done, i](absl::StatusOr<Response>) { done[i]->Notify(); });
  }
  for (auto& d : done) d->WaitForNotification();
  std::vector<int> recorded = handler_.recorded();
  ASSERT_EQ(recorded.size(), static_cast<size_t>(kCalls));
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(recorded[i], i);
}

// Payloads of every size around the eager/rendezvous switch arrive whole, and a transport that
// can (UCX) receives a response straight into the caller's sink.
TEST_P(TransportTest, PayloadsAroundTheRendezvousThresholdArriveWhole) {
  const size_t t = testing::kTestRendezvousThreshold;
  for (size_t size : {1ul, 4095ul, t - 1, t, t + 1, 2 * t, 65535ul, 65536ul, 65537ul, 262144ul,
                      1048573ul, 3ul << 20}) {
    std::vector<uint8_t> out(size), back(size + 16, 0xee);
    for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(i * 31 + size);
    Request request = MakeRequest(kEcho, "sized");
    request.payload = Payload::Borrow(out);
    // The sink in two pieces, with a gap between them, to see each lands where it should.
    request.response_sink = {absl::MakeSpan(back.data(), size / 2),
                             absl::MakeSpan(back.data() + size / 2 + 16, size - size / 2)};
    absl::StatusOr<Response> response = Call(std::move(request));
    ASSERT_TRUE(response.ok()) << size << ": " << response.status();
    ASSERT_EQ(response->payload.ToString(),
              std::string(reinterpret_cast<const char*>(out.data()), size))
        << size;
    if (GetParam().rfind("ucx", 0) == 0 && size >= 2) {
      ASSERT_EQ(response->payload.segments().size(), 2u) << size;
      EXPECT_EQ(response->payload.segments()[0].data(), back.data()) << size;
      EXPECT_EQ(response->payload.segments()[1].data(), back.data() + size / 2 + 16) << size;
      for (size_t i = size / 2; i < size / 2 + 16; ++i) ASSERT_EQ(back[i], 0xee) << size;
    }
  }
}

// Large responses to calls from several threads at once, each into a sink of many pieces: every
// byte lands in its own caller's piece (a transport must keep the pieces' list alive until the
// bytes are in).
TEST_P(TransportTest, ConcurrentLargeResponsesLandInTheirCallersSinks) {
  constexpr int kThreads = 4, kCalls = 16, kPieces = 8;
  constexpr size_t kSize = 768 << 10;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        std::vector<uint8_t> out(kSize), back(kSize, 0);
        for (size_t k = 0; k < kSize; ++k) out[k] = static_cast<uint8_t>(k * 7 + t * 13 + i);
        Request request = MakeRequest(kEcho, "sink");
        request.payload = Payload::Borrow(out);
        const size_t piece = kSize / kPieces;
        for (int p = 0; p < kPieces; ++p) {
          request.response_sink.push_back(absl::MakeSpan(back.data() + p * piece, piece));
        }
        absl::StatusOr<Response> response = Call(std::move(request));
        if (response.ok() && response->payload.ToString() == std::string(out.begin(), out.end())) {
          ++good;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * kCalls);
}

// Set by the test thread around Connection::Call: a callback that sees it set ran inside Call.
thread_local bool inside_call = false;

// The callback rule of transport.h: a call's callback never runs inside the Call that started
// it, for an immediate reply, an error found at once, or a call on a shut-down connection.
TEST_P(TransportTest, CallbacksNeverRunInsideCall) {
  auto call = [&](Connection& connection, Request request) {
    auto done = std::make_shared<absl::Notification>();
    auto ran_inside = std::make_shared<std::atomic<bool>>(false);
    auto result = std::make_shared<absl::StatusOr<Response>>();
    inside_call = true;
    connection.Call(std::move(request), [=](absl::StatusOr<Response> response) {
      ran_inside->store(inside_call);
      *result = std::move(response);
      done->Notify();
    });
    inside_call = false;
    transport_->Drive([&] { return done->HasBeenNotified(); });
    EXPECT_TRUE(done->WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_FALSE(ran_inside->load());
    return done->HasBeenNotified() ? *result : absl::DeadlineExceededError("no callback");
  };
  EXPECT_OK(call(*connection_, MakeRequest(kEcho, "x")));
  std::vector<uint8_t> big(5 << 20, 7);
  Request oversized = MakeRequest(kEcho, "");
  oversized.payload = Payload::Borrow(big);
  EXPECT_EQ(call(*connection_, std::move(oversized)).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto closed = transport_->Connect(listener_->address(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(closed.ok()) << closed.status();
  (*closed)->Shutdown();
  EXPECT_EQ(call(**closed, MakeRequest(kEcho, "x")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(TransportTest, OversizedRequestIsRefusedAndTheConnectionLives) {
  std::vector<uint8_t> big(5 << 20, 7);
  Request request = MakeRequest(kEcho, "");
  request.payload = Payload::Borrow(big);
  absl::StatusOr<Response> response = Call(std::move(request));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_OK(Call(MakeRequest(kEcho, "still here")));
}

TEST_P(TransportTest, ShutdownCancelsOutstandingCallsAndRefusesNewOnes) {
  absl::Notification done;
  absl::Status status;
  connection_->Call(MakeRequest(kNeverReply, ""), [&](absl::StatusOr<Response> r) {
    status = r.status();
    done.Notify();
  });
  connection_->Shutdown();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Call(MakeRequest(kEcho, "")).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(TransportTest, CallsToAStoppedListenerFailUnavailable) {
  listener_->Shutdown();
  absl::StatusOr<Response> response = Call(MakeRequest(kEcho, "", absl::Seconds(5)));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable) << response.status();
}

TEST_P(TransportTest, ClientReconnectsToARestartedServer) {
  ASSERT_OK(Call(MakeRequest(kEcho, "before")));
  const std::string address = listener_->address();
  listener_->Shutdown();
  TestHandler restarted;
  auto listener = transport_->Listen(address, &restarted);
  ASSERT_TRUE(listener.ok()) << listener.status();
  // Calls fail (Unavailable) until the connection has found the new server; then they work.
  absl::Status last;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    absl::StatusOr<Response> response = Call(MakeRequest(kEcho, "after", absl::Seconds(2)));
    last = response.status();
    if (response.ok()) {
      EXPECT_EQ(response->header, "after");
      break;
    }
    EXPECT_TRUE(last.code() == absl::StatusCode::kUnavailable ||
                last.code() == absl::StatusCode::kDeadlineExceeded)
        << last;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(last.ok()) << last;
  (*listener)->Shutdown();
}

TEST_P(TransportTest, ConnectingToNothingIsUnavailable) {
  const std::string nowhere = GetParam() == "inproc" ? "nowhere:1" : "127.0.0.1:1";
  auto connection = transport_->Connect(nowhere, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(connection.status().code(), absl::StatusCode::kUnavailable);
}

TEST_P(TransportTest, ListeningTwiceOnOneAddressFails) {
  TestHandler other;
  auto second = transport_->Listen(listener_->address(), &other);
  EXPECT_FALSE(second.ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"},
                                                                          /*with_busy_poll=*/true)),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::transport
