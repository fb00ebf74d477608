#include "server/partition.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/half.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "optimizer/gradient_sum.h"
#include "optimizer/registry.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using transport::AsBytes;
using transport::Payload;

constexpr uint64_t kRun = 1;  // the pushing workers' incarnation

class PartitionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Partition> Make(hetps::v1::SyncMode mode, uint32_t workers, size_t n,
                                  float initial = 0, const std::string& rule = "sgd",
                                  const OptimizerParams& params = {{"lr", 0.1}},
                                  ThreadPool* pool = nullptr) {
    auto optimizer = CreateOptimizer(rule, params);
    EXPECT_OK(optimizer);
    optimizer_ = *std::move(optimizer);
    Partition::Config config;
    config.range = {0, n};
    config.sync_mode = mode;
    config.num_workers = workers;
    config.optimizer = optimizer_;
    config.kernel_pool = pool;
    absl::StatusOr<AlignedBuffer> weights = AlignedBuffer::Allocate(n);
    EXPECT_OK(weights);
    std::fill(weights->data(), weights->data() + n, initial);
    auto partition = Partition::Create(config, *std::move(weights));
    EXPECT_OK(partition);
    return *std::move(partition);
  }

  // The weights, as a pull gets them.
  static std::vector<float> Read(Partition& partition) {
    return Floats(partition.Snapshot(FloatFormat::kFp32));
  }
  static std::vector<float> Floats(const WeightsSnapshot& snapshot) {
    std::vector<float> values(snapshot.bytes.size() / sizeof(float));
    snapshot.bytes.CopyTo(0, transport::AsWritableBytes(absl::MakeSpan(values)));
    return values;
  }

  std::shared_ptr<const Optimizer> optimizer_;
};

// A payload split into odd-sized, unaligned pieces, as received network buffers can be; like
// them it owns its bytes (a partition may keep a gradient until its step is applied).
template <typename T>
Payload Fragmented(const std::vector<T>& values) {
  const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  auto storage = std::make_shared<std::vector<std::string>>();
  for (size_t offset = 0; offset < bytes.size(); offset += 7) {
    std::string piece(1, ' ');  // leading byte: misaligned
    piece.append(bytes, offset, 7);
    storage->push_back(std::move(piece));
  }
  std::vector<transport::ByteSpan> segments;
  for (const std::string& piece : *storage) {
    segments.emplace_back(reinterpret_cast<const uint8_t*>(piece.data()) + 1, piece.size() - 1);
  }
  return Payload::FromSegments(segments, storage);
}

TEST_F(PartitionTest, BspResultDoesNotDependOnArrivalOrder) {
  const uint32_t workers = 4;
  const size_t n = 257;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-1e7f, 1e7f);  // large spread: order matters in fp
  std::vector<std::vector<float>> grads(workers, std::vector<float>(n));
  for (auto& g : grads) {
    for (float& v : g) v = wide(rng);
  }
  std::vector<uint32_t> order(workers);
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> first_result;
  int permutations = 0;
  do {
    auto partition = Make(hetps::v1::SYNC_MODE_BSP, workers, n);
    for (uint32_t rank : order) {
      ASSERT_OK(partition->Push({rank, kRun, 0, 0}, FloatFormat::kFp32, Fragmented(grads[rank])));
      EXPECT_EQ(partition->version(), rank == order.back() ? 1u : 0u);
    }
    std::vector<float> result = Read(*partition);
    if (first_result.empty()) {
      first_result = result;
      // Rank-order sum, then SGD: exactly the single-process computation.
      for (size_t i = 0; i < n; ++i) {
        float sum = grads[0][i];
        for (uint32_t r = 1; r < workers; ++r) sum += grads[r][i];
        ASSERT_EQ(result[i], 0.0f - 0.1f * sum) << i;
      }
    } else {
      ASSERT_EQ(0, std::memcmp(result.data(), first_result.data(), n * sizeof(float)));
    }
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 24);
}

TEST_F(PartitionTest, BspRetriesAreRecognised) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 2, 16);
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ASSERT_OK(partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32, payload));
  ASSERT_OK(
      partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32, payload));  // a retry: not counted twice
  EXPECT_EQ(partition->version(), 0u);
  ASSERT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 1u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.2f);
  ASSERT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp32,
                            payload));  // late retry of an applied step
  EXPECT_EQ(partition->version(), 1u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.2f);
}

TEST_F(PartitionTest, BspStepsAheadWaitForTheirTurn) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 2, 16);
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  // Worker 0 runs ahead by a step; nothing is applied until step 0 is complete.
  ASSERT_OK(partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({0, kRun, 1, 0}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({1, kRun, 1, 0}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 0u);
  ASSERT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 2u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.4f);
}

