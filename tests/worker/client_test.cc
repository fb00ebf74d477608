// The worker client against shards started in this process, once per transport: pushes, pulls
// and what they return.
#include "worker/client.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/half.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/burst_recorder.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "tests/testing/wrapping_transport.h"
#include "tests/worker/client_test_fixture.h"
#include "transport/transport.h"

namespace hetps {
namespace {

using testing::Spec;
using testing::TestCluster;

class ClientTest : public testing::ClientClusterTest {};

TEST_P(ClientTest, BspPushPullEqualsSingleProcessSgd) {
  StartCluster(2, 2);
  std::unique_ptr<Client> clients[] = {NewClient(0), NewClient(1)};
  const uint64_t n = 1000;  // 4 partitions of 1 KiB over 2 shards
  TensorId ids[2][2];
  for (int r = 0; r < 2; ++r) {
    auto big = clients[r]->Declare(Spec("big", n));
    auto tiny = clients[r]->Declare(Spec("tiny", 3));
    ASSERT_TRUE(big.ok()) << big.status();
    ASSERT_TRUE(tiny.ok()) << tiny.status();
    ids[r][0] = *big;
    ids[r][1] = *tiny;
  }
  const int steps = 5;
  auto gradient = [](int rank, int step, size_t i) {
    return static_cast<float>((rank + 1) * 0.01 * std::sin(i + step * 7.0));
  };
  std::vector<float> weights[2][2];
  std::thread workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = std::thread([&, r] {
      std::vector<float> g_big(n), g_tiny(3);
      weights[r][0].assign(n, 0);
      weights[r][1].assign(3, 0);
      for (int step = 0; step < steps; ++step) {
        for (size_t i = 0; i < n; ++i) g_big[i] = gradient(r, step, i);
        for (size_t i = 0; i < 3; ++i) g_tiny[i] = gradient(r, step, i + n);
        const PushItem push[] = {{ids[r][0], g_big}, {ids[r][1], g_tiny}};
        const PullItem pull[] = {{ids[r][0], absl::MakeSpan(weights[r][0])},
                                 {ids[r][1], absl::MakeSpan(weights[r][1])}};
        ASSERT_OK(clients[r]->PushPull(push, pull, step).Wait());
      }
    });
  }
  for (auto& w : workers) w.join();
  for (size_t i = 0; i < n + 3; ++i) {
    float reference = 0;
    for (int step = 0; step < steps; ++step) {
      reference -= 0.1f * (gradient(0, step, i) + gradient(1, step, i));
    }
    const float got0 = i < n ? weights[0][0][i] : weights[0][1][i - n];
    const float got1 = i < n ? weights[1][0][i] : weights[1][1][i - n];
    ASSERT_EQ(got0, reference) << i;
    ASSERT_EQ(got1, reference) << i;
  }
}

TEST_P(ClientTest, ManySmallTensorsArePackedIntoOneMessagePerShard) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  std::vector<TensorId> ids;
  for (int t = 0; t < 100; ++t) {
    auto id = client->Declare(Spec(absl::StrCat("small", t), 3));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  std::vector<std::vector<float>> grads(100, std::vector<float>(3, 1.0f));
  std::vector<PushItem> items;
  for (int t = 0; t < 100; ++t) items.push_back({ids[t], grads[t]});
  const uint64_t before = TotalDataRequests();
  ASSERT_OK(client->Push(items, 0).Wait());
  EXPECT_EQ(TotalDataRequests() - before, 2u);  // 100 tensors, 2 shards, 2 messages
  std::vector<float> back(3);
  ASSERT_OK(client->Pull(ids[42], absl::MakeSpan(back), 1).Wait());
  EXPECT_FLOAT_EQ(back[0], -0.1f);
}

TEST_P(ClientTest, PartitionRunsMovedOneByOneEqualTheWholeTensor) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  const uint64_t n = 1000;  // 4 partitions of at most 256 elements
  auto id = client->Declare(Spec("w", n));
  ASSERT_TRUE(id.ok()) << id.status();
  auto partitions = client->Partitions(*id);
  ASSERT_TRUE(partitions.ok()) << partitions.status();
  ASSERT_EQ(partitions->size(), 4u);
  EXPECT_EQ(partitions->back().begin + partitions->back().size, n);
  EXPECT_NE((*partitions)[0].shard, (*partitions)[1].shard);
  std::vector<float> gradient(n), weights(n, 0.0f);
  for (size_t i = 0; i < n; ++i) gradient[i] = static_cast<float>(i % 7) - 3.0f;
  // Last partition first: each run is pushed and pulled on its own, from and into its slice.
  std::vector<Operation> operations;
  for (uint32_t p = 4; p-- > 0;) {
    const TensorPartition& part = (*partitions)[p];
    const PushItem push{*id, absl::MakeConstSpan(gradient).subspan(part.begin, part.size), {p, 1}};
    const PullItem pull{*id, absl::MakeSpan(weights).subspan(part.begin, part.size), {p, 1}};
    operations.push_back(client->PushPull({&push, 1}, {&pull, 1}, 0));
  }
  for (const Operation& op : operations) ASSERT_TRUE(op.Wait().ok()) << op.Wait();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(weights[i], -0.1f * gradient[i]) << i;
  // A run of two partitions in the middle.
  const uint64_t begin = (*partitions)[1].begin;
  const uint64_t size = (*partitions)[1].size + (*partitions)[2].size;
  std::vector<float> middle(size);
  const PullItem pull{*id, absl::MakeSpan(middle), {1, 2}};
  ASSERT_OK(client->Pull({&pull, 1}, 1).Wait());
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(middle[i], weights[begin + i]) << i;

