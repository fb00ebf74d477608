// What peers that flood a UCX worker and are killed leave behind. A UCX worker's receive checks
// (UcxWorker, "Receive checks"): a peer killed while it sends over shared memory can leave the
// receive queue stuck, and the worker, a client's or a server's, must start afresh and its
// connections must work again. The peers here are real processes
// (ucx-flood) killed with SIGKILL at moments chosen at random, until one leaves a queue stuck
// (about one kill in ten here; the worker's address then changes).
#ifdef HETPS_HAVE_UCX
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/timer_queue.h"
#include "gtest/gtest.h"
#include "proto/frame.pb.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/transport/run_on_worker.h"
#include "tests/transport/test_handler.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/ucx/ucx_client.h"
#include "transport/ucx/ucx_server.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {
namespace {

using test_calls::kEcho;
using test_calls::MakeRequest;
using test_calls::TestHandler;

// Rounds of kFloods floods each: a round leaves the queue stuck in about one round of 5 to 50 here.
constexpr int kFloods = 3;
constexpr int kMostRounds = 150;
constexpr char kNotStuck[] = "no round of kills left the queue stuck (150 rounds or 30 s)";
// How long a worker may take to notice and start afresh, and its peers to reconnect.
constexpr absl::Duration kRecovery = absl::Seconds(10);

UcxOptions CheckingOften() {
  UcxOptions options;
  options.receive_check_interval = absl::Milliseconds(200);
  return options;
}

// Floods the worker at `address()` from kFloods processes at once, killed at moments chosen at
// random, and checks after each round of kills that `reached()` (bounded by kRecovery)
// succeeds, until the worker has started afresh (its address changed). False when no kill left
// its queue stuck within kMostRounds rounds or 30 s.
bool KillFloodsUntilRenewed(const std::function<std::string()>& address,
                            const std::function<absl::Status()>& reached) {
  std::mt19937 random(std::random_device{}());
  hetps::testing::ScopedTempDir dir;
  // Within the test's minute with room to spare, whatever the machine's load.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  for (int round = 1; round <= kMostRounds && absl::Now() < give_up; ++round) {
    const std::string flooded = address();
    std::vector<std::unique_ptr<hetps::testing::Subprocess>> floods;
    std::vector<std::string> ready;
    for (int i = 0; i < kFloods; ++i) {
      ready.push_back(absl::StrCat(dir.path(), "/ready-", round, "-", i));
      floods.push_back(std::make_unique<hetps::testing::Subprocess>(
          std::vector<std::string>{
              hetps::testing::BinaryPath("tests/ucx-flood"),
              "--address_hex=" + absl::BytesToHexString(flooded),
              absl::StrCat("--ready_after=", std::uniform_int_distribution<int>(20, 3000)(random)),
              "--ready_file=" + ready.back()},
          absl::StrCat(dir.path(), "/flood-", i, ".log")));
      EXPECT_TRUE(floods.back()->started());
    }
    // All flooding before any is killed: a kill that leaves the queue stuck stops the others.
    for (int i = 0; i < kFloods; ++i) {
      const bool flooding =
          hetps::testing::AwaitCondition([&] { return access(ready[i].c_str(), F_OK) == 0; },
                                         absl::Seconds(30), absl::Milliseconds(1));
      EXPECT_TRUE(flooding) << "round " << round << ": "
                            << hetps::testing::ReadFile(
                                   absl::StrCat(dir.path(), "/flood-", i, ".log"));
      if (!flooding) return true;  // failed above
    }
    for (const auto& flood : floods) flood->Signal(SIGKILL);
    for (const auto& flood : floods) flood->Wait(absl::Seconds(10));
    const absl::Status after = reached();
    EXPECT_TRUE(after.ok()) << "after round " << round << ": " << after;
    if (!after.ok()) return true;
    if (address() != flooded) {
      std::printf("the queue was stuck after round %d of kills\n", round);
      return true;
    }
  }
  return false;
}

// A receiving worker checked with `options` that counts requests (kRequestAm), and a sender.
struct Pair {
  absl::Status Start(const UcxOptions& options) {
    absl::StatusOr<std::unique_ptr<UcxWorker>> receiving =
        UcxWorker::Create(options, "test-receiver");
    if (!receiving.ok()) return receiving.status();
    receiver = *std::move(receiving);
    const bool handled = RunOn(*receiver, [this, counter = arrived] {
      receiver->SetAmHandler(
          kRequestAm, [counter](const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
            counter->fetch_add(1);
            return UCS_OK;
          });
    });
    if (!handled) return absl::InternalError("the receiver ran no task");
    absl::StatusOr<std::unique_ptr<UcxWorker>> sending = UcxWorker::Create({}, "test-sender");
    if (!sending.ok()) return sending.status();
    sender = *std::move(sending);
    return absl::OkStatus();
  }

