// The worker client against shards started in this process: bad calls, shutdown, connecting,
// barriers, deadlines, the shards' memory cap and injected faults.
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/half.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "worker/client.h"

namespace hetps {
namespace {

using testing::Spec;
using testing::TestCluster;

class ClientControlTest : public testing::ClientClusterTest {};

TEST_P(ClientControlTest, BadCallsGetSpecificErrors) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 100));
  ASSERT_OK(id);
  EXPECT_EQ(client->Declare(Spec("w", 200)).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(client->Declare(Spec("w", 100, 0.5)).status().code(), absl::StatusCode::kAlreadyExists);
  std::vector<float> three(3);
  EXPECT_EQ(client->Declare(Spec("x", 4), three).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Declare(Spec("", 4)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Declare(Spec("z", 0)).status().code(), absl::StatusCode::kInvalidArgument);
  TensorSpec bad_optimizer = Spec("y", 4);
  bad_optimizer.optimizer = {"sgd", {{"lr", -1}}};
  EXPECT_EQ(client->Declare(bad_optimizer).status().code(), absl::StatusCode::kInvalidArgument);
  bad_optimizer.optimizer = {"unknown", {}};
  EXPECT_EQ(client->Declare(bad_optimizer).status().code(), absl::StatusCode::kInvalidArgument);

  std::vector<float> g(100), w(100);
  EXPECT_EQ(client->Push(12345, g, 0).Wait().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->Push(*id, three, 0).Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Pull(*id, absl::MakeSpan(three)).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  auto other = client->Declare(Spec("other", 100));
  ASSERT_OK(other);
  const PushItem push[] = {{*id, g}};
  const PullItem pull[] = {{*other, absl::MakeSpan(w)}};
  EXPECT_EQ(client->PushPull(push, pull, 0).Wait().code(), absl::StatusCode::kInvalidArgument);
  // Nothing above changed the tensor.
  ASSERT_OK(client->Pull(*id, absl::MakeSpan(w)).Wait());
  EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](float v) { return v == 0; }));
  EXPECT_EQ(cluster_->shard(0).Stats().max_version(), 0u);
}

TEST_P(ClientControlTest, CallsAfterShutdownFail) {
  StartCluster(1, 1);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 10));
  ASSERT_OK(id);
  client->Shutdown();
  client->Shutdown();  // idempotent
  std::vector<float> v(10);
  bool called = false;
  EXPECT_EQ(client->Push(*id, v, 0, [&](const absl::Status& s) { called = !s.ok(); }).Wait().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(called);
  EXPECT_EQ(client->Pull(*id, absl::MakeSpan(v)).Wait().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->Declare(Spec("v", 3)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->Barrier().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->Stats().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(ClientControlTest, ShutdownEndsOutstandingOperations) {
  StartCluster(1, 2);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 10));
  ASSERT_OK(id);
  std::vector<float> w(10);
  Operation waiting = client->Pull(*id, absl::MakeSpan(w), 5);  // never reached
  client->Shutdown();
  EXPECT_EQ(waiting.Wait().code(), absl::StatusCode::kCancelled);
}

TEST_P(ClientControlTest, CreateRefusesInconsistentSettings) {
  StartCluster(2, 2);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.world_size = 3;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kFailedPrecondition);
  options = cluster_->ClientOptionsFor(0);
  std::swap(options.servers[0], options.servers[1]);
  absl::Status swapped = Client::Create(options).status();
  EXPECT_EQ(swapped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(swapped.message().find("order"), absl::string_view::npos) << swapped;
  options = cluster_->ClientOptionsFor(0);
  options.job_id = "another-job";
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kFailedPrecondition);
  options = cluster_->ClientOptionsFor(2);
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = cluster_->ClientOptionsFor(0);
  options.partition_bytes = 1000;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = cluster_->ClientOptionsFor(0);
  options.servers.clear();
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = cluster_->ClientOptionsFor(0);
  options.transport = "carrier-pigeon";
  options.transport_instance = nullptr;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ClientControlTest, UnreachableShardFailsWithinTheConnectTimeout) {
  StartCluster(1, 1);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.servers = {GetParam() == "inproc" ? "nowhere:1" : "127.0.0.1:1"};
  options.connect_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::Status status = Client::Create(options).status();
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded)
      << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Set around Push by the test thread: a callback that sees it set ran inside Push.