  const PullItem past_the_end{*id, absl::MakeSpan(middle), {4, 1}};
  EXPECT_EQ(client->Pull({&past_the_end, 1}).Wait().code(), absl::StatusCode::kOutOfRange);
  const PullItem too_many{*id, absl::MakeSpan(middle), {3, 2}};
  EXPECT_EQ(client->Pull({&too_many, 1}).Wait().code(), absl::StatusCode::kOutOfRange);
  const PullItem wrong_size{*id, absl::MakeSpan(middle).subspan(1), {1, 2}};
  EXPECT_EQ(client->Pull({&wrong_size, 1}).Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Partitions(*id + 1).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ClientTest, CallbacksRunOnceAndOperationsReportDone) {
  StartCluster(1, 1);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 10));
  ASSERT_OK(id);
  std::vector<float> g(10, 1.0f), w(10);
  std::atomic<int> calls{0};
  absl::Notification called;
  Operation op = client->PushPull(*id, g, absl::MakeSpan(w), 0, [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    ++calls;
    called.Notify();
  });
  ASSERT_OK(op.Wait());
  EXPECT_TRUE(op.done());
  EXPECT_TRUE(called.HasBeenNotified());  // the callback has run when Wait returns
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FLOAT_EQ(w[0], -0.1f);
}

// Wait() drives the transport where it can be driven (UCX with busy polling): the last message
// of the operation completes on the waiting thread, with no hand-off from a transport thread.
TEST_P(ClientTest, WaitCompletesTheOperationOnTheWaitingThreadWhereTheTransportCanBeDriven) {
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkersWith(Spec("w", 64)));
  std::vector<float> w0(64), g(64, 1.0f);
  bool completed_here = false;
  // BSP: worker 0's weights come once worker 1 has pushed too, 50 ms later; by then worker 0
  // is waiting, unless its thread lost the CPU for that long (a loaded machine): a few steps.
  // (Worker 1 does not wait on its operation, so only worker 0 drives.)
  for (int step = 0; step < 3 && !completed_here; ++step) {
    std::thread::id callback_thread;
    Operation op = c0_->PushPull(id_, g, absl::MakeSpan(w0), step, [&](const absl::Status&) {
      callback_thread = std::this_thread::get_id();
    });
    std::thread late([&] {
      absl::SleepFor(absl::Milliseconds(50));
      absl::Notification pushed;
      c1_->Push(id_, g, step, [&pushed](const absl::Status& status) {
        EXPECT_TRUE(status.ok()) << status;
        pushed.Notify();
      });
      EXPECT_TRUE(pushed.WaitForNotificationWithTimeout(absl::Seconds(20)));
    });
    ASSERT_OK(op.Wait());
    late.join();
    EXPECT_FLOAT_EQ(w0[0], -0.2f * static_cast<float>(step + 1));
    completed_here = callback_thread == std::this_thread::get_id();
    if (GetParam() != "ucx-busy") break;
  }
  if (GetParam() == "ucx-busy") {
    EXPECT_TRUE(completed_here);
  }
}

