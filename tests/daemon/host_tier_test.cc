#include "kvdepot/daemon/host_tier.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace kvdepot::daemon {
namespace {

void Put(HostTier& tier, const std::string& key, std::size_t size, std::uint8_t fill = 7) {
  auto v = tier.Allocate(key, size);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::memset((*v)->mutable_bytes().data(), fill, size);
  tier.Insert(key, *v);
}

TEST(HostTierTest, PutGetEraseAndStats) {
  HostTier tier(HostTierOptions::With(1 << 20, EvictionPolicy::kSieve, 4));
  Put(tier, "a", 100, 1);
  ValueRef a = tier.Get("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->bytes().size(), 100u);
  EXPECT_EQ(a->bytes()[99], std::byte{1});
  EXPECT_EQ(tier.Get("b"), nullptr);
  EXPECT_TRUE(tier.Contains("a"));
  const HostTierStats st = tier.stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.chunks, 1u);
  EXPECT_EQ(st.bytes, HostTier::ChargeFor(1, 100));
  EXPECT_TRUE(tier.Erase("a"));
  EXPECT_FALSE(tier.Erase("a"));
  EXPECT_EQ(tier.stats().bytes, HostTier::ChargeFor(1, 100)) << "a reader still holds the value";
  a.reset();
  EXPECT_EQ(tier.stats().bytes, 0u);
}

TEST(HostTierTest, CapacityHoldsWhileThreeTimesCapacityIsWritten) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kSieve}) {
    const std::uint64_t cap = 64 * HostTier::ChargeFor(4, 1000);
    HostTier tier(HostTierOptions::With(cap, policy, 8));
    for (int i = 0; i < 3 * 64; ++i) {
      Put(tier, "k" + std::to_string(i), 1000);
      ASSERT_LE(tier.stats().bytes, cap);
    }
    EXPECT_GT(tier.stats().evictions, 0u);
    EXPECT_GT(tier.stats().chunks, 30u);
  }
}

TEST(HostTierTest, LruEvictsLeastRecentlyUsed) {
  const std::uint64_t entry = HostTier::ChargeFor(2, 1000);
  HostTier tier(HostTierOptions::With(3 * entry, EvictionPolicy::kLru, 1));
  Put(tier, "k1", 1000);
  Put(tier, "k2", 1000);
  Put(tier, "k3", 1000);
  ASSERT_NE(tier.Get("k1"), nullptr);  // k2 is now the least recently used
  Put(tier, "k4", 1000);
  EXPECT_TRUE(tier.Contains("k1"));
  EXPECT_FALSE(tier.Contains("k2"));
  EXPECT_TRUE(tier.Contains("k3"));
  EXPECT_TRUE(tier.Contains("k4"));
}

TEST(HostTierTest, SieveKeepsVisitedEntries) {
  const std::uint64_t entry = HostTier::ChargeFor(2, 1000);
  HostTier tier(HostTierOptions::With(3 * entry, EvictionPolicy::kSieve, 1));
  Put(tier, "k1", 1000);
  Put(tier, "k2", 1000);
  Put(tier, "k3", 1000);
  ASSERT_NE(tier.Get("k1"), nullptr);  // visited: survives the hand's first pass
  Put(tier, "k4", 1000);               // evicts k2 (oldest unvisited)
  EXPECT_TRUE(tier.Contains("k1"));
  EXPECT_FALSE(tier.Contains("k2"));
  Put(tier, "k5", 1000);  // the hand moves on: k3 (unvisited) goes
  EXPECT_TRUE(tier.Contains("k1"));
  EXPECT_FALSE(tier.Contains("k3"));
  EXPECT_TRUE(tier.Contains("k4"));
  EXPECT_TRUE(tier.Contains("k5"));
}

TEST(HostTierTest, ValuesInUseAreNeverFreedAndStillCount) {
  const std::uint64_t entry = HostTier::ChargeFor(2, 1000);
  HostTier tier(HostTierOptions::With(2 * entry, EvictionPolicy::kLru, 2));
  Put(tier, "k1", 1000, 0x11);
  Put(tier, "k2", 1000, 0x22);
  ValueRef r1 = tier.Get("k1");
  ValueRef r2 = tier.Get("k2");
  // Both are being "sent": evicting them frees nothing, so a new value cannot fit.
  auto v = tier.Allocate("k3", 1000);
  EXPECT_EQ(v.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r1->bytes()[999], std::byte{0x11}) << "the reader's bytes are intact";
  EXPECT_EQ(r2->bytes()[0], std::byte{0x22});
  EXPECT_LE(tier.stats().bytes, 2 * entry);
  r1.reset();
  r2.reset();
  EXPECT_TRUE(tier.Allocate("k3", 1000).ok());
  EXPECT_EQ(tier.Allocate("huge", 1 << 20).status().code(), StatusCode::kOutOfRange);
}

