// Reading and writing a tensor's whole state (weights, optimizer state, version) over every
// transport: what the shards hold after some Adam steps is exactly what the rule computes here,
// a state written into a fresh cluster continues bit for bit like the original, and bad writes
// get specific errors and change nothing.
#include <cmath>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "optimizer/registry.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "worker/client.h"

namespace hetps {
namespace {

constexpr uint64_t kElements = 1000;  // 4 partitions of 256 floats (test clusters' 1 KiB)

TensorSpec AdamSpec() {
  TensorSpec spec;
  spec.name = "w";
  spec.num_elements = kElements;
  spec.optimizer = {"adam", {{"lr", 0.01}, {"amsgrad", 1}}};
  spec.init = Initializer::Uniform(-1, 1, 7);
  return spec;
}

std::vector<float> Gradient(uint32_t rank, uint64_t step) {
  std::vector<float> g(kElements);
  for (uint64_t i = 0; i < kElements; ++i) g[i] = std::sin(0.01f * i + rank + 3.0f * step);
  return g;
}

class ClientStateTest : public testing::ClientClusterTest {
 protected:
  // Two workers push `steps` steps of Gradient() to (c0_, c1_) from step `first`.
  void Train(uint64_t first, uint64_t steps) {
    std::vector<float> w(kElements);
    for (uint64_t step = first; step < first + steps; ++step) {
      std::vector<float> g0 = Gradient(0, step), g1 = Gradient(1, step);
      Operation a = c0_->PushPull(id_, g0, absl::MakeSpan(w), step);
      ASSERT_OK(c1_->Push(id_, g1, step).Wait());
      ASSERT_OK(a.Wait());
    }
  }
};

TEST_P(ClientStateTest, TheStateReadIsWhatTheRuleComputes) {
  StartCluster(2, 2);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  ASSERT_OK(c0_->Declare(AdamSpec()));
  id_ = *c1_->Declare(AdamSpec());
  absl::StatusOr<TensorState> initial = c0_->ReadState(id_);
  ASSERT_TRUE(initial.ok()) << initial.status();
  EXPECT_EQ(initial->version, 0u);
  ASSERT_EQ(initial->slots.size(), 3u);  // m, v, max v

  Train(0, 3);
  absl::StatusOr<TensorState> read = c1_->ReadState(id_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->version, 3u);

  // The same rule, run here on the whole tensor.
  auto adam = CreateOptimizer("adam", AdamSpec().optimizer.params);
  ASSERT_OK(adam);
  TensorState expected = *initial;
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<float> g0 = Gradient(0, step), g1 = Gradient(1, step);
    const float* gradients[] = {g0.data(), g1.data()};
    std::vector<float*> state;
    for (auto& slot : expected.slots) state.push_back(slot.data());
    UpdateArgs args;
    args.weights_in = args.weights_out = expected.weights.data();
    args.gradients = gradients;
    args.state = state;
    args.size = kElements;
    args.step = step;
    (*adam)->Update(args);
  }
  EXPECT_EQ(read->weights, expected.weights);
  EXPECT_EQ(read->slots, expected.slots);
}

TEST_P(ClientStateTest, AWrittenStateContinuesLikeTheOriginal) {
  StartTwoWorkersWith(AdamSpec());
  Train(0, 4);
  absl::StatusOr<TensorState> saved = c0_->ReadState(id_);
  ASSERT_TRUE(saved.ok()) << saved.status();

  // A second cluster, declared afresh (other initial values), gets the saved state.
  std::unique_ptr<testing::TestCluster> original = std::move(cluster_);
  std::unique_ptr<Client> original_c0 = std::move(c0_), original_c1 = std::move(c1_);
  TensorSpec fresh = AdamSpec();
  fresh.init = Initializer::Constant(5);
  StartTwoWorkersWith(fresh);
  ASSERT_OK(c1_->WriteState(id_, *saved));
  absl::StatusOr<TensorState> written = c0_->ReadState(id_);
  ASSERT_OK(written);
  EXPECT_EQ(written->version, 4u);
  EXPECT_EQ(written->weights, saved->weights);
  EXPECT_EQ(written->slots, saved->slots);

  // Both go on from step 4 and stay identical.
  Train(4, 2);
  std::swap(cluster_, original);
  std::swap(c0_, original_c0);
  std::swap(c1_, original_c1);
  Train(4, 2);
  absl::StatusOr<TensorState> a = c0_->ReadState(id_);
  absl::StatusOr<TensorState> b = original_c0->ReadState(id_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->version, 6u);
  EXPECT_EQ(a->weights, b->weights);
  EXPECT_EQ(a->slots, b->slots);
}

TEST_P(ClientStateTest, BadWritesAreRefusedAndChangeNothing) {
  StartTwoWorkersWith(AdamSpec());
  Train(0, 1);
  absl::StatusOr<TensorState> state = c0_->ReadState(id_);
  ASSERT_OK(state);
  const uint64_t digest = cluster_->shard(0).StateDigest();

  TensorState two_slots = *state;
  two_slots.slots.pop_back();
  EXPECT_EQ(c0_->WriteState(id_, two_slots).code(), absl::StatusCode::kInvalidArgument);
  TensorState short_weights = *state;
  short_weights.weights.pop_back();
  EXPECT_EQ(c0_->WriteState(id_, short_weights).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c0_->WriteState(12345, *state).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c0_->ReadState(12345).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cluster_->shard(0).StateDigest(), digest);

  // Worker 0 has pushed step 1, worker 1 not yet: the step is being gathered.
  std::vector<float> g = Gradient(0, 1), w(kElements);
  Operation pending = c0_->PushPull(id_, g, absl::MakeSpan(w), 1);
  // Its pull waits on the shard once the push is there (the write goes on another connection).
  ASSERT_TRUE(
      testing::AwaitCondition([&] { return cluster_->shard(0).Stats().requests_waiting() > 0; },
                              absl::Seconds(20), absl::Milliseconds(1)));
  absl::Status during_step = c1_->WriteState(id_, *state);
  EXPECT_EQ(during_step.code(), absl::StatusCode::kFailedPrecondition) << during_step;
  EXPECT_NE(during_step.message().find("between steps"), std::string::npos) << during_step;
  ASSERT_OK(c1_->Push(id_, Gradient(1, 1), 1).Wait());
  ASSERT_OK(pending.Wait());
  absl::StatusOr<TensorState> after = c0_->ReadState(id_);
  ASSERT_OK(after);
  EXPECT_EQ(after->version, 2u);  // step 1 applied normally
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientStateTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