TEST_F(PartitionTest, AspAppliesEachPushOnceBySequence) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 2, 16);
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ASSERT_OK(partition->Push({0, kRun, 0, 10}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 1u);
  ASSERT_OK(partition->Push({0, kRun, 0, 10}, FloatFormat::kFp32, payload));  // retry
  EXPECT_EQ(partition->version(), 1u);
  ASSERT_OK(partition->Push({1, kRun, 0, 3}, FloatFormat::kFp32,
                            payload));  // another worker's own sequence
  ASSERT_OK(partition->Push({0, kRun, 1, 11}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 3u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.3f);
}

TEST_F(PartitionTest, AspPushesOvertakingEachOtherAreAllApplied) {
  // Two threads of one worker push at once; the later sequence can arrive first.
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 16);
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ASSERT_OK(partition->Push({0, kRun, 0, 12}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({0, kRun, 0, 11}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({0, kRun, 0, 11}, FloatFormat::kFp32, payload));  // and a retry of it
  EXPECT_EQ(partition->version(), 2u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.2f);
}

TEST_F(PartitionTest, AspPushTooOldToJudgeIsRefusedNotAcknowledged) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 16, 0, "sgd", {{"lr", 1}});
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ASSERT_OK(partition->Push({0, kRun, 0, 100}, FloatFormat::kFp32, payload));
  absl::Status old = partition->Push({0, kRun, 0, 36}, FloatFormat::kFp32, payload).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted) << old;
  EXPECT_NE(old.message().find("too old"), absl::string_view::npos) << old;
  EXPECT_EQ(partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32, payload).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      partition->Push({0, kRun, 0, ~uint64_t{0}}, FloatFormat::kFp32, payload).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(partition->version(), 1u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -1.0f);
  // The oldest still inside the window is applied.
  ASSERT_OK(partition->Push({0, kRun, 0, 37}, FloatFormat::kFp32, payload));
  EXPECT_EQ(partition->version(), 2u);
}

TEST_F(PartitionTest, AspNewRunOfAWorkerIsNotTakenForARetry) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 16, 0, "sgd", {{"lr", 1}});
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ASSERT_OK(partition->Push({0, kRun, 0, 1}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({0, kRun, 0, 500}, FloatFormat::kFp32, payload));
  // The worker restarts and numbers its pushes from 1 again.
  ASSERT_OK(partition->Push({0, kRun + 1, 0, 1}, FloatFormat::kFp32, payload));
  ASSERT_OK(partition->Push({0, kRun + 1, 0, 1}, FloatFormat::kFp32, payload));  // retry
  EXPECT_EQ(partition->version(), 3u);
}

TEST_F(PartitionTest, BspStepAppliedBeforeARunPushedItIsRefused) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 2, 16);
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_OK(partition->Push({rank, kRun, 0, 0}, FloatFormat::kFp32, payload));
  }
  ASSERT_EQ(partition->version(), 1u);
  // Another run of worker 1 (the job started again) pushes step 0: not a retry.
  absl::Status again = partition->Push({1, kRun + 1, 0, 0}, FloatFormat::kFp32, payload).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("earlier run"), absl::string_view::npos) << again;
  EXPECT_EQ(partition->version(), 1u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -0.2f);
  // The first run's retry is still recognised.
  EXPECT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp32, payload));
}

TEST_F(PartitionTest, BspNewRunReplacesTheGradientItsPredecessorLeft) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 2, 16, 0, "sgd", {{"lr", 1}});
  std::vector<float> stale(16, 100.0f), fresh(16, 1.0f);
  ASSERT_OK(partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(stale)))));
  // Worker 0 crashed before the step completed; its next run pushes the same step.
  ASSERT_OK(partition->Push({0, kRun + 1, 0, 0}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(fresh)))));
  EXPECT_EQ(partition->version(), 0u);
  ASSERT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(fresh)))));
  EXPECT_EQ(partition->version(), 1u);
  EXPECT_FLOAT_EQ(Read(*partition)[0], -2.0f);
}

TEST_F(PartitionTest, SnapshotIsNotChangedByLaterUpdates) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 16, 5.0f);
  WeightsSnapshot before = partition->Snapshot(FloatFormat::kFp32);
  std::vector<float> g(16, 10.0f);
  ASSERT_OK(partition->Push({0, kRun, 0, 1}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(g)))));
  EXPECT_EQ(before.version, 0u);
  EXPECT_EQ(Floats(before)[0], 5.0f);  // copy-on-write kept the sent buffer intact
  EXPECT_EQ(Read(*partition)[0], 4.0f);
}

