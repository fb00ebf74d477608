#include "server/tensor_table.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

std::unique_ptr<Tensor> MakeTensor(const std::string& name, uint64_t elements) {
  hetps::v1::TensorDecl decl;
  decl.set_name(name);
  decl.set_key(TensorKeyFromName(name));
  decl.set_num_elements(elements);
  absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(elements, 16);
  EXPECT_OK(layout);
  return std::make_unique<Tensor>(decl, *layout);
}

TEST(TensorTableTest, FirstInsertWinsAndLookupsFindIt) {
  TensorTable table;
  EXPECT_EQ(table.Find(TensorKeyFromName("a")), nullptr);
  auto [first, inserted] = table.Insert(MakeTensor("a", 10));
  EXPECT_TRUE(inserted);
  auto [second, again] = table.Insert(MakeTensor("a", 20));
  EXPECT_FALSE(again);
  EXPECT_EQ(second, first);
  EXPECT_EQ(table.Find(TensorKeyFromName("a")), first);
  EXPECT_EQ(table.Find(TensorKeyFromName("a"))->decl.num_elements(), 10u);
}

TEST(TensorTableTest, CachedLookupsOfOneTableDoNotLeakIntoAnother) {
  // The per-thread cache is keyed by table: a second table must not see the first's tensors.
  TensorTable one, two;
  one.Insert(MakeTensor("shared-name", 10));
  ASSERT_NE(one.Find(TensorKeyFromName("shared-name")), nullptr);
  EXPECT_EQ(two.Find(TensorKeyFromName("shared-name")), nullptr);
  two.Insert(MakeTensor("shared-name", 30));
  EXPECT_EQ(two.Find(TensorKeyFromName("shared-name"))->decl.num_elements(), 30u);
  EXPECT_EQ(one.Find(TensorKeyFromName("shared-name"))->decl.num_elements(), 10u);
}

TEST(TensorTableTest, ConcurrentInsertsAndLookups) {
  TensorTable table;
  std::atomic<int> found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string name = absl::StrCat("t", i);
        table.Insert(MakeTensor(name, 16 + t));
        if (table.Find(TensorKeyFromName(name)) != nullptr) ++found;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(found.load(), 800);
  int count = 0;
  table.ForEach([&](const Tensor&) { ++count; });
  EXPECT_EQ(count, 200);
}

TEST(TensorTableTest, ARemovedTensorIsMissedEvenByAThreadThatCachedItAndLivesWhileHeld) {
  TensorTable table;
  const uint64_t key = TensorKeyFromName("w");
  table.Insert(MakeTensor("w", 10));
  TensorRef held = table.Find(key);  // cached by this thread from now on
  ASSERT_NE(held, nullptr);
  std::weak_ptr<const Tensor> watch = held;
  std::shared_ptr<Tensor> removed = table.Remove(key);
  ASSERT_EQ(removed, held);
  EXPECT_TRUE(held->dropped.load());
  EXPECT_EQ(table.Find(key), nullptr);
  EXPECT_EQ(table.Remove(key), nullptr);
  EXPECT_TRUE(table.Keys().empty());
  // A holder keeps it (a request in flight); the last one frees it.
  removed.reset();
  EXPECT_EQ(held->decl.num_elements(), 10u);
  held.reset();
  EXPECT_TRUE(watch.expired());
  // The key is free again, and the cache does not hand out the old tensor.
  table.Insert(MakeTensor("w", 20));
  ASSERT_NE(table.Find(key), nullptr);
  EXPECT_EQ(table.Find(key)->decl.num_elements(), 20u);
}

TEST(TensorTableTest, LookupsRacingWithRemovalsSeeWholeTensorsOnly) {
  TensorTable table;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (int i = 0; i < 8; ++i) {
          TensorRef tensor = table.Find(TensorKeyFromName(absl::StrCat("k", i)));
          if (tensor != nullptr) {
            EXPECT_EQ(tensor->decl.name(), absl::StrCat("k", i));
          }
        }
      }
    });
  }
  for (int round = 0; round < 2000; ++round) {
    const std::string name = absl::StrCat("k", round % 8);
    table.Insert(MakeTensor(name, 16));
    table.Remove(TensorKeyFromName(name));
  }
  stop.store(true);
  for (auto& reader : readers) reader.join();
}

}  // namespace
}  // namespace hetps::server
