#include "kvdepot/daemon/host_tier.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <string>
#include <tuple>
#include <unordered_map>

#include "kvdepot/base/checksum.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/shm_arena.h"

namespace kvdepot::daemon {
namespace {

constexpr std::uint64_t kNoVictim = std::numeric_limits<std::uint64_t>::max();

std::uint64_t NowMs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

Value::Value(std::shared_ptr<std::atomic<std::uint64_t>> used,
             std::shared_ptr<std::atomic<std::uint64_t>> namespace_used, std::uint64_t charge,
             std::size_t size, std::shared_ptr<ShmArena> arena, std::uint64_t arena_offset)
    : used_(std::move(used)),
      namespace_used_(std::move(namespace_used)),
      charge_(charge),
      size_(size),
      arena_(std::move(arena)),
      arena_offset_(arena_offset) {
  if (arena_) {
    data_ = arena_->base() + arena_offset_;
  } else {
    // Plain malloc plus manual alignment rather than aligned_alloc: glibc's memalign splits its
    // blocks so that freed values are not reused for new ones and the heap grows without bound
    // under churn (measured: +138 MB RSS for 160 MiB through a 16 MiB tier).
    allocation_ = static_cast<std::byte*>(std::malloc(padded_size() + kAlignment));
    if (allocation_ == nullptr) throw std::bad_alloc();
    const auto address = reinterpret_cast<std::uintptr_t>(allocation_);
    data_ = allocation_ + ((kAlignment - address % kAlignment) % kAlignment);
  }
  std::memset(data_ + size_, 0, padded_size() - size_);
}

Value::~Value() {
  if (arena_) {
    arena_->Free(arena_offset_);
  } else {
    std::free(allocation_);
  }
  used_->fetch_sub(charge_, std::memory_order_acq_rel);
  if (namespace_used_) namespace_used_->fetch_sub(charge_, std::memory_order_acq_rel);
}

std::optional<std::uint64_t> Value::arena_offset() const {
  return arena_ && arena_->shared() ? std::optional<std::uint64_t>(arena_offset_) : std::nullopt;
}

bool Value::TransferCharge(const std::shared_ptr<std::atomic<std::uint64_t>>& counter,
                           std::uint64_t limit) const {
  std::uint64_t cur = counter->load(std::memory_order_acquire);
  do {
    if (cur + charge_ > limit) return false;
  } while (!counter->compare_exchange_weak(cur, cur + charge_, std::memory_order_acq_rel));
  used_->fetch_sub(charge_, std::memory_order_acq_rel);
  if (namespace_used_) namespace_used_->fetch_sub(charge_, std::memory_order_acq_rel);
  namespace_used_.reset();
  used_ = counter;
  return true;
}

std::string_view KeyNamespace(std::string_view key) {
  return key.size() == 48 ? key.substr(0, 16) : std::string_view();
}

Result<EvictionPolicy> ParseEvictionPolicy(std::string_view name) {
  if (name == "lru") return EvictionPolicy::kLru;
  if (name == "sieve") return EvictionPolicy::kSieve;
  return InvalidArgument("unknown eviction policy '" + std::string(name) +
                         "' (expected lru or sieve)");
}

std::string_view EvictionPolicyName(EvictionPolicy policy) {
  return policy == EvictionPolicy::kLru ? "lru" : "sieve";
}

// One shard: the index plus its eviction orders, one per quota namespace and one for every other
// key (HostTier::OrderFor), so that a namespace over its quota finds its own next victim at once.
// LRU: an order's front is the most recently used entry, its back the next victim. SIEVE: the
// front is the newest insert; the hand walks from the back toward the front, clearing `visited`
// bits, and evicts the first unvisited entry (Zhang et al., NSDI '24).
//
// Every node carries a stamp from HostTier::clock_ (LRU: its last insert or use; SIEVE: its
// insert), taken under the shard's lock, so an order is sorted by stamp (front newest). Each
// order publishes the position of its next candidate as a VictimKey (written under the lock, read
// without it); EvictOne merges the shards' orders by it:
// - LRU: {0, stamp of the back}: the globally least recently used entry goes first.
// - SIEVE: {sweep, stamp of the hand's entry}. `sweep` counts the times the order's hand passed
//   its front and restarted at its back. A global SIEVE hand passes every entry of one sweep in
//   stamp order before it restarts, so an order whose hand passed its front while other orders
//   still hold entries of this sweep waits there (`exhausted`: entries inserted meanwhile are
//   still in this sweep, as they are ahead of the global hand), publishing {sweep + 1, stamp of
//   its back}, until every other order's hand did too: merging the orders by key replays a
//   single hand (with one shard and no quotas, exactly SIEVE).
struct HostTier::Shard {
  struct Node {
    std::string key;
    std::uint64_t stamp = 0;
    bool visited = false;
  };
  using NodeIt = std::list<Node>::iterator;
  struct Order {
    std::list<Node> nodes;
    NodeIt hand = nodes.end();  // SIEVE only; end() = start at the back
    std::uint64_t sweep = 0;    // SIEVE only
    bool exhausted = false;     // SIEVE only: the hand passed the front (hand == end())
    std::atomic<std::uint64_t> next_sweep{0};
    std::atomic<std::uint64_t> next_stamp{kNoVictim};
  };
  struct Entry {
    ValueRef value;
    NodeIt pos;
    std::uint32_t order = 0;
    std::uint64_t last_access_ms = 0;
  };