TEST_F(PartitionTest, SixteenBitGradientsAreWidenedExactly) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 2, 64, 0, "sum", {});
  std::vector<uint16_t> bf16(64), fp16(64);
  std::vector<float> expected(64);
  for (size_t i = 0; i < 64; ++i) {
    const float a = 0.1f * static_cast<float>(i) - 3.0f, b = 1.0f / (1.0f + i);
    bf16[i] = Fp32ToBf16(a);
    fp16[i] = Fp32ToFp16(b);
    expected[i] = Bf16ToFp32(bf16[i]) + Fp16ToFp32(fp16[i]);
  }
  ASSERT_OK(partition->Push({0, kRun, 0, 0}, FloatFormat::kBf16,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(bf16)))));
  // fp16 arriving in unaligned fragments
  ASSERT_OK(partition->Push({1, kRun, 0, 0}, FloatFormat::kFp16, Fragmented(fp16)));
  EXPECT_EQ(Read(*partition), expected);
}

TEST_F(PartitionTest, SixteenBitPullsAreConvertedOncePerVersion) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 32, 1.0f / 3.0f);
  WeightsSnapshot first = partition->Snapshot(FloatFormat::kBf16);
  WeightsSnapshot again = partition->Snapshot(FloatFormat::kBf16);
  ASSERT_EQ(first.bytes.size(), 64u);
  EXPECT_EQ(first.bytes.segments()[0].data(), again.bytes.segments()[0].data());  // shared
  uint16_t value;
  first.bytes.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&value), 2));
  EXPECT_EQ(value, Fp32ToBf16(1.0f / 3.0f));
  std::vector<float> g(32, 1.0f);
  ASSERT_OK(partition->Push({0, kRun, 0, 1}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(g)))));
  WeightsSnapshot later = partition->Snapshot(FloatFormat::kBf16);
  EXPECT_EQ(later.version, 1u);
  later.bytes.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&value), 2));
  EXPECT_EQ(value, Fp32ToBf16(1.0f / 3.0f - 0.1f));
  first.bytes.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&value), 2));
  EXPECT_EQ(value, Fp32ToBf16(1.0f / 3.0f));  // the earlier snapshot is untouched
}

// 16-bit pushes are widened block by block as the rule runs, and the 16-bit copy pulls take is
// written in the same pass: bit for bit what widening first and narrowing after gives, over many
// blocks, a piece split across fragments, and a range spread over the kernel pool.
TEST_F(PartitionTest, SixteenBitStepsAcrossBlocksEqualWideningFirst) {
  const size_t n = Partition::kParallelElements + 3 * kGradientBlock + 123;
  ThreadPool pool(2, "test-kernels");
  const OptimizerParams adam = {{"lr", 0.01}};
  auto fused = Make(hetps::v1::SYNC_MODE_BSP, 2, n, 0.5f, "adam", adam, &pool);
  auto reference = Make(hetps::v1::SYNC_MODE_BSP, 2, n, 0.5f, "adam", adam);
  std::vector<uint16_t> bf16(n);
  std::vector<float> widened(n);
  for (uint64_t step = 0; step < 2; ++step) {
    // A 16-bit pull before each step: the partition keeps a bf16 copy from then on.
    fused->Snapshot(FloatFormat::kBf16);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      for (size_t i = 0; i < n; ++i) {
        bf16[i] = Fp32ToBf16(std::sin(static_cast<float>(i * (rank + 1) + step)));
        widened[i] = Bf16ToFp32(bf16[i]);
      }
      Payload wire =
          rank == 0 ? Payload::Copy(AsBytes(absl::MakeConstSpan(bf16))) : Fragmented(bf16);
      ASSERT_OK(fused->Push({rank, kRun, step, 0}, FloatFormat::kBf16, std::move(wire)));
      ASSERT_OK(reference->Push({rank, kRun, step, 0}, FloatFormat::kFp32,
                                Payload::Copy(AsBytes(absl::MakeConstSpan(widened)))));
    }
  }
  const std::vector<float> got = Read(*fused), want = Read(*reference);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)));
  EXPECT_NE(got[n - 1], 0.5f);
  WeightsSnapshot narrow = fused->Snapshot(FloatFormat::kBf16);
  EXPECT_EQ(narrow.version, 2u);
  std::vector<uint16_t> pulled(n), expected(n);
  narrow.bytes.CopyTo(0, transport::AsWritableBytes(absl::MakeSpan(pulled)));
  for (size_t i = 0; i < n; ++i) expected[i] = Fp32ToBf16(want[i]);
  EXPECT_EQ(pulled, expected);
}

