// A worker's runs (incarnations) and push sequence numbers as a shard judges them: a run that
// took a rank over, a second run of the job, pushes overtaking each other, forged sequences.
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/server/shard_test_fixture.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using transport::AsBytes;
using transport::Payload;

using ShardRunsTest = ShardTest;

TEST_P(ShardRunsTest, AProcessThatTookARankOverMakesTheOtherOnesRequestsFail) {
  const uint32_t p = mine_[0];
  ASSERT_OK(Call(hetps::v1::METHOD_HELLO, Hello(1, RunOf(1))));
  // A second process starts with rank 1: its Hello takes the rank over.
  ASSERT_OK(Call(hetps::v1::METHOD_HELLO, Hello(1, 555)));
  absl::Status stale = Call(hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}, 0, 1),
                            Gradient(PartitionBytes(p)))
                           .status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_NE(stale.message().find("taken over"), absl::string_view::npos) << stale;
  hetps::v1::BarrierRequest barrier;
  barrier.set_worker_rank(1);
  barrier.set_generation(1);
  barrier.set_incarnation(RunOf(1));
  EXPECT_EQ(Call(hetps::v1::METHOD_BARRIER, barrier).status().code(),
            absl::StatusCode::kFailedPrecondition);
  barrier.set_incarnation(0);
  EXPECT_EQ(Call(hetps::v1::METHOD_BARRIER, barrier).status().code(),
            absl::StatusCode::kInvalidArgument);
  hetps::v1::PushRequest unnamed = Push({Item(p, PartitionBytes(p))}, 0, 1);
  unnamed.set_incarnation(0);
  EXPECT_EQ(Call(hetps::v1::METHOD_PUSH, unnamed, Gradient(PartitionBytes(p))).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectUnchanged();
  // The new process's own pushes are taken.
  hetps::v1::PushRequest current = Push({Item(p, PartitionBytes(p))}, 0, 1);
  current.set_incarnation(555);
  EXPECT_OK(Call(hetps::v1::METHOD_PUSH, current, Gradient(PartitionBytes(p))));
}

TEST_P(ShardRunsTest, ASecondRunOfTheJobIsToldTheShardHoldsAnEarlierRunsState) {
  const uint32_t p = mine_[0];
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}, 0, rank),
                   Gradient(PartitionBytes(p))));
  }
  const hetps::v1::PartitionItem item = Item(p, PartitionBytes(p));
  const std::pair<float, uint64_t> trained = Read(item);
  ASSERT_EQ(trained.second, 1u);
  // The same job started again: new runs, counting steps from 0 again.
  const uint64_t refused_before = cluster_->shard(0).Stats().pushes_refused();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_OK(Call(hetps::v1::METHOD_HELLO, Hello(rank, 900 + rank)));
    hetps::v1::PushRequest again = Push({item}, 0, rank);
    again.set_incarnation(900 + rank);
    absl::Status status = Call(hetps::v1::METHOD_PUSH, again, Gradient(PartitionBytes(p))).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("earlier run"), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find("tensor 't'"), absl::string_view::npos) << status;
  }
  EXPECT_EQ(Read(item), trained);
  EXPECT_EQ(cluster_->shard(0).Stats().pushes_refused(), refused_before + 2);
}