  // `sweeps`: per order index, the sweep the global SIEVE hand is in (HostTier::sweeps_).
  Shard(std::uint32_t order_count, EvictionPolicy p, const std::atomic<std::uint64_t>* s)
      : policy(p), sweeps(s) {
    for (std::uint32_t i = 0; i < order_count; ++i) orders.push_back(std::make_unique<Order>());
  }

  const EvictionPolicy policy;
  const std::atomic<std::uint64_t>* const sweeps;
  mutable std::mutex mu;
  std::unordered_map<std::string, Entry> index;
  std::vector<std::unique_ptr<Order>> orders;

  // The candidate the order would look at next (SIEVE: may be visited; after the back of the
  // next sweep when exhausted). Precondition: not empty.
  NodeIt Candidate(Order& o) {
    if (policy == EvictionPolicy::kSieve && o.hand != o.nodes.end()) return o.hand;
    return std::prev(o.nodes.end());
  }

  void Publish(Order& o) {
    if (o.nodes.empty()) {
      o.next_stamp.store(kNoVictim, std::memory_order_release);
      return;
    }
    o.next_sweep.store(o.exhausted ? o.sweep + 1 : o.sweep, std::memory_order_release);
    o.next_stamp.store(Candidate(o)->stamp, std::memory_order_release);
  }

  // Adds an entry at the front of order `order` (newest = true) or as its next candidate (the
  // back, with a SIEVE hand on it). Precondition: `key` is absent.
  void Link(std::string_view key, ValueRef value, std::uint32_t order, std::uint64_t stamp,
            bool newest = true) {
    Order& o = *orders[order];
    if (o.nodes.empty()) {  // the hand joins the global one where it is
      o.sweep = sweeps[order].load(std::memory_order_acquire);
      o.hand = o.nodes.end();
      o.exhausted = false;
    }
    Node node{std::string(key), stamp, false};
    const NodeIt pos = newest ? o.nodes.insert(o.nodes.begin(), std::move(node))
                              : o.nodes.insert(o.nodes.end(), std::move(node));
    if (policy == EvictionPolicy::kSieve && !newest) {
      o.hand = pos;  // the refused victim: the next candidate again
      o.exhausted = false;
    } else if (o.exhausted) {
      o.exhausted = false;
      if (sweeps[order].load(std::memory_order_acquire) > o.sweep) {
        ++o.sweep;  // the global hand restarted meanwhile: so does this one, at the back
        o.hand = o.nodes.end();
      } else {
        o.hand = pos;  // ahead of the global hand in this sweep: its next candidate here
      }
    }
    Entry e;
    e.value = std::move(value);
    e.pos = pos;
    e.order = order;
    e.last_access_ms = NowMs();
    index.emplace(std::string(key), std::move(e));
    Publish(o);
  }

  // Removes an entry; a SIEVE hand on it moves one step toward the front, or past the front:
  // there it waits with `wait_past_front` (other orders hold entries of this sweep), else it
  // restarts at the back of the next sweep.
  void Unlink(std::unordered_map<std::string, Entry>::iterator it, bool wait_past_front = false) {
    Order& o = *orders[it->second.order];
    if (o.hand == it->second.pos) {
      if (o.hand != o.nodes.begin()) {
        o.hand = std::prev(o.hand);
      } else if (wait_past_front) {
        o.hand = o.nodes.end();
        o.exhausted = true;
      } else {
        ++o.sweep;
        o.hand = o.nodes.end();
      }
    }
    o.nodes.erase(it->second.pos);
    index.erase(it);
    Publish(o);
  }

