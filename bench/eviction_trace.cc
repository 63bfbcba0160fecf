// Eviction policy study: replays a synthetic LLM-serving trace of chunk accesses against the real
// HostTier with each policy, one shard and the default 16, and several capacities, and prints hit
// ratios (docs/eviction.md). Then the issue-19 check of eviction order across shards: 256
// distinct 8 MiB values PUT in sequence into a 256 MiB tier, and which of them survive.
//
// Trace model (deterministic, seed 1): 50 system prompts of 4 chunks each, chosen with Zipf(1.0)
// popularity; 200 concurrent conversations, each a system prompt followed by 1-10 turns
// (geometric) adding 1-3 chunks per turn; every turn of a conversation reads its whole prefix in
// order (a hit per cached chunk; a miss is stored, as an engine would after recomputing it) and
// then stores its new chunks. 10% of requests are one-off retrieval documents of 20-60 chunks that
// are never read again (a scan that should not flush the hot prefixes).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvdepot/daemon/host_tier.h"

namespace kvdepot::daemon {
namespace {

std::vector<std::string> MakeTrace(std::uint64_t requests) {
  std::mt19937_64 rng(1);
  const int kSystemPrompts = 50, kSystemChunks = 4, kActive = 200;
  std::vector<double> zipf(kSystemPrompts);
  for (int i = 0; i < kSystemPrompts; ++i) zipf[i] = 1.0 / (i + 1);
  std::discrete_distribution<int> pick_prompt(zipf.begin(), zipf.end());
  std::geometric_distribution<int> turns(0.25);
  struct Conversation {
    std::uint64_t id = 0;
    std::vector<std::string> prefix;
    int turns_left = 0;
  };
  std::uint64_t next_id = 0;
  auto fresh = [&]() {
    Conversation c;
    const int p = pick_prompt(rng);
    for (int k = 0; k < kSystemChunks; ++k)
      c.prefix.push_back("sys" + std::to_string(p) + "/" + std::to_string(k));
    c.turns_left = 1 + std::min(9, turns(rng));
    c.id = next_id++;
    return c;
  };
  std::vector<Conversation> active;
  for (int i = 0; i < kActive; ++i) active.push_back(fresh());
  std::vector<std::string> trace;
  std::uint64_t doc_serial = 0;
  for (std::uint64_t r = 0; r < requests; ++r) {
    if (rng() % 10 == 0) {  // one-off document scan
      const int n = 20 + static_cast<int>(rng() % 41);
      for (int k = 0; k < n; ++k)
        trace.push_back("doc" + std::to_string(doc_serial) + "/" + std::to_string(k));
      ++doc_serial;
      continue;
    }
    Conversation& c = active[rng() % active.size()];
    for (const auto& key : c.prefix) trace.push_back(key);
    const int add = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < add; ++k) {
      c.prefix.push_back("conv" + std::to_string(c.id) + "/" + std::to_string(c.prefix.size()));
      trace.push_back(c.prefix.back());
    }
    if (--c.turns_left == 0) c = fresh();
  }
  return trace;
}

double HitRatio(const std::vector<std::string>& trace, EvictionPolicy policy,
                std::uint64_t capacity_chunks, std::uint32_t shards) {
  constexpr std::size_t kValue = 1024;
  // Keys are 6-16 bytes: a capacity of N chunks holds N of them within a few hundredths.
  const std::uint64_t per_chunk = HostTier::ChargeFor(12, kValue);
  HostTier tier(HostTierOptions::With(capacity_chunks * per_chunk, policy, shards));
  std::uint64_t hits = 0;
  for (const std::string& key : trace) {
    if (tier.Get(key)) {
      ++hits;
      continue;
    }
    auto v = tier.Allocate(key, kValue);
    if (v.ok()) tier.Insert(key, *v);
  }
  return static_cast<double>(hits) / static_cast<double>(trace.size());
}

// The reproduction: 256 distinct 8 MiB values PUT in sequence into a 256 MiB tier. Prints
// how many survive and how many of those are among the newest that many (all of them: LRU order).
void SequentialPuts(EvictionPolicy policy, std::uint32_t shards) {
  constexpr std::size_t kValue = 8 << 20;
  constexpr int kPuts = 256;
  HostTier tier(HostTierOptions::With(256ull << 20, policy, shards));
  for (int i = 0; i < kPuts; ++i) {
    const std::string key = "chunk/" + std::to_string(i);
    auto v = tier.Allocate(key, kValue);
    if (!v.ok()) {
      std::printf("PUT %d: %s\n", i, v.status().ToString().c_str());
      return;
    }
    std::memset((*v)->mutable_bytes().data(), i, 4096);  // the first page is enough here
    tier.Insert(key, *v);
  }
  int survivors = 0, newest = 0, oldest_survivor = kPuts;
  for (int i = 0; i < kPuts; ++i) {
    if (!tier.Contains("chunk/" + std::to_string(i))) continue;
    ++survivors;
    oldest_survivor = std::min(oldest_survivor, i);
  }
  for (int i = kPuts - survivors; i < kPuts; ++i)
    newest += tier.Contains("chunk/" + std::to_string(i));
  std::printf("%-6s %3u shards: %d survivors, %d of them among the newest %d, oldest survivor %d\n",
              std::string(EvictionPolicyName(policy)).c_str(), shards, survivors, newest, survivors,
              oldest_survivor);
}

}  // namespace
}  // namespace kvdepot::daemon

int main() {
  using namespace kvdepot::daemon;
  const auto trace = MakeTrace(200000);
  std::printf("eviction trace: %zu chunk accesses (see bench/eviction_trace.cc for the model)\n",
              trace.size());
  std::printf("%-14s %9s %9s %9s %9s %10s\n", "capacity", "lru/1", "lru/16", "sieve/1", "sieve/16",
              "sieve-lru");
  for (std::uint64_t cap : {250, 500, 1000, 2000, 4000, 8000}) {
    const double lru1 = HitRatio(trace, EvictionPolicy::kLru, cap, 1);
    const double lru16 = HitRatio(trace, EvictionPolicy::kLru, cap, 16);
    const double sieve1 = HitRatio(trace, EvictionPolicy::kSieve, cap, 1);
    const double sieve16 = HitRatio(trace, EvictionPolicy::kSieve, cap, 16);
    std::printf("%6llu chunks  %8.2f%% %8.2f%% %8.2f%% %8.2f%% %+10.2f\n",
                static_cast<unsigned long long>(cap), 100 * lru1, 100 * lru16, 100 * sieve1,
                100 * sieve16, 100 * (sieve16 - lru16));
  }
  std::printf("\nsequential PUTs: 256 distinct 8 MiB values into a 256 MiB tier\n");
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kSieve}) {
    for (std::uint32_t shards : {1u, 16u}) SequentialPuts(policy, shards);
  }
  return 0;
}
