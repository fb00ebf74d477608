#include "server/tensor_table.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"

namespace hetps::server {
namespace {

std::unique_ptr<Tensor> MakeTensor(const std::string& name, uint64_t elements) {
  hetps::v1::TensorDecl decl;
  decl.set_name(name);
  decl.set_key(TensorKeyFromName(name));
  decl.set_num_elements(elements);
  absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(elements, 16);
  EXPECT_TRUE(layout.ok());
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

}  // namespace
}  // namespace hetps::server