  // The entry to evict from `o`, or end() when the order's next candidate comes after `bound`
  // (the best key of the other orders): that order goes first. SIEVE moves the hand, clearing
  // the visited bits it passes, only over candidates up to `bound`, as the global hand would.
  // Precondition: `o` is not empty.
  NodeIt NextVictim(Order& o, std::uint32_t order, VictimKey bound) {
    const std::uint64_t global_sweep = sweeps[order].load(std::memory_order_acquire);
    const auto key = [&](NodeIt n) {
      return VictimKey{o.sweep > global_sweep ? o.sweep - global_sweep : 0, n->stamp};
    };
    if (policy == EvictionPolicy::kLru) {
      const NodeIt back = std::prev(o.nodes.end());
      return key(back) > bound ? o.nodes.end() : back;
    }
    if (o.hand == o.nodes.end() && !o.exhausted) o.hand = std::prev(o.nodes.end());
    while (true) {
      if (o.exhausted) {  // the next sweep starts at the back, when it is this order's turn
        if (VictimKey{o.sweep + 1 > global_sweep ? o.sweep + 1 - global_sweep : 0,
                      o.nodes.back().stamp} > bound) {
          return o.nodes.end();
        }
        ++o.sweep;
        o.exhausted = false;
        o.hand = std::prev(o.nodes.end());
      }
      if (key(o.hand) > bound) return o.nodes.end();
      if (!o.hand->visited) return o.hand;
      o.hand->visited = false;
      if (o.hand != o.nodes.begin()) {
        o.hand = std::prev(o.hand);
      } else if (bound.first == 0) {  // others still hold entries of this sweep: wait for them
        o.hand = o.nodes.end();
        o.exhausted = true;
      } else {  // the global hand restarts at once
        ++o.sweep;
        o.hand = std::prev(o.nodes.end());
      }
    }
  }
};

HostTier::HostTier(const HostTierOptions& options)
    : capacity_(options.capacity_bytes),
      policy_(options.policy),
      used_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
  std::uint32_t order = 0;
  for (const auto& [ns, limit] : options.namespace_quotas) {
    quotas_.emplace(ns, Quota{std::make_unique<std::atomic<std::uint64_t>>(limit),
                              std::make_shared<std::atomic<std::uint64_t>>(0), ++order});
  }
  sweeps_ = std::make_unique<std::atomic<std::uint64_t>[]>(order + 1);
  std::uint32_t n = 1;
  while (n < std::max<std::uint32_t>(options.shards, 1)) n <<= 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    shards_.push_back(std::make_unique<Shard>(order + 1, policy_, sweeps_.get()));
  }
  const std::uint64_t headroom = options.arena_headroom_bytes.value_or(
      std::max(options.capacity_bytes / 4, HostTierOptions::kDefaultMinArenaHeadroom));
  auto arena = ShmArena::CreatePrivate(options.capacity_bytes + headroom);
  if (arena.ok()) {
    arena_ = std::move(*arena);
  } else {
    // Heap memory still works; every value then counts as an arena fallback.
    Log(LogLevel::kWarn, "host tier: no private value arena, values use heap memory",
        {{"error", arena.status().message()}});
  }
}

HostTier::~HostTier() = default;

HostTier::Shard& HostTier::ShardFor(std::string_view key) const {
  const std::uint64_t h = Checksum64(std::as_bytes(std::span(key.data(), key.size())));
  return *shards_[h & (shards_.size() - 1)];
}

std::uint32_t HostTier::OrderFor(std::string_view key) const {
  const std::string_view ns = KeyNamespace(key);
  if (ns.empty() || quotas_.empty()) return 0;
  const auto q = quotas_.find(ns);
  return q == quotas_.end() ? 0 : q->second.order;
}