  std::shared_ptr<std::atomic<int>> arrived = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<UcxWorker> receiver;
  std::unique_ptr<UcxWorker> sender;
};

// Checks every 20 ms, across a second of messages from a live sender and a quiet second: none
// may take the queue for stuck.
TEST(UcxReceiveCheckTest, AWorkerThatReceivesOrIsIdleKeepsItsQueue) {
  UcxOptions checking;
  checking.receive_check_interval = absl::Milliseconds(20);
  Pair pair;
  ASSERT_OK(pair.Start(checking));
  UcxWorker& receiver = *pair.receiver;
  UcxWorker& sender = *pair.sender;
  const std::shared_ptr<std::atomic<int>>& arrived = pair.arrived;
  ucp_ep_h ep = nullptr;
  ASSERT_TRUE(RunOn(sender, [&] {
    absl::StatusOr<ucp_ep_h> created =
        CreateEndpoint(sender, receiver.address(), [](ucs_status_t) {});
    if (created.ok()) ep = *created;
  }));
  ASSERT_NE(ep, nullptr);
  const std::vector<uint8_t> bytes(8000, 0x5a);  // as ucx-flood's
  const absl::Time busy_until = absl::Now() + absl::Seconds(1);
  int sent = 0;
  while (absl::Now() < busy_until) {
    ASSERT_TRUE(RunOn(sender, [&] {
      for (int i = 0; i < 16; ++i) {
        SendFrame(sender, ep, kRequestAm, UcxFrame(),
                  Payload::Borrow(ByteSpan(bytes.data(), bytes.size())), false,
                  [](ucs_status_t) {});
      }
    }));
    sent += 16;
  }
  ASSERT_TRUE(
      hetps::testing::AwaitCondition([&] { return arrived->load() == sent; }, absl::Seconds(30)));
  EXPECT_FALSE(
      hetps::testing::AwaitCondition([&] { return receiver.renewals() > 0; }, absl::Seconds(1)));
  RunOn(sender, [&] { CloseEndpoint(sender, ep, kCloseWait); });
}

TEST(UcxReceiveCheckTest, AWorkerWhoseQueueAKilledSenderLeftStuckStartsAfresh) {
  Pair pair;
  ASSERT_OK(pair.Start(CheckingOften()));
  UcxWorker& receiver = *pair.receiver;
  UcxWorker& sender = *pair.sender;
  const std::shared_ptr<std::atomic<int>>& arrived = pair.arrived;
  // A message from a live sender, to the worker's address of the moment, until one arrives.
  auto reached = [&]() -> absl::Status {
    const absl::Time deadline = absl::Now() + kRecovery;
    while (absl::Now() < deadline) {
      const int before = arrived->load();
      const std::string address = receiver.address();
      const bool sent = RunOn(sender, [&sender, address] {
        absl::StatusOr<ucp_ep_h> ep = CreateEndpoint(sender, address, [](ucs_status_t) {});
        if (!ep.ok()) return;
        SendFrame(sender, *ep, kRequestAm, UcxFrame(), Payload(), false, [](ucs_status_t) {});
        CloseEndpoint(sender, *ep);
      });
      if (!sent) return absl::InternalError("the sender's worker did not run the send");
      if (hetps::testing::AwaitCondition([&] { return arrived->load() > before; },
                                         absl::Seconds(1))) {
        return absl::OkStatus();
      }
    }
    return absl::DeadlineExceededError("nothing reached the worker");
  };
  ASSERT_OK(reached());
  const std::string first = receiver.address();
  if (!KillFloodsUntilRenewed([&] { return receiver.address(); }, reached)) {
    GTEST_SKIP() << kNotStuck;
  }
  EXPECT_NE(receiver.address(), first);
  EXPECT_EQ(receiver.renewals(), 1);
}

// Echo calls on `connection` (each given a second, those that fail sent again) until one is
// answered, for kRecovery at most.
absl::Status EchoAnswered(Connection& connection) {
  const absl::Time deadline = absl::Now() + kRecovery;
  absl::Status last;
  while (absl::Now() < deadline) {
    absl::StatusOr<Response> echo =
        hetps::testing::CallAndWait(connection, MakeRequest(kEcho, "still", absl::Seconds(1)));
    if (echo.ok()) return absl::OkStatus();
    last = echo.status();
  }
  return absl::DeadlineExceededError(absl::StrCat("no echo: ", last.message()));
}