TEST_P(ClientTest, PullWaitsForTheVersionItAsksFor) {
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkersWith(Spec("w", 64)));
  std::vector<float> w(64), g(64, 1.0f);
  Operation pull = c0_->Pull(id_, absl::MakeSpan(w), 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(pull.done());
  ASSERT_OK(c0_->Push(id_, g, 0).Wait());
  EXPECT_FALSE(pull.done());
  ASSERT_OK(c1_->Push(id_, g, 0).Wait());
  ASSERT_OK(pull.Wait());
  EXPECT_FLOAT_EQ(w[0], -0.2f);
}

TEST_P(ClientTest, InitialValuesAndInitializers) {
  StartCluster(2, 2);
  std::unique_ptr<Client> c0 = NewClient(0), c1 = NewClient(1);
  std::vector<float> values(10000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  auto id = c0->Declare(Spec("init", values.size()), values);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_OK(c1->Declare(Spec("init", values.size()), values));
  std::vector<float> back(values.size());
  ASSERT_OK(c1->Pull(*id, absl::MakeSpan(back)).Wait());
  EXPECT_EQ(back, values);

  TensorSpec uniform = Spec("uniform", 5000);
  uniform.init = Initializer::Uniform(-2, 3, 99);
  auto uid = c0->Declare(uniform);
  ASSERT_TRUE(uid.ok()) << uid.status();
  ASSERT_OK(c0->Pull(*uid, absl::MakeSpan(back.data(), 5000)).Wait());
  float low = 10, high = -10;
  for (size_t i = 0; i < 5000; ++i) {
    low = std::min(low, back[i]);
    high = std::max(high, back[i]);
  }
  EXPECT_GE(low, -2.0f);
  EXPECT_LT(high, 3.0f);
  EXPECT_LT(low, -1.9f);
  EXPECT_GT(high, 2.9f);
  // The same rule on a differently partitioned cluster gives the same values.
  auto other = TestCluster::Start(GetParam(), 3, 1);
  ASSERT_OK(other);
  ClientOptions options = (*other)->ClientOptionsFor(0);
  options.partition_bytes = 4096;
  auto client = Client::Create(options);
  ASSERT_OK(client);
  auto uid2 = (*client)->Declare(uniform);
  ASSERT_OK(uid2);
  std::vector<float> again(5000);
  ASSERT_OK((*client)->Pull(*uid2, absl::MakeSpan(again)).Wait());
  EXPECT_TRUE(std::equal(again.begin(), again.end(), back.begin()));
}

TEST_P(ClientTest, SixteenBitWireTypesAreConvertedOnBothSides) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  TensorSpec spec = Spec("w", 600, 1.0);
  spec.optimizer = {"sum", {}};
  spec.push_dtype = DType::kBf16;
  spec.pull_dtype = DType::kFp16;
  auto id = client->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> g(600), w(600);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i) - 1.0f / 3.0f;
  absl::Status status = client->PushPull(*id, g, absl::MakeSpan(w), 0).Wait();
  ASSERT_TRUE(status.ok()) << status;
  for (size_t i = 0; i < g.size(); ++i) {
    // fp32 -> bf16 on the way in, fp32 sum on the shard, -> fp16 on the way out.
    ASSERT_EQ(w[i], Fp16ToFp32(Fp32ToFp16(Bf16ToFp32(Fp32ToBf16(g[i]))))) << i;
  }
  // 16-bit values in and out without any conversion by the client.
  std::vector<uint16_t> g16(600), w16(600);
  for (size_t i = 0; i < g16.size(); ++i) g16[i] = Fp32ToBf16(static_cast<float>(i));
  ASSERT_OK(
      client->PushPull(*id, ConstTensorView::Bf16(g16), TensorView::Fp16(absl::MakeSpan(w16)), 1)
          .Wait());
  for (size_t i = 0; i < w16.size(); ++i) {
    ASSERT_EQ(w16[i], Fp32ToFp16(Bf16ToFp32(g16[i]))) << i;
  }
}

// Many messages to each shard, each converted on its way out and on its way back (the client
// sends one while it converts the next, and may handle answers in between).
TEST_P(ClientTest, FloatsConvertedForTheWireAcrossManyMessagesArriveWhole) {
  StartCluster(2, 1);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.partition_bytes = 16 << 10;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TensorSpec spec = Spec("w", 200000, 0.0);
  spec.optimizer = {"sum", {}};
  spec.push_dtype = DType::kBf16;
  spec.pull_dtype = DType::kBf16;
  auto id = (*client)->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_GT((*(*client)->Partitions(*id)).size(), 20u);
  std::vector<float> g(200000), w(200000);
  for (uint64_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = 0.001f * static_cast<float>(i % 7919) - 2.5f + static_cast<float>(step);
    }
    absl::Status status = (*client)->PushPull(*id, g, absl::MakeSpan(w), step).Wait();
    ASSERT_TRUE(status.ok()) << status;
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(w[i], Bf16ToFp32(Fp32ToBf16(Bf16ToFp32(Fp32ToBf16(g[i]))))) << step << " " << i;
    }
  }
}