std::uint64_t HostTier::EvictOne(std::string_view ns, bool namespace_only) {
  const std::size_t n = shards_.size();
  const std::uint32_t orders = static_cast<std::uint32_t>(shards_.front()->orders.size());
  std::uint32_t first_order = 0, last_order = orders;  // the orders to consider: [first, last)
  if (namespace_only) {
    const auto q = quotas_.find(ns);
    if (q == quotas_.end()) return 0;
    first_order = q->second.order;
    last_order = first_order + 1;
  }
  // (shard, order) pairs whose victim the listener refused or that turned out empty.
  std::vector<bool> skip(n * orders, false);
  // Times an order's candidate turned out to come after another order's (a SIEVE hand passed
  // visited entries, or a published key was stale): the choice is made again.
  constexpr std::size_t kMaxDeferrals = 4096;
  std::size_t deferrals = 0;
  while (true) {
    // The best next victim and the runner-up's key, read without locks: racing updates only
    // make the choice approximate (a victim may be used, or a newer one inserted, meanwhile).
    std::size_t best = skip.size();
    VictimKey best_key{kNoVictim, kNoVictim}, runner_up{kNoVictim, kNoVictim};
    for (std::uint32_t o = first_order; o < last_order; ++o) {
      const std::uint64_t sweep = sweeps_[o].load(std::memory_order_acquire);
      for (std::size_t i = 0; i < n; ++i) {
        if (skip[i * orders + o]) continue;
        const Shard::Order& order = *shards_[i]->orders[o];
        const std::uint64_t stamp = order.next_stamp.load(std::memory_order_acquire);
        if (stamp == kNoVictim) continue;
        const std::uint64_t next_sweep = order.next_sweep.load(std::memory_order_acquire);
        const VictimKey key{next_sweep > sweep ? next_sweep - sweep : 0, stamp};
        if (key < best_key) {
          runner_up = best_key;
          best_key = key;
          best = i * orders + o;
        } else if (key < runner_up) {
          runner_up = key;
        }
      }
    }
    if (best == skip.size()) return 0;
    Shard& s = *shards_[best / orders];
    const std::uint32_t order = static_cast<std::uint32_t>(best % orders);
    ValueRef victim;  // released after the lock
    std::string victim_key;
    std::uint64_t victim_stamp = 0;
    {
      std::lock_guard lock(s.mu);
      Shard::Order& o = *s.orders[order];
      if (o.nodes.empty()) {
        skip[best] = true;
        continue;
      }
      const Shard::NodeIt pos = s.NextVictim(
          o, order, deferrals < kMaxDeferrals ? runner_up : VictimKey{kNoVictim, kNoVictim});
      if (pos == o.nodes.end()) {
        s.Publish(o);
        ++deferrals;
        continue;
      }
      victim_stamp = pos->stamp;
      // The global SIEVE hand is in the victim's sweep now.
      std::uint64_t sweep = sweeps_[order].load(std::memory_order_acquire);
      while (sweep < o.sweep &&
             !sweeps_[order].compare_exchange_weak(sweep, o.sweep, std::memory_order_acq_rel)) {
      }
      auto it = s.index.find(pos->key);
      victim = std::move(it->second.value);
      victim_key = it->first;
      s.Unlink(it, /*wait_past_front=*/runner_up.first == 0);
    }
    if (eviction_listener_ && !eviction_listener_(victim_key, victim)) {
      // The value may not leave memory yet (its SSD write cannot be queued): it goes back as
      // this order's next victim, unless a new value took its key meanwhile, and eviction
      // moves on to the other shards' victims.
      std::lock_guard lock(s.mu);
      if (s.index.count(victim_key) == 0) {
        s.Link(victim_key, std::move(victim), order, victim_stamp, /*newest=*/false);
      }
      skip[best] = true;
      continue;
    }
    evictions_.fetch_add(1, std::memory_order_relaxed);
    return victim->charge();
  }
}

bool HostTier::Reserve(std::atomic<std::uint64_t>& counter, std::uint64_t limit,
                       std::uint64_t charge, std::string_view ns, bool namespace_only) {
  while (true) {
    std::uint64_t cur = counter.load(std::memory_order_acquire);
    if (cur + charge <= limit) {
      if (counter.compare_exchange_weak(cur, cur + charge, std::memory_order_acq_rel)) return true;
      continue;
    }
    if (EvictOne(ns, namespace_only) == 0) return false;
  }
}

