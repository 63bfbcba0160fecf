#include "kvdepot/cluster/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

// Header-only xxHash, as base/src/checksum.cc uses it.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvdepot::cluster {
namespace {

std::uint64_t Hash64(std::string_view bytes, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

// Weighted rendezvous score: weight / -ln(u), u = the hash's top 53 bits mapped into (0, 1).
// Larger wins; with equal weights the order is the hashes' order.
double Score(std::uint64_t hash, std::uint64_t weight) {
  const double u = (static_cast<double>(hash >> 11) + 0.5) * 0x1.0p-53;
  const double w = static_cast<double>(std::max<std::uint64_t>(weight, 1));
  return w / -std::log(u);
}

}  // namespace

Topology::Topology(std::int64_t revision, std::vector<Member> members, PlacementOptions options)
    : revision_(revision), members_(std::move(members)), options_(options) {
  std::sort(members_.begin(), members_.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  seeds_.reserve(members_.size());
  for (const Member& m : members_) seeds_.push_back(Hash64(m.id, 0));
  options_.replicas = std::max<std::uint32_t>(options_.replicas, 1);
  options_.group_chunks = std::max<std::uint32_t>(options_.group_chunks, 1);
}

const Member* Topology::Find(std::string_view id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), id,
                             [](const Member& m, std::string_view v) { return m.id < v; });
  return it != members_.end() && it->id == id ? &*it : nullptr;
}

std::vector<const Member*> Topology::Owners(std::string_view placement_key) const {
  const std::size_t want = std::min<std::size_t>(options_.replicas, members_.size());
  std::vector<std::pair<double, const Member*>> scored;
  scored.reserve(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    scored.emplace_back(Score(Hash64(placement_key, seeds_[i]), members_[i].capacity_bytes),
                        &members_[i]);
  }
  // Ties (practically impossible) go to the smaller id: members_ is sorted and the sort is stable.
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const Member*> owners;
  owners.reserve(want);
  for (std::size_t i = 0; i < want; ++i) owners.push_back(scored[i].second);
  return owners;
}

const Member* Topology::PrimaryOwner(std::string_view placement_key) const {
  const Member* best = nullptr;
  double best_score = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const double s = Score(Hash64(placement_key, seeds_[i]), members_[i].capacity_bytes);
    if (s > best_score) {
      best_score = s;
      best = &members_[i];
    }
  }
  return best;
}

bool Topology::IsOwner(std::string_view member_id, std::string_view placement_key) const {
  for (const Member* m : Owners(placement_key)) {
    if (m->id == member_id) return true;
  }
  return false;
}

std::string_view PlacementKey(std::string_view key) {
  // Binary keys (kvdepot's 48-byte chunk keys) are placed by their whole bytes: a '{' ... '}'
  // pair inside random bytes is no hash tag, and honouring it would place ~8% of chunk keys by a
  // short random substring, piling every key with the same "tag" byte onto one node.
  const bool printable = std::all_of(key.begin(), key.end(), [](char c) {
    const auto b = static_cast<unsigned char>(c);
    return b >= 0x20 && b <= 0x7e;
  });
  if (!printable) return key;
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

}  // namespace kvdepot::cluster