// Passes calls on to `inner` but hands their responses over only inside Progress() or Drive():
// a transport whose client side moves only where a caller drives it, so a test sees which
// responses a thread handles there.
class AnsweredWhenDriven final : public testing::WrappingTransport {
 public:
  explicit AnsweredWhenDriven(std::shared_ptr<transport::Transport> inner)
      : WrappingTransport(std::move(inner)) {}
  ~AnsweredWhenDriven() override { HandOver(); }
  void Progress() override { HandOver(); }
  size_t held() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  // Hands answers over as they arrive until `done()`. Bounded as every call is (each is
  // answered or fails by its deadline); `done()` may also come from a client thread, without an
  // answer here, so each wait for one ends after 20 ms.
  bool Drive(absl::FunctionRef<bool()> done) override {
    for (HandOver(); !done(); HandOver()) {
      absl::MutexLock lock(&mu_);
      auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_.empty(); };
      AwaitFor(mu_, absl::Condition(&answered), absl::Milliseconds(20));
    }
    return true;
  }

 private:
  struct Answer {
    transport::ResponseCallback done;
    absl::StatusOr<transport::Response> result;
  };
  class Holding final : public transport::Connection {
   public:
    Holding(std::unique_ptr<transport::Connection> inner, AnsweredWhenDriven* owner)
        : inner_(std::move(inner)), owner_(owner) {}
    void Call(transport::Request request, transport::ResponseCallback done) override {
      inner_->Call(std::move(request), [owner = owner_, done = std::move(done)](
                                           absl::StatusOr<transport::Response> result) mutable {
        absl::MutexLock lock(&owner->mu_);
        owner->held_.push_back({std::move(done), std::move(result)});
      });
    }
    void Shutdown() override { inner_->Shutdown(); }
    const std::string& address() const override { return inner_->address(); }

   private:
    const std::unique_ptr<transport::Connection> inner_;
    AnsweredWhenDriven* const owner_;
  };

  void HandOver() {
    std::vector<Answer> answers;
    {
      absl::MutexLock lock(&mu_);
      answers.swap(held_);
    }
    for (Answer& answer : answers) answer.done(std::move(answer.result));
  }

  std::unique_ptr<transport::Connection> Wrap(
      std::unique_ptr<transport::Connection> inner) override {
    return std::make_unique<Holding>(std::move(inner), this);
  }

  absl::Mutex mu_;
  std::vector<Answer> held_ ABSL_GUARDED_BY(mu_);
};

// An operation's callback never runs inside another operation's start, not even where the
// client moves the transport along from there (while it converts its next message): here the
// first operation's answer is held until the second one's start drives the transport.
TEST(ClientCallbackTest, ACallbackNeverRunsInsideAnotherOperationsStart) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions options = (*cluster)->ClientOptionsFor(0);
  auto driven = std::make_shared<AnsweredWhenDriven>(options.transport_instance);
  options.transport_instance = driven;
  options.partition_bytes = 64 << 10;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TensorSpec small = Spec("small", 64, 0.0);
  small.optimizer = {"sum", {}};
  TensorSpec converted = Spec("converted", 1 << 18, 0.0);
  converted.optimizer = {"sum", {}};
  converted.push_dtype = DType::kBf16;
  auto small_id = (*client)->Declare(small);
  auto converted_id = (*client)->Declare(converted);
  ASSERT_TRUE(small_id.ok() && converted_id.ok());
  const std::thread::id test_thread = std::this_thread::get_id();
  bool starting = false;  // read by callbacks on this thread only
  std::atomic<int> inside_start{0}, callbacks{0};
  std::vector<float> g(converted.num_elements, 0.25f), gs(small.num_elements, 1.0f);
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    Operation first = (*client)->Push(*small_id, gs, round, [&](const absl::Status&) {
      if (std::this_thread::get_id() == test_thread && starting) inside_start.fetch_add(1);
      callbacks.fetch_add(1);
    });
    ASSERT_TRUE(testing::AwaitCondition([&] { return driven->held() > 0; }, absl::Seconds(20)));
    starting = true;
    Operation second = (*client)->Push(*converted_id, g, round);
    starting = false;
    ASSERT_TRUE(second.Wait().ok()) << second.Wait();
    ASSERT_TRUE(first.Wait().ok()) << first.Wait();
  }
  EXPECT_EQ(inside_start.load(), 0) << "callbacks that ran inside another operation's start";
  EXPECT_EQ(callbacks.load(), kRounds);
}