thread_local bool inside_push = false;

// worker/client.h: a DoneCallback never runs inside the Push that started the operation, even
// when it fails at once, so a caller may hold a lock there that its callback takes.
TEST_P(ClientControlTest, CallbacksNeverRunInsidePush) {
  StartCluster(1, 1);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 64, 0.1, SyncMode::kAsp));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g(64, 1.0f), three(3);
  auto push = [&](TensorId tensor, absl::Span<const float> gradient) {
    absl::Mutex held;  // taken around Push, and by the callback: inside Push it would deadlock
    std::atomic<bool> ran_inside{false};
    absl::Status outcome;
    Operation operation(nullptr);
    {
      absl::MutexLock lock(&held);
      inside_push = true;
      operation = client->Push(tensor, gradient, 0, [&](const absl::Status& status) {
        ran_inside.store(inside_push);
        absl::MutexLock callback_lock(&held);
        outcome = status;
      });
      inside_push = false;
    }
    const absl::Status waited = operation.Wait();
    EXPECT_FALSE(ran_inside.load());
    absl::MutexLock lock(&held);
    EXPECT_EQ(outcome, waited);
    return waited;
  };
  EXPECT_OK(push(*id, g));
  EXPECT_EQ(push(12345, g).code(), absl::StatusCode::kNotFound);           // fails at once
  EXPECT_EQ(push(*id, three).code(), absl::StatusCode::kInvalidArgument);  // fails at once
  client->Shutdown();
  EXPECT_EQ(push(*id, g).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(ClientControlTest, BarrierReleasesEveryoneOnlyWhenAllArrived) {
  StartCluster(2, 3);
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t r = 0; r < 3; ++r) clients.push_back(NewClient(r));
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      for (int round = 0; round < 3; ++round) {
        absl::SleepFor(absl::Milliseconds(10 * r));
        arrived.fetch_add(1);
        ASSERT_OK(clients[r]->Barrier());
        if (arrived.load() < 3 * (round + 1)) early.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(early.load(), 0);
}

// A worker that starts again (a new client of the same rank) joins the job's next barrier; it is
// neither let through by barriers that completed before it came nor made to wait for ones that
// will never come.
TEST_P(ClientControlTest, RestartedWorkerJoinsTheNextBarrier) {
  StartCluster(1, 2);
  std::unique_ptr<Client> first = NewClient(0);
  std::unique_ptr<Client> second = NewClient(1);
  for (int round = 0; round < 2; ++round) {
    std::thread other([&] { EXPECT_OK(second->Barrier()); });
    EXPECT_OK(first->Barrier());
    other.join();
  }
  second->Shutdown();
  second = NewClient(1);  // worker 1 again, after a crash
  absl::Notification passed;
  std::thread restarted([&] {
    EXPECT_OK(second->Barrier());
    passed.Notify();
  });
  EXPECT_FALSE(passed.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "the restarted worker passed a barrier worker 0 has not reached";
  EXPECT_OK(first->Barrier());  // the third barrier for worker 0
  EXPECT_TRUE(passed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  restarted.join();
}

// The shard answers just before the caller's deadline, naming the worker that never came.
TEST_P(ClientControlTest, BarrierWithAMissingWorkerEndsAtTheDeadlineNamingIt) {
  StartCluster(1, 3);
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ClientOptions options = cluster_->ClientOptionsFor(rank);
    options.call_timeout = absl::Seconds(1);
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }
  std::thread other([&] { EXPECT_FALSE(clients[1]->Barrier().ok()); });
  const absl::Status status = clients[0]->Barrier();
  other.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // Worker 1 may have given up a moment before: then both are named.
  EXPECT_TRUE(absl::StrContains(status.message(), "2, which did not arrive")) << status;
}

// A job of two where only rank 0 runs: the push-pull's error says that worker 1 is missing
// (before the client's own deadline, not "no response" after it).
TEST_P(ClientControlTest, APullWaitingForAMissingWorkerNamesIt) {
  StartCluster(1, 2);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.call_timeout = absl::Seconds(1);
  auto client = Client::Create(options);
  ASSERT_OK(client);
  auto id = (*client)->Declare(Spec("w", 64));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g(64, 1.0f), w(64);
  const absl::Status status = (*client)->PushPull(*id, g, absl::MakeSpan(w), 0).Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "step 0 waits for worker(s) 1 ")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "tensor 'w'")) << status;
}