std::optional<std::uint64_t> HostTier::PlaceInArena(std::uint64_t padded) {
  if (!arena_) return std::nullopt;
  std::uint64_t freed = 0;
  while (true) {
    if (auto offset = arena_->Allocate(padded)) return offset;
    // Fragmented (or the space is held by values outside the capacity): evicting the next
    // victims may free an adjacent range. Bounded to one value's worth, then heap memory: an
    // arena with the default headroom needs it rarely (docs/eviction.md, "Arena placement").
    if (freed >= padded) return std::nullopt;
    const std::uint64_t charge = EvictOne();
    if (charge == 0) return std::nullopt;
    arena_evictions_.fetch_add(1, std::memory_order_relaxed);
    freed += charge;
  }
}

Result<std::shared_ptr<Value>> HostTier::Allocate(std::string_view key, std::size_t size) {
  const std::uint64_t charge = ChargeFor(key.size(), size);
  const std::string_view ns = KeyNamespace(key);
  const auto quota = ns.empty() ? quotas_.end() : quotas_.find(ns);
  const std::uint64_t capacity = capacity_.load(std::memory_order_relaxed);
  const std::uint64_t quota_limit =
      quota == quotas_.end() ? capacity : quota->second.limit->load(std::memory_order_relaxed);
  const std::uint64_t limit = std::min(capacity, quota_limit);
  if (charge > limit) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return OutOfRange("host tier: a value of " + std::to_string(size) + " bytes can never fit " +
                      (limit == capacity ? "the capacity" : "its namespace's quota") + " of " +
                      std::to_string(limit));
  }
  std::shared_ptr<std::atomic<std::uint64_t>> ns_used;
  if (quota != quotas_.end()) {
    ns_used = quota->second.used;
    if (!Reserve(*ns_used, quota_limit, charge, ns, /*namespace_only=*/true)) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      return ResourceExhausted("host tier: the namespace's quota is held by values in use");
    }
  }
  if (!Reserve(*used_, capacity, charge, {}, /*namespace_only=*/false)) {
    if (ns_used) ns_used->fetch_sub(charge, std::memory_order_acq_rel);
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return ResourceExhausted("host tier: no room for " + std::to_string(size) +
                             " bytes: the remaining capacity is held by values in use");
  }
  const std::uint64_t padded = std::max<std::uint64_t>(
      (size + Value::kAlignment - 1) / Value::kAlignment * Value::kAlignment, Value::kAlignment);
  const std::optional<std::uint64_t> offset = PlaceInArena(padded);
  if (!offset) arena_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  try {
    return std::shared_ptr<Value>(
        new Value(used_, ns_used, charge, size, offset ? arena_ : nullptr, offset.value_or(0)));
  } catch (const std::bad_alloc&) {
    used_->fetch_sub(charge, std::memory_order_acq_rel);
    if (ns_used) ns_used->fetch_sub(charge, std::memory_order_acq_rel);
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return ResourceExhausted("host tier: out of memory allocating " + std::to_string(size) +
                             " bytes");
  }
}

void HostTier::Insert(std::string_view key, ValueRef value) {
  Shard& s = ShardFor(key);
  const std::uint32_t order = OrderFor(key);
  ValueRef old;  // released after the lock
  {
    std::lock_guard lock(s.mu);
    auto it = s.index.find(std::string(key));
    if (it != s.index.end()) {
      old = std::move(it->second.value);
      s.Unlink(it);
    }
    s.Link(key, std::move(value), order, clock_.fetch_add(1, std::memory_order_relaxed) + 1);
  }
  inserts_.fetch_add(1, std::memory_order_relaxed);
}