TEST(HostTierTest, ScanPagesInKeyOrder) {
  HostTier tier(HostTierOptions::With(1 << 20, EvictionPolicy::kSieve, 4));
  for (int i = 0; i < 25; ++i) Put(tier, "ns1/" + std::to_string(100 + i), 10);
  Put(tier, "ns2/x", 10);
  std::string cursor;
  std::vector<std::string> seen;
  for (int page = 0; page < 10; ++page) {
    const protocol::ScanResult r = tier.Scan("ns1/", cursor, 10);
    for (const auto& e : r.entries) {
      seen.push_back(e.key);
      EXPECT_EQ(e.value_bytes, 10u);
      EXPECT_EQ(e.tier, protocol::Tier::kHost);
    }
    if (r.next_cursor.empty()) break;
    cursor = r.next_cursor;
  }
  ASSERT_EQ(seen.size(), 25u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.front(), "ns1/100");
}

TEST(HostTierTest, ConcurrentWritersNeverExceedCapacity) {
  const std::uint64_t cap = 256 * 1024;
  HostTier tier(HostTierOptions::With(cap, EvictionPolicy::kSieve, 16));
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i % 300);
        auto v = tier.Allocate(key, 500 + (i % 7) * 300);
        if (v.ok()) tier.Insert(key, *v);
        if (i % 3 == 0) (void)tier.Get("t0/" + std::to_string(i % 300));
        if (tier.stats().bytes > cap) over = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_LE(tier.stats().bytes, cap);
}

}  // namespace
}  // namespace kvdepot::daemon

namespace kvdepot::daemon {
namespace {

std::string ChunkKeyIn(char ns, int i) {
  std::string key(48, '\0');
  key.replace(0, 16, std::string(16, ns));
  const std::string tag = "c" + std::to_string(1000000 + i);  // 8 bytes: the key stays 48
  key.replace(16, tag.size(), tag);
  return key;
}

TEST(HostTierTest, NamespaceQuotaEvictsOnlyItsOwnEntries) {
  const std::uint64_t entry = HostTier::ChargeFor(48, 1000);
  HostTierOptions o = HostTierOptions::With(100 * entry, EvictionPolicy::kLru, 4);
  o.namespace_quotas[std::string(16, 'A')] = 5 * entry;
  HostTier tier(o);
  for (int i = 0; i < 20; ++i) Put(tier, ChunkKeyIn('B', i), 1000);  // no quota
  for (int i = 0; i < 12; ++i) {
    Put(tier, ChunkKeyIn('A', i), 1000);
    ASSERT_LE(tier.stats().namespaces.at(0).bytes, 5 * entry);
  }
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(tier.Contains(ChunkKeyIn('B', i))) << i;
  int a_present = 0;
  for (int i = 0; i < 12; ++i) a_present += tier.Contains(ChunkKeyIn('A', i));
  EXPECT_EQ(a_present, 5);
  EXPECT_TRUE(tier.Contains(ChunkKeyIn('A', 11))) << "the newest stay";
  EXPECT_EQ(tier.Allocate(ChunkKeyIn('A', 99), 6 * entry).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(KeyNamespace("k1"), "");
}

TEST(HostTierTest, SetCapacityEvictsDownToTheNewCapacity) {
  const std::uint64_t entry = HostTier::ChargeFor(2, 1000);
  HostTier tier(HostTierOptions::With(10 * entry, EvictionPolicy::kLru, 2));
  for (int i = 0; i < 10; ++i) Put(tier, "k" + std::to_string(i), 1000);
  ASSERT_EQ(tier.stats().chunks, 10u);
  ValueRef held = tier.Get("k9");  // in use: evicted from the index, still charged
  auto evicted = tier.SetCapacity(4 * entry);
  ASSERT_TRUE(evicted.ok());
  EXPECT_GE(*evicted, 6u);
  EXPECT_EQ(tier.capacity(), 4 * entry);
  EXPECT_EQ(tier.stats().capacity, 4 * entry);
  EXPECT_LE(tier.stats().bytes, 4 * entry);
  held.reset();
  for (int i = 0; i < 10; ++i) {
    Put(tier, "n" + std::to_string(i), 1000);
    ASSERT_LE(tier.stats().bytes, 4 * entry) << "new allocations respect the new capacity";
  }
  ASSERT_TRUE(tier.SetCapacity(25 * entry).ok());
  for (int i = 0; i < 20; ++i) Put(tier, "m" + std::to_string(i), 1000);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(tier.Contains("m" + std::to_string(i))) << "a raised capacity is usable at once";
  }
  EXPECT_EQ(tier.SetCapacity(0).status().code(), StatusCode::kOutOfRange);
}

TEST(HostTierTest, SetCapacityWhileWritersRunNeverLeavesTheTierAboveIt) {
  const std::uint64_t cap = 256 * 1024;
  HostTier tier(HostTierOptions::With(cap, EvictionPolicy::kSieve, 8));
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&tier, &stop, t] {
      for (int i = 0; !stop.load(); ++i) {
        auto v = tier.Allocate("t" + std::to_string(t) + "-" + std::to_string(i % 500), 2000);
        if (v.ok()) tier.Insert("t" + std::to_string(t) + "-" + std::to_string(i % 500), *v);
        tier.Get("t" + std::to_string(t) + "-" + std::to_string((i * 7) % 500));
      }
    });
  }
  for (int round = 0; round < 50; ++round) {
    ASSERT_TRUE(tier.SetCapacity(round % 2 ? cap : cap / 4).ok());
  }
  ASSERT_TRUE(tier.SetCapacity(cap / 8).ok());
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_TRUE(tier.SetCapacity(cap / 8).ok());  // settles allocations that raced the last call
  EXPECT_LE(tier.stats().bytes, cap / 8);
}