// A client's worker stuck: its connections fail (Unavailable) and bootstrap again.
TEST(UcxReceiveCheckTest, AClientWorkerStartsAfreshAndItsConnectionsCarryOn) {
  TestHandler handler;
  std::shared_ptr<Transport> server = NewUcxTransport({});
  absl::StatusOr<std::unique_ptr<Listener>> listener = server->Listen("127.0.0.1:0", &handler);
  ASSERT_OK(listener);
  std::shared_ptr<Transport> grpc = NewGrpcTransport({});
  TimerQueue timers;
  absl::StatusOr<std::unique_ptr<ClientWorker>> client = ClientWorker::Create(CheckingOften());
  ASSERT_OK(client);
  absl::StatusOr<std::unique_ptr<UcxConnection>> connection =
      UcxConnection::Connect((*listener)->address(), absl::Now() + absl::Seconds(10), {},
                             client->get(), grpc, &timers, CheckingOften());
  ASSERT_OK(connection);
  ASSERT_OK(EchoAnswered(**connection));
  UcxWorker& worker = *(*client)->worker;
  if (!KillFloodsUntilRenewed([&] { return worker.address(); },
                              [&] { return EchoAnswered(**connection); })) {
    GTEST_SKIP() << kNotStuck;
  }
  EXPECT_EQ(worker.renewals(), 1);
  ASSERT_OK(EchoAnswered(**connection));
  (*connection)->Shutdown();
  (*listener)->Shutdown();
}

// The address of the UCX worker that takes bootstraps at `listener`, asked as a client's probe.
std::string ServingAddress(Transport& grpc, const std::string& listener) {
  absl::StatusOr<std::unique_ptr<Connection>> connection =
      grpc.Connect(listener, absl::Now() + absl::Seconds(10));
  if (!connection.ok()) return "";
  hetps::v1::UcxBootstrapRequest probe;
  probe.set_address_only(true);
  Request request = MakeRequest(kBootstrapMethod, probe.SerializeAsString());
  absl::StatusOr<Response> answer = hetps::testing::CallAndWait(**connection, std::move(request));
  hetps::v1::UcxBootstrapResponse response;
  if (!answer.ok() || !response.ParseFromString(answer->header)) return "";
  return response.worker_address();
}

// A server's worker stuck: its clients are told goodbye and bootstrap to the new worker.
TEST(UcxReceiveCheckTest, AServerWorkerStartsAfreshAndItsClientsReconnect) {
  TestHandler handler;
  std::shared_ptr<Transport> server = NewUcxTransport(CheckingOften());
  absl::StatusOr<std::unique_ptr<Listener>> listener = server->Listen("127.0.0.1:0", &handler);
  ASSERT_OK(listener);
  std::shared_ptr<Transport> client = NewUcxTransport({});
  absl::StatusOr<std::unique_ptr<Connection>> connection =
      client->Connect((*listener)->address(), absl::Now() + absl::Seconds(10));
  ASSERT_OK(connection);
  ASSERT_OK(EchoAnswered(**connection));
  std::shared_ptr<Transport> grpc = NewGrpcTransport({});
  const std::string first = ServingAddress(*grpc, (*listener)->address());
  ASSERT_FALSE(first.empty());
  if (!KillFloodsUntilRenewed([&] { return ServingAddress(*grpc, (*listener)->address()); },
                              [&] { return EchoAnswered(**connection); })) {
    GTEST_SKIP() << kNotStuck;
  }
  ASSERT_OK(EchoAnswered(**connection));
  (*connection)->Shutdown();
  (*listener)->Shutdown();
}

// UCX 1.13 calls a null handler for an active-message id below the highest one registered: a
// peer's message of an id the worker does not serve crashed the process. It is dropped.
TEST(UcxReceiveCheckTest, MessagesOfIdsTheWorkerDoesNotServeAreDropped) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create({}, "test-receiver");
  ASSERT_OK(worker);
  hetps::testing::ScopedTempDir dir;
  const std::string ready = dir.path() + "/ready";
  hetps::testing::Subprocess flood(
      {hetps::testing::BinaryPath("tests/ucx-flood"),
       "--address_hex=" + absl::BytesToHexString((*worker)->address()),
       absl::StrCat("--am_id=", kRequestAm), "--ready_after=1000", "--ready_file=" + ready},
      dir.path() + "/flood.log");
  EXPECT_TRUE(hetps::testing::AwaitCondition([&] { return access(ready.c_str(), F_OK) == 0; },
                                             absl::Seconds(30)));
  flood.Signal(SIGKILL);
  flood.Wait(absl::Seconds(10));
  // Still here, and the worker still runs tasks.
  EXPECT_TRUE(RunOn(**worker, [] {}));
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