TEST_P(ShardRunsTest, AspPushesOvertakingEachOtherAreAppliedOrRefusedNeverDropped) {
  const hetps::v1::PartitionItem item = DeclareAspPartition("overtaken");
  // 200 pushes in flight at once from one worker to one partition, in reverse sequence order:
  // every push more than 64 below the newest to arrive cannot be told from a retry.
  constexpr int kPushes = 200;
  std::vector<float> ones(16, 1.0f);
  absl::Mutex mu;
  int answered = 0, ok = 0, aborted = 0;
  std::vector<absl::Status> others;
  const uint64_t refused_before = cluster_->shard(0).Stats().pushes_refused();
  for (int i = 0; i < kPushes; ++i) {
    transport::Request request;
    request.method = hetps::v1::METHOD_PUSH;
    request.header = Push({item}, 0, 0, /*sequence=*/kPushes - i).SerializeAsString();
    request.payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(ones)));
    request.deadline = absl::Now() + absl::Seconds(20);
    shard0_->Call(std::move(request), [&](absl::StatusOr<transport::Response> result) {
      absl::MutexLock lock(&mu);
      ++answered;
      if (result.ok()) {
        ++ok;
      } else if (result.status().code() == absl::StatusCode::kAborted) {
        ++aborted;
      } else {
        others.push_back(result.status());
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == kPushes; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
    EXPECT_TRUE(others.empty()) << others[0];
    EXPECT_GT(aborted, 0);  // the order above makes some too old
  }
  // Every push answered OK was applied, once; none answered with an error was.
  const std::pair<float, uint64_t> now = Read(item);
  EXPECT_EQ(now.second, static_cast<uint64_t>(ok));
  EXPECT_FLOAT_EQ(now.first, -static_cast<float>(ok));
  EXPECT_EQ(cluster_->shard(0).Stats().pushes_refused(), refused_before + aborted);
  // The retries of the applied ones are recognised; a refused one sent again as a new push counts.
  ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, kPushes),
                 Payload::Borrow(AsBytes(absl::MakeConstSpan(ones)))));
  EXPECT_EQ(Read(item).second, static_cast<uint64_t>(ok));
  ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, kPushes + 1),
                 Payload::Borrow(AsBytes(absl::MakeConstSpan(ones)))));
  EXPECT_EQ(Read(item).second, static_cast<uint64_t>(ok) + 1);
}