// In BSP a push-pull waits for every worker's push; the shard gives up after its max_wait and
// says why, long before the client's own deadline.
TEST_P(ClientControlTest, APullWaitingForAMissingWorkerEndsAtTheShardsMaxWait) {
  server::ServerOptions base;
  base.max_wait = absl::Milliseconds(200);
  StartCluster(1, 2, base);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 64));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g(64, 1.0f), w(64);
  const absl::Time start = absl::Now();
  const absl::Status status = client->PushPull(*id, g, absl::MakeSpan(w), 0).Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "is a worker missing")) << status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // the client's deadline is 20 s
}

// With every request delivered twice, shards recognise the copies: BSP results stay exact.
INSTANTIATE_TEST_SUITE_P(Transports, ClientControlTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"},
                                                                          /*with_busy_poll=*/true)),
                         [](const auto& info) { return testing::TestName(info.param); });

// A shard refuses declarations beyond its memory cap, says why, and keeps serving what it holds.
TEST(ClientMemoryTest, DeclarationsBeyondTheShardsMemoryCapAreRefused) {
  server::ServerOptions base;
  base.max_memory_bytes = 1 << 20;
  auto cluster = TestCluster::Start("inproc", 1, 1, base);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_OK(client);
  // SGD keeps no state: 8 bytes per element (weights and the gradient sum), plus under a
  // kilobyte of bookkeeping per partition (1 KiB partitions here): about 11 bytes per element.
  absl::StatusOr<TensorId> too_big = (*client)->Declare(Spec("too_big", 200000, 0.5));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted) << too_big.status();
  EXPECT_TRUE(absl::StrContains(too_big.status().message(), "--max_memory_bytes"))
      << too_big.status();
  auto first = (*client)->Declare(Spec("first", 40000, 0.5));
  auto second = (*client)->Declare(Spec("second", 40000, 0.5));
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << " " << second.status();
  EXPECT_OK((*client)->Declare(Spec("first", 40000, 0.5)));  // again: nothing new
  EXPECT_EQ((*client)->Declare(Spec("third", 40000, 0.5)).status().code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<float> g(40000, 1.0f), w(40000);
  ASSERT_OK((*client)->PushPull(*first, g, absl::MakeSpan(w), 0).Wait());
  EXPECT_FLOAT_EQ(w[123], -0.5f);
}

// The 99th percentile of `latencies`.
absl::Duration P99(std::vector<absl::Duration> latencies) {
  std::sort(latencies.begin(), latencies.end());
  return latencies[latencies.size() * 99 / 100];
}

