#include "kvdepot/base/range_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

namespace kvdepot {
namespace {

std::unique_ptr<RangeAllocator> Make(std::uint64_t capacity) {
  auto r = RangeAllocator::Create(capacity, 4096);
  EXPECT_TRUE(r.ok());
  return std::move(*r);
}

TEST(RangeAllocatorTest, RejectsBadGeometry) {
  EXPECT_EQ(RangeAllocator::Create(4096, 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RangeAllocator::Create(4096, 3000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RangeAllocator::Create(0, 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RangeAllocator::Create(5000, 4096).status().code(), StatusCode::kInvalidArgument);
}

TEST(RangeAllocatorTest, CapacityHoldsAndMerges) {
  auto a = Make(16 * 4096);
  std::vector<std::uint64_t> got;
  for (int i = 0; i < 16; ++i) {
    auto off = a->Allocate(1);
    ASSERT_TRUE(off.has_value());
    EXPECT_EQ(*off % 4096, 0u);
    got.push_back(*off);
  }
  EXPECT_FALSE(a->Allocate(1).has_value());
  EXPECT_EQ(a->stats().used, 16u * 4096);
  EXPECT_EQ(a->stats().failures, 1u);
  // Free every other one: 8 fragments, none of 2 pages.
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(a->Free(got[i]).ok());
  EXPECT_FALSE(a->Allocate(2 * 4096).has_value());
  for (int i = 1; i < 16; i += 2) ASSERT_TRUE(a->Free(got[i]).ok());
  const RangeAllocatorStats s = a->stats();
  EXPECT_EQ(s.used, 0u);
  EXPECT_EQ(s.free_ranges, 1u);
  EXPECT_EQ(s.largest_free, 16u * 4096);
  EXPECT_TRUE(a->Allocate(16 * 4096).has_value());
}

TEST(RangeAllocatorTest, FreeOfUnknownOffsetIsAnError) {
  auto a = Make(1 << 20);
  auto off = *a->Allocate(10000);
  EXPECT_EQ(a->SizeOf(off), 12288u);
  EXPECT_EQ(a->Free(off + 4096).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(a->Free(off).ok());
  EXPECT_EQ(a->Free(off).code(), StatusCode::kInvalidArgument);
}

TEST(RangeAllocatorTest, RandomChurnNeverOverlapsAndReturnsToEmpty) {
  constexpr std::uint64_t kCap = 256 * 4096;
  auto a = Make(kCap);
  std::mt19937_64 rng(7);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // offset, size
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 60)) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(a->Free(live[i].first).ok());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const std::uint64_t bytes = 1 + rng() % (16 * 4096);
      if (auto off = a->Allocate(bytes)) {
        const std::uint64_t size = a->RoundUp(bytes);
        ASSERT_LE(*off + size, kCap);
        for (const auto& [o, s] : live) ASSERT_TRUE(*off + size <= o || o + s <= *off);
        live.emplace_back(*off, size);
      }
    }
    std::uint64_t sum = 0;
    for (const auto& l : live) sum += l.second;
    ASSERT_EQ(a->stats().used, sum);
  }
  for (const auto& l : live) ASSERT_TRUE(a->Free(l.first).ok());
  EXPECT_EQ(a->stats().free_ranges, 1u);
}

TEST(RangeAllocatorTest, ConcurrentUseStaysConsistent) {
  auto a = Make(1024 * 4096);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      std::vector<std::uint64_t> mine;
      for (int i = 0; i < 5000; ++i) {
        if (!mine.empty() && rng() % 2 == 0) {
          EXPECT_TRUE(a->Free(mine.back()).ok());
          mine.pop_back();
        } else if (auto off = a->Allocate(1 + rng() % 32768)) {
          mine.push_back(*off);
        }
      }
      for (auto off : mine) EXPECT_TRUE(a->Free(off).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a->stats().used, 0u);
  EXPECT_EQ(a->stats().free_ranges, 1u);
}

}  // namespace
}  // namespace kvdepot
