// The tiers' statistics in their shared terms (kvdepot/daemon/tier.h: TierStats): the one
// definition of what STATS, the Prometheus tier series and resp:// INFO report per tier.
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

TierStats ToTierStats(const HostTierStats& host) {
  TierStats t;
  t.bytes = host.bytes;
  t.capacity = host.capacity;
  t.chunks = host.chunks;
  t.hits = host.hits;
  t.misses = host.misses;
  t.evictions = host.evictions;
  t.inserts = host.inserts;
  t.rejected = host.rejected;
  t.namespaces = host.namespaces;
  return t;  // demotions and promotions are counted by the SSD tier (TierStatsOf)
}

TierStats ToTierStats(const SsdTierStats& ssd) {
  TierStats t;
  t.bytes = ssd.bytes;  // segment files on disk, garbage included: what the capacity bounds
  t.capacity = ssd.capacity;
  t.chunks = ssd.chunks;
  t.hits = ssd.hits;
  t.misses = ssd.misses;
  t.evictions = ssd.evictions;
  t.inserts = ssd.writes;
  t.rejected = ssd.demotions_refused + ssd.demotions_dropped;
  return t;  // the lowest tier: nothing is demoted from it or promoted into it
}

TierStats ToTierStats(const DeviceTierStats& gpu) {
  TierStats t;
  t.bytes = gpu.bytes;
  t.capacity = gpu.capacity;
  t.chunks = gpu.chunks;
  t.hits = gpu.hits;
  t.misses = gpu.misses;
  t.evictions = gpu.evictions;  // an inclusive cache: the host tier still holds what it drops
  t.promotions = gpu.promotions;
  t.inserts = gpu.promotions;  // promotions are its only writes
  t.rejected = gpu.rejected;
  return t;
}

std::vector<Tier> Store::Tiers() const {
  std::vector<Tier> tiers;
  if (device_ != nullptr) tiers.push_back(Tier::kGpu);
  tiers.push_back(Tier::kHost);
  if (ssd_ != nullptr) tiers.push_back(Tier::kSsd);
  return tiers;
}

TierStats Store::TierStatsOf(Tier tier) const {
  switch (tier) {
    case Tier::kGpu: return device_ != nullptr ? ToTierStats(device_->stats()) : TierStats{};
    case Tier::kHost: {
      TierStats t = ToTierStats(host_.stats());
      if (ssd_ != nullptr) {
        const SsdTierStats d = ssd_->stats();
        t.demotions = d.demotions;    // host evictions written to the SSD
        t.promotions = d.promotions;  // SSD hits inserted into the host tier
      }
      return t;
    }
    case Tier::kSsd: return ssd_ != nullptr ? ToTierStats(ssd_->stats()) : TierStats{};
    case Tier::kNone: break;
  }
  return {};
}

}  // namespace kvdepot::daemon
