// Placement study for the cluster (docs/cluster.md, "Placement"): prints Markdown tables.
//
//  1. (a) 16,384 hash slots assigned to members (Redis Cluster's scheme: a joining node takes
//     16384/(N+1) slots, one at a time from the member holding most) vs (b) the weighted
//     rendezvous placement of topology.cc: fraction of keys whose owner changes when the
//     (N+1)-th node joins (N = 2..10; ideal 1/(N+1)), load balance (max/mean keys per member),
//     and the cost of finding a key's owner (ns per key, one thread).
//  2. Prefix kept after losing 1 of N nodes (N = 3, 5, 10): synthetic prompts of 8-128 chunks,
//     placed per chunk (G = 1) or in groups of G = 2, 4, 8, 16 consecutive chunks (placed by the
//     group's anchor, GroupAnchorIndex), with 1 replica, 2 replicas, or 2 replicas for the first
//     group only. "Prefix kept" = the longest prefix of a prompt whose chunks all still have a
//     live owner, divided by the prompt's chunks; averaged over prompts and over which node is
//     lost. Also the fraction of prompts that lose nothing.
//
// Usage: kvdepot_cluster_placement [--keys N] [--prompts N] (defaults 200000 and 4000).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvdepot/cluster/topology.h"

namespace kvdepot::cluster {
namespace {

constexpr std::uint32_t kSlots = 16384;

std::vector<Member> MakeMembers(std::size_t n) {
  std::vector<Member> out;
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i < n; ++i) {
    char id[33];
    std::snprintf(id, sizeof(id), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    Member m;
    m.id = id;
    m.capacity_bytes = 1ull << 30;
    out.push_back(m);
  }
  return out;
}

std::uint32_t SlotOf(const std::string& key) {
  return static_cast<std::uint32_t>(XXH3_64bits(key.data(), key.size()) % kSlots);
}

// Slot table for 1..n members built by successive joins: each join takes kSlots/(members) slots,
// one at a time from the member that holds most (ties: the lowest index).
std::vector<std::vector<std::uint16_t>> SlotTables(std::size_t n) {
  std::vector<std::vector<std::uint16_t>> tables;
  std::vector<std::uint16_t> table(kSlots, 0);
  tables.push_back(table);
  for (std::size_t members = 2; members <= n; ++members) {
    std::vector<std::vector<std::uint32_t>> held(members);
    for (std::uint32_t s = 0; s < kSlots; ++s) held[table[s]].push_back(s);
    const std::uint32_t take = kSlots / static_cast<std::uint32_t>(members);
    for (std::uint32_t i = 0; i < take; ++i) {
      std::size_t richest = 0;
      for (std::size_t m = 1; m + 1 < members; ++m) {
        if (held[m].size() > held[richest].size()) richest = m;
      }
      const std::uint32_t slot = held[richest].back();
      held[richest].pop_back();
      table[slot] = static_cast<std::uint16_t>(members - 1);
      held[members - 1].push_back(slot);
    }
    tables.push_back(table);
  }
  return tables;
}

double MaxOverMean(const std::vector<std::size_t>& counts) {
  std::size_t total = 0;
  std::size_t max = 0;
  for (std::size_t c : counts) {
    total += c;
    max = std::max(max, c);
  }
  return static_cast<double>(max) * counts.size() / static_cast<double>(total);
}

void CompareSchemes(std::size_t key_count) {
  std::vector<std::string> keys;
  keys.reserve(key_count);
  for (std::size_t i = 0; i < key_count; ++i) keys.push_back("chunk-" + std::to_string(i));
  const auto tables = SlotTables(11);
  const std::vector<Member> all = MakeMembers(11);
  std::printf(
      "| N -> N+1 | ideal moved | slots moved | rendezvous moved | slots max/mean (N+1) "
      "| rendezvous max/mean (N+1) | slots ns/key | rendezvous ns/key |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (std::size_t n = 2; n <= 10; ++n) {
    const auto& before_table = tables[n - 1];
    const auto& after_table = tables[n];
    const Topology before(1, {all.begin(), all.begin() + static_cast<long>(n)}, {});
    const Topology after(2, {all.begin(), all.begin() + static_cast<long>(n + 1)}, {});
    std::size_t slots_moved = 0;
    std::size_t hrw_moved = 0;
    std::vector<std::size_t> slot_load(n + 1, 0);
    std::vector<std::size_t> hrw_load(n + 1, 0);
    for (const std::string& key : keys) {
      const std::uint32_t slot = SlotOf(key);
      slots_moved += before_table[slot] != after_table[slot];
      ++slot_load[after_table[slot]];
      const Member* b = before.PrimaryOwner(key);
      const Member* a = after.PrimaryOwner(key);
      hrw_moved += b->id != a->id;
      ++hrw_load[static_cast<std::size_t>(a - after.members().data())];
    }
    // Owner look-up cost, measured on the N+1 view.
    std::size_t sink = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const std::string& key : keys) sink += after_table[SlotOf(key)];
    auto t1 = std::chrono::steady_clock::now();
    for (const std::string& key : keys) sink += after.PrimaryOwner(key)->id.size();
    auto t2 = std::chrono::steady_clock::now();
    const double slots_ns =
        std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(key_count);
    const double hrw_ns =
        std::chrono::duration<double, std::nano>(t2 - t1).count() / static_cast<double>(key_count);
    std::printf("| %zu -> %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f |%s\n", n, n + 1,
                1.0 / static_cast<double>(n + 1),
                static_cast<double>(slots_moved) / static_cast<double>(key_count),
                static_cast<double>(hrw_moved) / static_cast<double>(key_count),
                MaxOverMean(slot_load), MaxOverMean(hrw_load), slots_ns, hrw_ns,
                sink == 0 ? " " : "");
  }
}

enum class ReplicaMode { kOne, kTwo, kTwoFirstGroup };

struct PrefixResult {
  double kept = 0;    // mean fraction of the prompt's prefix kept
  double intact = 0;  // fraction of prompts that lost nothing
};

PrefixResult PrefixKept(std::size_t n, std::uint32_t g, ReplicaMode mode,
                        const std::vector<std::uint32_t>& prompt_chunks) {
  const std::vector<Member> members = MakeMembers(n);
  const Topology one(1, members, {1, g});
  const Topology two(1, members, {2, g});
  double kept_sum = 0;
  double intact_sum = 0;
  std::size_t samples = 0;
  // For each prompt, which members each chunk lives on (a bitmask), then every possible loss.
  std::vector<std::uint32_t> owners_mask;
  for (std::size_t p = 0; p < prompt_chunks.size(); ++p) {
    const std::uint32_t chunks = prompt_chunks[p];
    owners_mask.assign(chunks, 0);
    std::string anchor_key;
    std::uint32_t mask = 0;
    for (std::uint32_t c = 0; c < chunks; ++c) {
      const std::size_t anchor = GroupAnchorIndex(c, g);
      if (anchor == c) {
        anchor_key = "prompt-" + std::to_string(p) + "-chunk-" + std::to_string(anchor);
        const bool replicated =
            mode == ReplicaMode::kTwo || (mode == ReplicaMode::kTwoFirstGroup && anchor == 0);
        mask = 0;
        for (const Member* m : (replicated ? two : one).Owners(anchor_key)) {
          mask |= 1u << (m - (replicated ? two : one).members().data());
        }
      }
      owners_mask[c] = mask;
    }
    for (std::size_t lost = 0; lost < n; ++lost) {
      std::uint32_t kept = 0;
      while (kept < chunks && (owners_mask[kept] & ~(1u << lost)) != 0) ++kept;
      kept_sum += static_cast<double>(kept) / chunks;
      intact_sum += kept == chunks ? 1.0 : 0.0;
      ++samples;
    }
  }
  return {kept_sum / static_cast<double>(samples), intact_sum / static_cast<double>(samples)};
}

void ComparePrefixKept(std::size_t prompt_count) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> length(8, 128);
  std::vector<std::uint32_t> prompts(prompt_count);
  for (auto& p : prompts) p = length(rng);
  const struct {
    ReplicaMode mode;
    const char* name;
  } modes[] = {{ReplicaMode::kOne, "1 replica"},
               {ReplicaMode::kTwoFirstGroup, "2 replicas, first group only"},
               {ReplicaMode::kTwo, "2 replicas"}};
  for (const auto& mode : modes) {
    std::printf(
        "\nPrefix kept after losing 1 of N nodes, %s (mean kept fraction / prompts "
        "intact):\n\n",
        mode.name);
    std::printf("| N | per chunk (G=1) | G=2 | G=4 | G=8 | G=16 |\n|---|---|---|---|---|---|\n");
    for (std::size_t n : {3u, 5u, 10u}) {
      std::printf("| %zu ", n);
      for (std::uint32_t g : {1u, 2u, 4u, 8u, 16u}) {
        const PrefixResult r = PrefixKept(n, g, mode.mode, prompts);
        std::printf("| %.3f / %.3f ", r.kept, r.intact);
      }
      std::printf("|\n");
    }
  }
}

}  // namespace
}  // namespace kvdepot::cluster

int main(int argc, char** argv) {
  std::size_t keys = 200000;
  std::size_t prompts = 4000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--keys") == 0) keys = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--prompts") == 0) prompts = std::strtoull(argv[i + 1], nullptr, 10);
  }
  std::printf("Hash slots (16384) vs rendezvous, %zu keys, equal capacities:\n\n", keys);
  kvdepot::cluster::CompareSchemes(keys);
  std::printf("\n%zu synthetic prompts of 8-128 chunks (uniform):\n", prompts);
  kvdepot::cluster::ComparePrefixKept(prompts);
  return 0;
}