TEST_P(ShardRunsTest, AspSequencesFromTheWireAreChecked) {
  const hetps::v1::PartitionItem item = DeclareAspPartition("sequenced");
  std::vector<float> ones(16, 1.0f);
  auto push = [&](uint64_t sequence) {
    return Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, sequence),
                Payload::Borrow(AsBytes(absl::MakeConstSpan(ones))))
        .status();
  };
  EXPECT_EQ(push(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push(~uint64_t{0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push((uint64_t{1} << 32) + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(item), std::make_pair(0.0f, uint64_t{0}));
  // The forged numbers did not move the window: the worker's real pushes are applied.
  ASSERT_OK(push(1));
  ASSERT_OK(push(2));
  EXPECT_EQ(Read(item), std::make_pair(-2.0f, uint64_t{2}));
  // A new run of the worker counts from 1 again, and is not taken for a retry.
  ASSERT_OK(Call(hetps::v1::METHOD_HELLO, Hello(0, 4242)));
  hetps::v1::PushRequest next_run = Push({item}, 0, 0, 1);
  next_run.set_incarnation(4242);
  ASSERT_OK(
      Call(hetps::v1::METHOD_PUSH, next_run, Payload::Borrow(AsBytes(absl::MakeConstSpan(ones)))));
  EXPECT_EQ(Read(item), std::make_pair(-3.0f, uint64_t{3}));
}

// Requests that name another run of the shard's state (a worker that knew the shard before it
// restarted empty) get DATA_LOSS from every method that touches state, and change nothing; the
// run the hello reports, or none (0), is served.
TEST_P(ShardRunsTest, RequestsForAnotherRunOfTheShardsStateGetDataLoss) {
  absl::StatusOr<transport::Response> hello = Call(hetps::v1::METHOD_HELLO, Hello(0, RunOf(0)));
  ASSERT_TRUE(hello.ok()) << hello.status();
  hetps::v1::HelloResponse answer;
  ASSERT_TRUE(answer.ParseFromString(hello->header));
  const uint64_t current = answer.shard_incarnation();
  ASSERT_NE(current, 0u);
  const uint64_t earlier = current ^ 0x5a5a;
  const uint32_t p = mine_[0];

  auto expect_data_loss = [&](const char* what, uint32_t method, auto header, Payload payload) {
    header.set_shard_incarnation(earlier);
    absl::Status status = Call(method, header, std::move(payload)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << what << ": " << status;
    EXPECT_NE(status.message().find("restarted without its state"), absl::string_view::npos)
        << what << ": " << status;
  };
  expect_data_loss("declare", hetps::v1::METHOD_DECLARE, DeclareOf(Decl()), Payload());
  expect_data_loss("push", hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}),
                   Gradient(PartitionBytes(p)));
  expect_data_loss("push-pull", hetps::v1::METHOD_PUSH_PULL, Push({Item(p, PartitionBytes(p))}),
                   Gradient(PartitionBytes(p)));
  hetps::v1::PullRequest pull;
  *pull.add_items() = Item(p, 0);
  expect_data_loss("pull", hetps::v1::METHOD_PULL, pull, Payload());
  hetps::v1::BarrierRequest barrier;
  barrier.set_generation(1);
  barrier.set_incarnation(RunOf(0));
  expect_data_loss("barrier", hetps::v1::METHOD_BARRIER, barrier, Payload());
  hetps::v1::SetOptimizerRequest change;
  change.set_tensor_key(key_);
  change.set_from_version(1);
  (*change.mutable_params())["lr"] = 0.5;
  expect_data_loss("set optimizer", hetps::v1::METHOD_SET_OPTIMIZER, change, Payload());
  hetps::v1::ReadStateRequest read;
  read.set_tensor_key(key_);
  read.set_partition(p);
  expect_data_loss("read state", hetps::v1::METHOD_READ_STATE, read, Payload());
  hetps::v1::WriteStateRequest write;
  write.set_tensor_key(key_);
  write.set_partition(p);
  write.set_version(7);
  expect_data_loss("write state", hetps::v1::METHOD_WRITE_STATE, write,
                   Gradient(PartitionBytes(p)));
  ExpectUnchanged();

  pull.set_shard_incarnation(current);
  EXPECT_OK(Call(hetps::v1::METHOD_PULL, pull));
  hetps::v1::DeclareRequest declare = DeclareOf(Decl());
  declare.set_shard_incarnation(current);
  EXPECT_OK(Call(hetps::v1::METHOD_DECLARE, declare));
}

// A tensor marked lost (a worker found this shard's partitions new while another shard's had
// steps applied) answers DATA_LOSS to everyone from then on, and its partitions stay untouched.
TEST_P(ShardRunsTest, ATensorMarkedLostAnswersDataLossToEveryone) {
  const uint32_t p = mine_[0];
  hetps::v1::DeclareRequest mark = DeclareOf(Decl());
  mark.set_mark_lost(true);
  absl::Status marked = Call(hetps::v1::METHOD_DECLARE, mark).status();
  EXPECT_EQ(marked.code(), absl::StatusCode::kDataLoss) << marked;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    absl::Status declared = Call(hetps::v1::METHOD_DECLARE, DeclareOf(Decl())).status();
    EXPECT_EQ(declared.code(), absl::StatusCode::kDataLoss) << declared;
    EXPECT_NE(declared.message().find("tensor 't' lost its state on shard 0"),
              absl::string_view::npos)
        << declared;
    absl::Status pushed = Call(hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}, 0, rank),
                               Gradient(PartitionBytes(p)))
                              .status();
    EXPECT_EQ(pushed.code(), absl::StatusCode::kDataLoss) << pushed;
  }
  hetps::v1::PullRequest pull;
  *pull.add_items() = Item(p, 0);
  EXPECT_EQ(Call(hetps::v1::METHOD_PULL, pull).status().code(), absl::StatusCode::kDataLoss);
  hetps::v1::ReadStateRequest read;
  read.set_tensor_key(key_);
  read.set_partition(p);
  EXPECT_EQ(Call(hetps::v1::METHOD_READ_STATE, read).status().code(), absl::StatusCode::kDataLoss);
}

INSTANTIATE_TEST_SUITE_P(Transports, ShardRunsTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