TEST(HostTierTest, SetNamespaceQuotaEvictsWithinTheNamespace) {
  const std::uint64_t entry = HostTier::ChargeFor(48, 1000);
  HostTierOptions o = HostTierOptions::With(100 * entry, EvictionPolicy::kLru, 4);
  o.namespace_quotas[std::string(16, 'A')] = 10 * entry;
  HostTier tier(o);
  for (int i = 0; i < 10; ++i) Put(tier, ChunkKeyIn('A', i), 1000);
  for (int i = 0; i < 10; ++i) Put(tier, ChunkKeyIn('B', i), 1000);
  auto evicted = tier.SetNamespaceQuota(std::string(16, 'A'), 3 * entry);
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(*evicted, 7u);
  EXPECT_EQ(tier.stats().namespaces.at(0).quota, 3 * entry);
  EXPECT_LE(tier.stats().namespaces.at(0).bytes, 3 * entry);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(tier.Contains(ChunkKeyIn('B', i))) << i;
  EXPECT_EQ(tier.SetNamespaceQuota(std::string(16, 'B'), entry).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvdepot::daemon

namespace kvdepot::daemon {
namespace {

std::string Numbered(int i) {
  return "chunk-" + std::to_string(1000 + i);
}

// Which of keys 0..n-1 are in the tier.
std::vector<int> Survivors(const HostTier& tier, int n) {
  std::vector<int> present;
  for (int i = 0; i < n; ++i) {
    if (tier.Contains(Numbered(i))) present.push_back(i);
  }
  return present;
}

std::vector<int> Range(int first, int last) {  // [first, last)
  std::vector<int> r;
  for (int i = first; i < last; ++i) r.push_back(i);
  return r;
}

// Issue 19 §5: 256 distinct values PUT in sequence into a tier that holds 32 of them (the
// issue's 8 MiB chunks, scaled to 64 KiB): the survivors are exactly the newest 32 with any
// shard count and either policy (with no reads, SIEVE is FIFO).
TEST(HostTierTest, SequentialPutsLeaveExactlyTheNewestWithAnyShardCount) {
  constexpr std::size_t kValue = 64 << 10;
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kSieve}) {
    for (std::uint32_t shards : {1u, 4u, 16u, 64u}) {
      HostTier tier(HostTierOptions::With(32 * HostTier::ChargeFor(Numbered(0).size(), kValue),
                                          policy, shards));
      for (int i = 0; i < 256; ++i) Put(tier, Numbered(i), kValue);
      EXPECT_EQ(Survivors(tier, 256), Range(224, 256))
          << EvictionPolicyName(policy) << ", " << shards << " shards";
      EXPECT_EQ(tier.stats().evictions, 224u);
    }
  }
}

TEST(HostTierTest, LruAcrossShardsKeepsWhatWasReadLast) {
  constexpr std::size_t kValue = 4096;
  HostTier tier(HostTierOptions::With(32 * HostTier::ChargeFor(Numbered(0).size(), kValue),
                                      EvictionPolicy::kLru, 16));
  for (int i = 0; i < 32; ++i) Put(tier, Numbered(i), kValue);
  for (int i = 0; i < 8; ++i) ASSERT_NE(tier.Get(Numbered(i)), nullptr);  // now the most recent
  for (int i = 32; i < 56; ++i) Put(tier, Numbered(i), kValue);           // evicts 8..31
  std::vector<int> expected = Range(0, 8);
  for (int i : Range(32, 56)) expected.push_back(i);
  EXPECT_EQ(Survivors(tier, 56), expected);
}

TEST(HostTierTest, SieveAcrossShardsSparesVisitedEntriesForOneSweep) {
  constexpr std::size_t kValue = 4096;
  HostTier tier(HostTierOptions::With(32 * HostTier::ChargeFor(Numbered(0).size(), kValue),
                                      EvictionPolicy::kSieve, 16));
  for (int i = 0; i < 32; ++i) Put(tier, Numbered(i), kValue);
  for (int i = 0; i < 8; ++i) ASSERT_NE(tier.Get(Numbered(i)), nullptr);  // visited
  for (int i = 32; i < 48; ++i) Put(tier, Numbered(i), kValue);  // evicts the 16 oldest unvisited
  std::vector<int> expected = Range(0, 8);
  for (int i : Range(24, 48)) expected.push_back(i);
  EXPECT_EQ(Survivors(tier, 48), expected);
}

TEST(HostTierTest, RefusedVictimsGoBackAndTheNextOldestGoes) {
  constexpr std::size_t kValue = 4096;
  HostTier tier(HostTierOptions::With(8 * HostTier::ChargeFor(Numbered(0).size(), kValue),
                                      EvictionPolicy::kLru, 16));
  tier.SetEvictionListener(
      [](std::string_view key, const ValueRef&) { return key != Numbered(0); });
  for (int i = 0; i < 10; ++i) Put(tier, Numbered(i), kValue);
  // 0 may not leave (its SSD write could not be queued): 1 and 2 went in its place.
  std::vector<int> expected = {0};
  for (int i : Range(3, 10)) expected.push_back(i);
  EXPECT_EQ(Survivors(tier, 10), expected);
}

TEST(HostTierTest, NamespaceQuotaEvictsItsOwnOldestAcrossShards) {
  const std::uint64_t entry = HostTier::ChargeFor(48, 1000);
  HostTierOptions o = HostTierOptions::With(100 * entry, EvictionPolicy::kLru, 16);
  o.namespace_quotas[std::string(16, 'A')] = 5 * entry;
  HostTier tier(o);
  for (int i = 0; i < 20; ++i) Put(tier, ChunkKeyIn('B', i), 1000);
  for (int i = 0; i < 40; ++i) Put(tier, ChunkKeyIn('A', i), 1000);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(tier.Contains(ChunkKeyIn('A', i)), i >= 35) << i;
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(tier.Contains(ChunkKeyIn('B', i))) << i;
  // Global eviction (over capacity) takes the oldest of every namespace alike.
  for (int i = 0; i < 100; ++i) Put(tier, ChunkKeyIn('C', i), 1000);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(tier.Contains(ChunkKeyIn('B', i))) << i;
}

// The global eviction path under concurrency: writers in a quota namespace and outside it,
// readers, erasers and a listener that refuses some victims, with both policies. The capacity
// and the quota hold throughout and the index stays consistent (every key present is readable).
TEST(HostTierTest, GlobalEvictionUnderConcurrentWritersReadersAndErasers) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kSieve}) {
    const std::uint64_t entry = HostTier::ChargeFor(48, 2000);
    HostTierOptions o = HostTierOptions::With(64 * entry, policy, 16);
    o.namespace_quotas[std::string(16, 'A')] = 16 * entry;
    HostTier tier(o);
    std::atomic<int> refusals{0};
    tier.SetEvictionListener([&refusals](std::string_view, const ValueRef&) {
      return refusals.fetch_add(1, std::memory_order_relaxed) % 7 != 0;
    });
    std::atomic<bool> over{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 1500; ++i) {
          const std::string key = ChunkKeyIn(t % 2 == 0 ? 'A' : 'B', (i * 7 + t) % 200);
          if (i % 5 == 4) {
            tier.Erase(key);
          } else if (i % 3 == 0) {
            if (ValueRef v = tier.Get(key)) {
              EXPECT_EQ(v->bytes().size(), 2000u);
            }
          } else if (auto v = tier.Allocate(key, 2000); v.ok()) {
            tier.Insert(key, *v);
          }
          const HostTierStats st = tier.stats();
          if (st.bytes > st.capacity || st.namespaces.at(0).bytes > st.namespaces.at(0).quota) {
            over = true;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_FALSE(over.load()) << EvictionPolicyName(policy);
    EXPECT_GT(tier.stats().evictions, 0u);
    for (int i = 0; i < 200; ++i) {
      for (char ns : {'A', 'B'}) {
        if (tier.Contains(ChunkKeyIn(ns, i))) {
          EXPECT_NE(tier.Get(ChunkKeyIn(ns, i)), nullptr);
        }
      }
    }
  }
}

// Minor page faults taken by the calling thread so far.
long ThreadMinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// Issue 19 §6: values of every size come from the tier's arena, whose pages stay mapped, so a
// steady stream of PUTs (from any thread) takes no page faults. Before, values over glibc's mmap
// threshold were fresh mappings: 1 fault per 4 KiB page, every time.
TEST(HostTierTest, SteadyStatePutsReuseArenaMemoryWithoutPageFaults) {
  for (std::size_t value : {std::size_t{1} << 20, std::size_t{33} << 20}) {
    HostTier tier(HostTierOptions::With(4 * HostTier::ChargeFor(Numbered(0).size(), value),
                                        EvictionPolicy::kLru, 16));
    for (int i = 0; i < 12; ++i) Put(tier, Numbered(i), value);  // touches the arena's pages
    long faults = -1;
    int in_arena = 0;
    std::thread other([&] {  // a thread that did not warm anything up itself
      const long before = ThreadMinorFaults();
      for (int i = 12; i < 36; ++i) {
        auto v = tier.Allocate(Numbered(i), value);
        ASSERT_TRUE(v.ok());
        in_arena += (*v)->in_arena();
        EXPECT_FALSE((*v)->arena_offset()) << "a private arena is never leased";
        std::memset((*v)->mutable_bytes().data(), i, value);
        tier.Insert(Numbered(i), *v);
      }
      faults = ThreadMinorFaults() - before;
    });
    other.join();
    EXPECT_EQ(in_arena, 24);
    // 24 values of `value` bytes would be 24 * value / 4096 faults from fresh memory.
    EXPECT_LT(faults, 64) << value << "-byte values";
    const HostTierStats st = tier.stats();
    EXPECT_EQ(st.arena_fallbacks, 0u);
    EXPECT_FALSE(st.arena_shared);
    EXPECT_GE(st.arena_bytes, st.capacity);
  }
}

// A tight arena (no headroom) fragmented by two 1 MiB values that readers hold: a 2 MiB value
// first evicts up to its own size in entries to free a range, then falls back to heap memory.
TEST(HostTierTest, FragmentedArenaEvictsAtMostOneValueMoreThenUsesTheHeap) {
  constexpr std::size_t kMiB = 1 << 20;
  HostTierOptions o =
      HostTierOptions::With(4 * HostTier::ChargeFor(2, kMiB), EvictionPolicy::kLru, 16);
  o.arena_headroom_bytes = 0;
  {
    HostTier tier(o);
    for (int i = 1; i <= 4; ++i) Put(tier, "k" + std::to_string(i), kMiB);
    ASSERT_TRUE(tier.Erase("k1"));
    ASSERT_TRUE(tier.Erase("k3"));  // free: two 1 MiB holes and the arena's ~12 KiB tail
    auto v = tier.Allocate("k5", 2 * kMiB);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE((*v)->in_arena()) << "evicting k2 joined the holes around it";
    EXPECT_EQ(tier.stats().arena_evictions, 1u);
    EXPECT_FALSE(tier.Contains("k2"));
    EXPECT_TRUE(tier.Contains("k4"));
  }
  HostTier tier(o);
  for (int i = 1; i <= 4; ++i) Put(tier, "k" + std::to_string(i), kMiB);
  ValueRef r1 = tier.Get("k1"), r3 = tier.Get("k3");  // being sent
  ASSERT_TRUE(tier.Erase("k2"));
  ASSERT_TRUE(tier.Erase("k4"));
  auto v = tier.Allocate("k5", 2 * kMiB);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE((*v)->in_arena());
  EXPECT_EQ(tier.stats().arena_fallbacks, 1u);
  EXPECT_EQ(tier.stats().arena_evictions, 2u) << "k1 and k3: 2 MiB evicted, nothing freed";
  std::memset((*v)->mutable_bytes().data(), 5, 2 * kMiB);
  EXPECT_EQ(r1->bytes()[kMiB - 1], std::byte{7}) << "held values are intact";
  r1.reset();
  r3.reset();
  v->reset();
  auto w = tier.Allocate("k6", 2 * kMiB);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->in_arena()) << "released ranges are whole again";
}

}  // namespace
}  // namespace kvdepot::daemon
