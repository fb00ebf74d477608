#include "common/buffer_pool.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hetps {
namespace {

TEST(BufferPoolTest, AReleasedBufferIsHandedOutAgainForItsSize) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(1 << 20);
  std::shared_ptr<uint8_t[]> first = pool->Take(4096);
  uint8_t* const memory = first.get();
  std::memset(memory, 7, 4096);
  std::shared_ptr<uint8_t[]> copy = first;
  first.reset();
  EXPECT_EQ(pool->kept_bytes(), 0u);  // still owned
  copy.reset();
  EXPECT_EQ(pool->kept_bytes(), 4096u);
  std::shared_ptr<uint8_t[]> other_size = pool->Take(8192);
  EXPECT_NE(other_size.get(), memory);
  std::shared_ptr<uint8_t[]> again = pool->Take(4096);
  EXPECT_EQ(again.get(), memory);
  EXPECT_EQ(pool->kept_bytes(), 0u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsLimit) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(8192);
  std::vector<std::shared_ptr<uint8_t[]>> buffers;
  for (int i = 0; i < 3; ++i) buffers.push_back(pool->Take(4096));
  buffers.clear();
  EXPECT_EQ(pool->kept_bytes(), 8192u);  // the third was freed
  std::shared_ptr<uint8_t[]> a = pool->Take(4096), b = pool->Take(4096);
  EXPECT_EQ(pool->kept_bytes(), 0u);
}

TEST(BufferPoolTest, ABufferMayOutliveEveryOtherOwnerOfThePool) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(1 << 20);
  std::shared_ptr<uint8_t[]> buffer = pool->Take(4096);
  pool.reset();
  std::memset(buffer.get(), 1, 4096);
  buffer.reset();  // back into the pool it kept alive, which then goes
}

TEST(BufferPoolTest, ThreadsTakeAndReleaseTogether) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create(1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 1000; ++i) {
        std::shared_ptr<uint8_t[]> buffer = pool->Take(1024 * (1 + i % 3));
        buffer[0] = static_cast<uint8_t>(t);
        buffer[1023] = static_cast<uint8_t>(i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(pool->kept_bytes(), size_t{4} * (1024 + 2048 + 3072));
  EXPECT_GT(pool->kept_bytes(), 0u);
}

}  // namespace
}  // namespace hetps