bool HostTier::InsertIfAbsent(std::string_view key, ValueRef value) {
  Shard& s = ShardFor(key);
  const std::uint32_t order = OrderFor(key);
  {
    std::lock_guard lock(s.mu);
    if (s.index.count(std::string(key)) != 0) return false;
    s.Link(key, std::move(value), order, clock_.fetch_add(1, std::memory_order_relaxed) + 1);
  }
  inserts_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

ValueRef HostTier::Get(std::string_view key) {
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  auto it = s.index.find(std::string(key));
  if (it == s.index.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  Shard::Entry& e = it->second;
  e.last_access_ms = NowMs();
  if (policy_ == EvictionPolicy::kLru) {
    Shard::Order& o = *s.orders[e.order];
    e.pos->stamp = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
    o.nodes.splice(o.nodes.begin(), o.nodes, e.pos);
    s.Publish(o);
  } else {
    e.pos->visited = true;
  }
  return e.value;
}

bool HostTier::Contains(std::string_view key) const {
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  return s.index.count(std::string(key)) != 0;
}

bool HostTier::Erase(std::string_view key) {
  Shard& s = ShardFor(key);
  ValueRef old;
  std::lock_guard lock(s.mu);
  auto it = s.index.find(std::string(key));
  if (it == s.index.end()) return false;
  old = std::move(it->second.value);
  s.Unlink(it);
  return true;
}

protocol::ScanResult HostTier::Scan(std::string_view prefix, std::string_view cursor,
                                    std::uint32_t limit) const {
  std::vector<protocol::ScanEntry> found;
  const std::uint64_t now = NowMs();
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    for (const auto& [key, entry] : shard->index) {
      if (key.compare(0, prefix.size(), prefix) != 0 || key <= cursor) continue;
      found.push_back({key, entry.value->bytes().size(), protocol::Tier::kHost,
                       now - std::min(now, entry.last_access_ms)});
    }
  }
  protocol::ScanResult result;
  const std::size_t n = std::min<std::size_t>(found.size(), limit);
  std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(n), found.end(),
                    [](const auto& a, const auto& b) { return a.key < b.key; });
  found.resize(n);
  if (n == limit && n > 0) result.next_cursor = found.back().key;
  result.entries = std::move(found);
  return result;
}

std::vector<std::pair<std::string, ValueRef>> HostTier::EntriesByRecency() const {
  struct Item {
    std::uint64_t last_access_ms;
    std::uint64_t stamp;
    std::string key;
    ValueRef value;
  };
  std::vector<Item> items;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    for (const auto& [key, entry] : shard->index) {
      items.push_back({entry.last_access_ms, entry.pos->stamp, key, entry.value});
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.last_access_ms, a.stamp) > std::tie(b.last_access_ms, b.stamp);
  });
  std::vector<std::pair<std::string, ValueRef>> out;
  out.reserve(items.size());
  for (Item& item : items) out.emplace_back(std::move(item.key), std::move(item.value));
  return out;
}

Result<std::uint64_t> HostTier::SetCapacity(std::uint64_t capacity_bytes) {
  if (capacity_bytes == 0) return OutOfRange("host tier: capacity 0");
  capacity_.store(capacity_bytes, std::memory_order_relaxed);
  std::uint64_t evicted = 0;
  while (used_->load(std::memory_order_acquire) > capacity_bytes && EvictOne() != 0) ++evicted;
  return evicted;
}

Result<std::uint64_t> HostTier::SetNamespaceQuota(std::string_view ns, std::uint64_t quota_bytes) {
  const auto quota = quotas_.find(ns);
  if (quota == quotas_.end()) return NotFound("host tier: the namespace has no quota to change");
  if (quota_bytes == 0) return OutOfRange("host tier: quota 0");
  quota->second.limit->store(quota_bytes, std::memory_order_relaxed);
  std::uint64_t evicted = 0;
  while (quota->second.used->load(std::memory_order_acquire) > quota_bytes &&
         EvictOne(ns, /*namespace_only=*/true) != 0) {
    ++evicted;
  }
  return evicted;
}

Status HostTier::EnableSharedArena(std::uint64_t headroom_bytes) {
  if (shared_arena_) return Status::Ok();
  KVD_ASSIGN_OR_RETURN(
      shared_arena_, ShmArena::Create(capacity_.load(std::memory_order_relaxed) + headroom_bytes));
  arena_ = shared_arena_;  // the private arena goes with its last value (none: called before use)
  return Status::Ok();
}

HostTierStats HostTier::stats() const {
  HostTierStats st;
  if (arena_) {
    st.arena_bytes = arena_->size();
    st.arena_used = arena_->stats().used;
    st.arena_shared = arena_->shared();
  }
  st.arena_fallbacks = arena_fallbacks_.load();
  st.arena_evictions = arena_evictions_.load();
  st.bytes = used_->load(std::memory_order_acquire);
  st.capacity = capacity_.load(std::memory_order_relaxed);
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    st.chunks += shard->index.size();
  }
  st.hits = hits_.load();
  st.misses = misses_.load();
  st.evictions = evictions_.load();
  st.inserts = inserts_.load();
  st.rejected = rejected_.load();
  for (const auto& [ns, q] : quotas_) {
    st.namespaces.push_back({ns, q.used->load(), q.limit->load()});
  }
  return st;
}

}  // namespace kvdepot::daemon