// The 16-bit copy is rewritten in place only when no pull still sends it.
TEST_F(PartitionTest, SixteenBitCopyBeingSentIsNotOverwritten) {
  auto partition = Make(hetps::v1::SYNC_MODE_ASP, 1, 32, 1.0f);
  std::vector<float> g(32, 1.0f);
  Payload gradient = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  auto first_value = [](const WeightsSnapshot& snapshot) {
    uint16_t value;
    snapshot.bytes.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&value), 2));
    return Bf16ToFp32(value);
  };
  WeightsSnapshot sending = partition->Snapshot(FloatFormat::kBf16);
  ASSERT_OK(partition->Push({0, kRun, 0, 1}, FloatFormat::kFp32, gradient));
  EXPECT_FLOAT_EQ(first_value(sending), 1.0f);  // still being sent: untouched
  WeightsSnapshot next = partition->Snapshot(FloatFormat::kBf16);
  EXPECT_NE(next.bytes.segments()[0].data(), sending.bytes.segments()[0].data());
  EXPECT_FLOAT_EQ(first_value(next), 0.8984375f);  // bf16(0.9)
  const uint8_t* sent_from = next.bytes.segments()[0].data();
  sending = WeightsSnapshot();
  next = WeightsSnapshot();  // both sent: the next step writes its copy into the same memory
  ASSERT_OK(partition->Push({0, kRun, 0, 2}, FloatFormat::kFp32, gradient));
  WeightsSnapshot last = partition->Snapshot(FloatFormat::kBf16);
  EXPECT_EQ(last.version, 2u);
  EXPECT_EQ(last.bytes.segments()[0].data(), sent_from);
  EXPECT_FLOAT_EQ(first_value(last), 0.80078125f);  // bf16(0.8)
}

TEST_F(PartitionTest, RescheduledHyperparametersApplyFromTheirVersion) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 1, 16, 0, "sgd", {{"lr", 1.0}});
  std::vector<float> g(16, 1.0f);
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  std::shared_ptr<const Optimizer> slower = *CreateOptimizer("sgd", {{"lr", 0.25}});
  ASSERT_OK(partition->Reschedule(2, slower));
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_OK(partition->Push({0, kRun, step, 0}, FloatFormat::kFp32, payload));
  }
  EXPECT_FLOAT_EQ(Read(*partition)[0], -1 - 1 - 0.25f - 0.25f);
  EXPECT_EQ(partition->Reschedule(3, slower).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_OK(partition->Reschedule(4, slower));
}

TEST_F(PartitionTest, LargeUpdatesSpreadOverThePoolGiveTheSameBits) {
  const size_t n = Partition::kParallelElements + 1000;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(i));
  Payload payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(g)));
  ThreadPool pool(3, "test-kernels");
  auto spread = Make(hetps::v1::SYNC_MODE_ASP, 1, n, 0.5f, "adam", {{"lr", 0.01}}, &pool);
  auto single = Make(hetps::v1::SYNC_MODE_ASP, 1, n, 0.5f, "adam", {{"lr", 0.01}});
  for (uint64_t sequence = 1; sequence <= 3; ++sequence) {
    ASSERT_OK(spread->Push({0, kRun, 0, sequence}, FloatFormat::kFp32, payload));
    ASSERT_OK(single->Push({0, kRun, 0, sequence}, FloatFormat::kFp32, payload));
  }
  const std::vector<float> a = Read(*spread), b = Read(*single);
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
  EXPECT_NE(a[12345], 0.5f);
}

TEST_F(PartitionTest, PullWaitsForTheVersion) {
  auto partition = Make(hetps::v1::SYNC_MODE_BSP, 1, 16);
  absl::Notification replied;
  absl::StatusOr<transport::Response> result;
  hetps::v1::PartitionItem item;
  auto request = std::make_shared<PendingRequest>(
      std::vector<hetps::v1::PartitionItem>{item}, true,
      [&](absl::StatusOr<transport::Response> r) {
        result = std::move(r);
        replied.Notify();
      },
      std::make_shared<ShardMetrics>());
  partition->Pull(1, FloatFormat::kFp32, request, 0);
  EXPECT_FALSE(replied.HasBeenNotified());
  std::vector<float> g(16, 1.0f);
  ASSERT_OK(partition->Push({0, kRun, 0, 0}, FloatFormat::kFp32,
                            Payload::Borrow(AsBytes(absl::MakeConstSpan(g)))));
  ASSERT_TRUE(replied.HasBeenNotified());
  ASSERT_OK(result);
  hetps::v1::PullResponse response;
  ASSERT_TRUE(response.ParseFromString(result->header));
  EXPECT_EQ(response.items(0).version(), 1u);
  EXPECT_EQ(result->payload.size(), 16 * sizeof(float));
}

}  // namespace
}  // namespace hetps::server