// Declaring a 2 GB tensor (seconds of allocating and filling) happens off the transport
// threads: meanwhile another worker's 4 KiB push+pulls are served as before. On the transport
// thread, every one of them waited for the whole declaration.
TEST(ClientDeclarationTest, ALargeDeclarationDoesNotStallOtherWorkers) {
  for (const std::string& transport : testing::TransportsUnderTest({})) {
    if (transport != "grpc" && transport != "ucx") continue;
    SCOPED_TRACE(transport);
    auto cluster = TestCluster::Start(transport, 1, 2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto worker = (*cluster)->NewClient(0);
    // Allocating and filling 2 GB takes seconds, and more on a loaded machine: the test is
    // about the other worker, not about how long this takes.
    ClientOptions declarer_options = (*cluster)->ClientOptionsFor(1);
    declarer_options.call_timeout = absl::Minutes(3);
    auto declarer = Client::Create(declarer_options);
    ASSERT_TRUE(worker.ok() && declarer.ok());
    auto small = (*worker)->Declare(Spec("small", 1024, 0.1, SyncMode::kAsp));
    ASSERT_TRUE(small.ok()) << small.status();
    std::vector<float> g(1024, 1.0f), w(1024);
    auto push_pull = [&]() -> absl::Duration {
      const absl::Time start = absl::Now();
      EXPECT_OK((*worker)->PushPull(*small, g, absl::MakeSpan(w), 0).Wait());
      return absl::Now() - start;
    };
    std::vector<absl::Duration> idle;
    for (int i = 0; i < 300; ++i) {
      idle.push_back(push_pull());
      absl::SleepFor(absl::Milliseconds(1));
    }

    std::atomic<bool> declared{false};
    std::thread big([&] {
      TensorSpec spec = Spec("big", uint64_t{512} << 20, 0.1, SyncMode::kAsp);  // 2 GB of fp32
      spec.init = Initializer::Constant(0.5f);
      absl::Status status = (*declarer)->Declare(spec).status();
      EXPECT_TRUE(status.ok()) << status;
      declared.store(true);
    });
    // A pause between operations, as a training step has: a loop that never pauses would take
    // the CPU the declaration needs, on a machine of two cores.
    std::vector<absl::Duration> busy;
    while (!declared.load()) {
      busy.push_back(push_pull());
      absl::SleepFor(absl::Milliseconds(1));
    }
    big.join();
    ASSERT_GE(busy.size(), 20u) << "the declaration was too quick to measure anything";
    // 10x the idle p99, and at least 50 ms so that a loaded machine's scheduling is not
    // mistaken for a stall (a stall lasts the whole declaration: seconds).
    EXPECT_LE(P99(busy), std::max(10 * P99(idle), absl::Milliseconds(50)))
        << "idle p99 " << P99(idle) << ", " << busy.size() << " push+pulls during the declaration";
    std::printf("%s: 4 KiB push+pull p99 idle %s, during a 2 GB declaration %s (%zu ops)\n",
                transport.c_str(), absl::FormatDuration(P99(idle)).c_str(),
                absl::FormatDuration(P99(busy)).c_str(), busy.size());
  }
}

// With every request delivered twice, shards recognise the copies: BSP results stay exact.
TEST(ClientFaultTest, DuplicatedRequestsAreAppliedOnce) {
  auto cluster = TestCluster::Start("inproc", 2, 2);
  ASSERT_OK(cluster);
  (*cluster)->inproc()->SetFaults({.duplicate_requests = true});
  auto c0 = (*cluster)->NewClient(0);
  auto c1 = (*cluster)->NewClient(1);
  ASSERT_TRUE(c0.ok() && c1.ok());
  for (auto* c : {&*c0, &*c1}) {
    ASSERT_OK((*c)->Declare(Spec("w", 500, 1.0, SyncMode::kBsp)));
    ASSERT_OK((*c)->Declare(Spec("a", 500, 1.0, SyncMode::kAsp)));
  }
  const TensorId w = TensorKeyFromName("w");
  const TensorId a = TensorKeyFromName("a");
  std::vector<float> g(500, 1.0f), out0(500), out1(500);
  for (int step = 0; step < 3; ++step) {
    Operation p0 = (*c0)->PushPull(w, g, absl::MakeSpan(out0), step);
    Operation p1 = (*c1)->PushPull(w, g, absl::MakeSpan(out1), step);
    ASSERT_OK(p0.Wait());
    ASSERT_OK(p1.Wait());
    ASSERT_OK((*c0)->Push(a, g, step).Wait());
  }
  EXPECT_EQ(out0[0], -6.0f);  // 3 steps x 2 workers x lr 1, each push counted once
  EXPECT_EQ(out1[499], -6.0f);
  ASSERT_OK((*c0)->Pull(a, absl::MakeSpan(out0)).Wait());
  EXPECT_EQ(out0[0], -3.0f);  // ASP: three pushes, each applied once
}

// A lost request ends its operation with DeadlineExceeded instead of waiting forever.
TEST(ClientFaultTest, LostRequestEndsAtTheDeadline) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_OK(cluster);
  ClientOptions options = (*cluster)->ClientOptionsFor(0);
  options.call_timeout = absl::Milliseconds(300);
  auto client = Client::Create(options);
  ASSERT_OK(client);
  auto id = (*client)->Declare(Spec("w", 10));
  ASSERT_OK(id);
  (*cluster)->inproc()->SetFaults({.drop_every_nth_request = 1});
  std::vector<float> v(10);
  EXPECT_EQ((*client)->Pull(*id, absl::MakeSpan(v)).Wait().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace hetps