TEST_P(ClientTest, SumOnlyTensorsReturnExactlyTheSumOfEachStep) {
  StartCluster(2, 2);
  std::unique_ptr<Client> clients[] = {NewClient(0), NewClient(1)};
  TensorSpec spec = Spec("grad", 1000);
  spec.optimizer = {"sum", {}};
  TensorId id = 0;
  for (auto& client : clients) {
    auto declared = client->Declare(spec);
    ASSERT_TRUE(declared.ok()) << declared.status();
    id = *declared;
  }
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<float> g0(1000), g1(1000), out0(1000), out1(1000);
    for (size_t i = 0; i < 1000; ++i) {
      g0[i] = std::sin(static_cast<float>(i + step));
      g1[i] = 1e-3f * static_cast<float>(i) * (step + 1);
    }
    Operation a = clients[0]->PushPull(id, g0, absl::MakeSpan(out0), step);
    Operation b = clients[1]->PushPull(id, g1, absl::MakeSpan(out1), step);
    ASSERT_OK(a.Wait());
    ASSERT_OK(b.Wait());
    for (size_t i = 0; i < 1000; ++i) {
      ASSERT_EQ(out0[i], g0[i] + g1[i]) << i;  // this step's sum, nothing carried over
      ASSERT_EQ(out1[i], g0[i] + g1[i]) << i;
    }
  }
}

TEST_P(ClientTest, LearningRateScheduleSwitchesOnEveryShardAtTheSameStep) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  auto id = client->Declare(Spec("w", 1000, 1.0));  // 4 partitions over 2 shards
  ASSERT_OK(id);
  std::vector<float> g(1000, 1.0f), w(1000);
  ASSERT_OK(client->SetHyperparameters(*id, 2, {{"lr", 0.5}}));
  ASSERT_OK(client->SetHyperparameters(*id, 3, {{"lr", 0.25}}));
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_OK(client->PushPull(*id, g, absl::MakeSpan(w), step).Wait());
  }
  for (float v : w) ASSERT_EQ(v, -1.0f - 1.0f - 0.5f - 0.25f);
  EXPECT_EQ(client->SetHyperparameters(*id, 1, {{"lr", 0.1}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->SetHyperparameters(*id, 9, {{"lr", -1}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->SetHyperparameters(777, 9, {{"lr", 1}}).code(), absl::StatusCode::kNotFound);
}

TEST_P(ClientTest, StatsCountParameterAndOptimizerStateBytes) {
  StartCluster(2, 1);
  std::unique_ptr<Client> client = NewClient(0);
  TensorSpec adam = Spec("adam", 1000);
  adam.optimizer = {"adam", {{"amsgrad", 1}}};
  ASSERT_OK(client->Declare(adam));
  ASSERT_OK(client->Declare(Spec("sgd", 500)));
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t parameters = 0, state = 0;
  for (const ShardStats& shard : *stats) {
    parameters += shard.parameter_bytes;
    state += shard.optimizer_state_bytes;
  }
  EXPECT_EQ(parameters, (1000 + 500) * sizeof(float));
  EXPECT_EQ(state, 3 * 1000 * sizeof(float));  // m, v and v_max; plain sgd keeps none
}

TEST(ClientBurstTest, EveryCallNamesWhatItsOperationMovesToItsShard) {
  auto cluster = testing::TestCluster::Start("inproc", 2, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions options = (*cluster)->ClientOptionsFor(0);
  auto recorder =
      std::make_shared<testing::BurstRecorder>(options.transport_instance, hetps::v1::METHOD_PUSH);
  options.transport_instance = recorder;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto id = (*client)->Declare(testing::Spec("burst", 10000));  // 1024-byte partitions
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> gradient(10000, 1.0f);
  ASSERT_OK((*client)->Push(*id, gradient, 0).Wait());
  testing::ExpectEachCallNamesItsConnectionsShare(recorder->TakeSeen(), /*connections=*/2,
                                                  gradient.size() * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"},
                                                                          /*with_busy_poll=*/true)),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
