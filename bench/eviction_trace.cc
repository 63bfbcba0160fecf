// Eviction policy study: replays a synthetic LLM-serving trace of chunk accesses against the real
// HostTier with each policy and several capacities, and prints hit ratios (docs/eviction.md).
//
// Trace model (deterministic, seed 1): 50 system prompts of 4 chunks each, chosen with Zipf(1.0)
// popularity; 200 concurrent conversations, each a system prompt followed by 1-10 turns
// (geometric) adding 1-3 chunks per turn; every turn of a conversation reads its whole prefix in
// order (a hit per cached chunk; a miss is stored, as an engine would after recomputing it) and
// then stores its new chunks. 10% of requests are one-off retrieval documents of 20-60 chunks that
// are never read again (a scan that should not flush the hot prefixes).
#include <cstdio>
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
    for (int k = 0; k < kSystemChunks; ++k) c.prefix.push_back("sys" + std::to_string(p) + "/" + std::to_string(k));
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
      for (int k = 0; k < n; ++k) trace.push_back("doc" + std::to_string(doc_serial) + "/" + std::to_string(k));
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
                std::uint64_t capacity_chunks) {
  constexpr std::size_t kValue = 1024;
  const std::uint64_t per_chunk = kValue + 16 + HostTier::kEntryOverhead;
  HostTier tier(HostTierOptions::With(capacity_chunks * per_chunk, policy, 1));
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

}  // namespace
}  // namespace kvdepot::daemon

int main() {
  using namespace kvdepot::daemon;
  const auto trace = MakeTrace(200000);
  std::printf("eviction trace: %zu chunk accesses (see bench/eviction_trace.cc for the model)\n",
              trace.size());
  std::printf("%-16s %10s %10s %10s\n", "capacity", "lru", "sieve", "sieve-lru");
  for (std::uint64_t cap : {250, 500, 1000, 2000, 4000, 8000}) {
    const double lru = HitRatio(trace, EvictionPolicy::kLru, cap);
    const double sieve = HitRatio(trace, EvictionPolicy::kSieve, cap);
    std::printf("%6llu chunks    %9.2f%% %9.2f%% %+9.2f\n", static_cast<unsigned long long>(cap),
                100 * lru, 100 * sieve, 100 * (sieve - lru));
  }
  return 0;
}
