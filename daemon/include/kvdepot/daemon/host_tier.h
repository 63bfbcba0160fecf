// The host-memory tier: a sharded index of immutable values under one byte capacity.
//
// Capacity contract: every byte of a value (plus its key and a fixed per-entry overhead) is
// charged from the moment Allocate() returns until the last reference to the value is dropped —
// in-flight PUTs and values still being sent to a reader included — so the tier's memory never
// exceeds its capacity. Allocate() evicts (per the eviction policy) to make room and fails with
// kResourceExhausted when even an empty index would not free enough (everything left is in use).
// A value being sent is never freed under the reader: eviction only drops the index's reference.
//
// Value memory: values live in one arena the tier owns for its whole life (ShmArena): the shared
// memfd arena with HostTierOptions::shared_memory (EnableSharedArena), a private anonymous mapping
// otherwise, of capacity plus headroom bytes of address space. Pages are faulted in once, when
// first used, and never returned to the kernel, so a steady stream of PUTs of any size, from any
// thread, takes no page faults. When no free range is large enough (fragmentation, values held
// beyond the capacity, a capacity raised past the arena), Allocate() evicts at most one value's
// worth more to free one, then places the value in heap memory (HostTierStats::arena_fallbacks).
//
// Eviction order is global, whatever the shard count: every entry carries a stamp from one
// counter (its last access under LRU, its insertion under SIEVE), each shard publishes the key of
// its next victim (the stamp; under SIEVE with its hand's sweep), and EvictOne takes the victim
// of the shard whose key is oldest, replaying one LRU list or one SIEVE hand (docs/eviction.md).
// The eviction path reads atomics per shard and locks only the shard it evicts from.
//
// Thread-safety: every method may be called concurrently. Each shard has its own mutex, held only
// for in-memory index operations (no I/O, no allocation of value memory).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/protocol/tier.h"

namespace kvdepot::daemon {

class HostTier;
class ShmArena;

// An immutable stored value (a chunk container, or any bytes a client PUTs).
//
// Its memory starts on a kValueAlignment boundary and is padded with zeros to a multiple of it,
// so the SSD tier reads and writes it with O_DIRECT without a bounce buffer (padded_bytes()).
class Value {
 public:
  static constexpr std::size_t kAlignment = 4096;

  ~Value();
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  // bytes() followed by zero padding up to a multiple of kAlignment.
  std::span<const std::byte> padded_bytes() const { return {data_, padded_size()}; }
  std::uint64_t charge() const { return charge_; }
  // Writable only between Allocate() and Insert(): the owner fills the value, then publishes it.
  std::span<std::byte> mutable_bytes() { return {data_, size_}; }
  std::span<std::byte> mutable_padded_bytes() { return {data_, padded_size()}; }

  // The XXH3-64 checksum of an SSD-tier copy known to hold these bytes, or 0 when none is known.
  // Set by the SSD tier once it wrote or read the value; lets eviction skip demoting a value the
  // SSD tier already has.
  std::uint64_t ssd_checksum() const { return ssd_checksum_.load(std::memory_order_acquire); }
  void set_ssd_checksum(std::uint64_t checksum) const {
    ssd_checksum_.store(checksum, std::memory_order_release);
  }

  // Where the value lies in the host tier's shared-memory arena (HostTier::EnableSharedArena), or
  // nullopt for a value in private memory (the private arena, or heap memory when the arena had
  // no free range for it).
  std::optional<std::uint64_t> arena_offset() const;
  // Whether the value lies in the tier's arena (shared or private), not in heap memory.
  bool in_arena() const { return arena_ != nullptr; }

  // Moves this value's charge from the tier (and namespace) it was allocated in to `counter`,
  // adding it there only if the result stays within `limit`; false (nothing changed) otherwise.
  // Used when an evicted value waits for its SSD write. Call at most once, holding a reference.
  bool TransferCharge(const std::shared_ptr<std::atomic<std::uint64_t>>& counter,
                      std::uint64_t limit) const;

 private:
  friend class HostTier;
  // Memory at `arena_offset` of `arena` (a range of at least padded_size() that the value then
  // owns), or from malloc when `arena` is null (std::bad_alloc when that fails).
  Value(std::shared_ptr<std::atomic<std::uint64_t>> used,
        std::shared_ptr<std::atomic<std::uint64_t>> namespace_used, std::uint64_t charge,
        std::size_t size, std::shared_ptr<ShmArena> arena, std::uint64_t arena_offset);
  std::size_t padded_size() const { return (size_ + kAlignment - 1) / kAlignment * kAlignment; }
  // The counters charged (the tier's outlives the tier); mutable for TransferCharge only.
  mutable std::shared_ptr<std::atomic<std::uint64_t>> used_;
  mutable std::shared_ptr<std::atomic<std::uint64_t>> namespace_used_;  // null without a quota
  std::uint64_t charge_;
  std::size_t size_;
  std::byte* allocation_ = nullptr;  // malloc'd: padded_size() + kAlignment bytes (no arena)
  std::byte* data_;                  // the first kAlignment boundary in it (or in the arena)
  std::shared_ptr<ShmArena> arena_;  // set when data_ is arena memory
  std::uint64_t arena_offset_ = 0;
  mutable std::atomic<std::uint64_t> ssd_checksum_{0};
};
using ValueRef = std::shared_ptr<const Value>;

enum class EvictionPolicy { kLru, kSieve };
Result<EvictionPolicy> ParseEvictionPolicy(std::string_view name);  // "lru", "sieve"
std::string_view EvictionPolicyName(EvictionPolicy policy);

// The namespace of a key: the first 16 bytes of a 48-byte chunk key (docs/format.md §2), or ""
// for any other key (the default namespace, which has no quota).
std::string_view KeyNamespace(std::string_view key);

struct HostTierOptions {
  std::uint64_t capacity_bytes = 1ull << 30;
  // LRU measured best on the replayed serving trace (docs/eviction.md).
  EvictionPolicy policy = EvictionPolicy::kLru;
  std::uint32_t shards = 16;  // rounded up to a power of two
  // Per-namespace byte quotas (key: the 16-byte namespace id). A namespace over its quota evicts
  // its own entries first; it never evicts another namespace's to grow past its quota.
  std::map<std::string, std::uint64_t> namespace_quotas;
  // Values live in a memfd arena of capacity_bytes that same-host clients map read-only
  // (protocol MAP / LEASE_GET, docs/gpu-tier.md); applied by HostTier::EnableSharedArena().
  bool shared_memory = false;
  // Address space of the private value arena beyond capacity_bytes (virtual until used): room
  // for fragmentation and for evicted values that wait for their SSD write. nullopt: a quarter
  // of the capacity, at least kDefaultMinArenaHeadroom. 0 is allowed (a tight arena).
  std::optional<std::uint64_t> arena_headroom_bytes;
  // The SSD tier's default write buffer (ssd.write_buffer): under write-back, evicted values
  // keep their arena ranges until written.
  static constexpr std::uint64_t kDefaultMinArenaHeadroom = 256ull << 20;

  static HostTierOptions With(std::uint64_t capacity, EvictionPolicy policy = EvictionPolicy::kLru,
                              std::uint32_t shards = 16) {
    HostTierOptions o;
    o.capacity_bytes = capacity;
    o.policy = policy;
    o.shards = shards;
    return o;
  }
};

struct NamespaceUsage {
  std::string id;  // 16 bytes
  std::uint64_t bytes = 0;
  std::uint64_t quota = 0;
};

struct HostTierStats {
  std::uint64_t bytes = 0;  // charged now (stored + in flight)
  std::uint64_t capacity = 0;
  std::uint64_t chunks = 0;  // entries in the index
  std::uint64_t hits = 0;    // Get() found the key
  std::uint64_t misses = 0;  // Get() did not
  std::uint64_t evictions = 0;
  std::uint64_t inserts = 0;
  std::uint64_t rejected = 0;              // Allocate() failures
  std::uint64_t arena_bytes = 0;           // value arena size, shared or private (0: none)
  std::uint64_t arena_used = 0;            // bytes of live ranges in it
  std::uint64_t arena_fallbacks = 0;       // values placed in heap memory for want of a range
  std::uint64_t arena_evictions = 0;       // entries evicted beyond the capacity to free a range
  bool arena_shared = false;               // the value arena is the shared memfd arena
  std::vector<NamespaceUsage> namespaces;  // those with a quota
};

class HostTier {
 public:
  // Bytes charged per entry on top of its padded value, its alignment slack and its key (index
  // node, policy links, bookkeeping).
  static constexpr std::uint64_t kEntryOverhead = 128;
  // What a value of `value_bytes` under a key of `key_bytes` is charged.
  static constexpr std::uint64_t ChargeFor(std::size_t key_bytes, std::size_t value_bytes) {
    return (value_bytes + Value::kAlignment - 1) / Value::kAlignment * Value::kAlignment +
           Value::kAlignment + key_bytes + kEntryOverhead;
  }

  // Called with each entry the policy evicts (not with erased or replaced ones), after the
  // shard's lock is released, on the thread whose Allocate() evicted it. It returns whether the
  // value may leave memory; false puts the entry back as its shard's next victim and eviction
  // takes the oldest victim of the other shards (an Allocate() that can evict nothing then fails
  // with kResourceExhausted: backpressure instead of loss). Set before use.
  using EvictionListener = std::function<bool(std::string_view key, const ValueRef& value)>;
  void SetEvictionListener(EvictionListener listener) { eviction_listener_ = std::move(listener); }

  explicit HostTier(const HostTierOptions& options);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // A writable value of `size` bytes for `key`, charged against the capacity (evicting as needed).
  // kResourceExhausted when it cannot fit; kOutOfRange when it could never fit.
  Result<std::shared_ptr<Value>> Allocate(std::string_view key, std::size_t size);

  // Publishes a value under `key`, replacing any previous one. Precondition: from Allocate().
  void Insert(std::string_view key, ValueRef value);
  // Publishes `value` only if `key` is absent (a promotion must not replace a newer PUT).
  bool InsertIfAbsent(std::string_view key, ValueRef value);

  // The value, or nullptr. Counts a hit or a miss and marks the entry as used for eviction.
  ValueRef Get(std::string_view key);

  // Whether the key is present, without counting or touching the eviction policy (LOOKUP).
  bool Contains(std::string_view key) const;

  // Removes the key; false when absent.
  bool Erase(std::string_view key);

  // Up to `limit` keys starting with `prefix` and greater than `cursor`, in byte order; the next
  // cursor is the last key returned when more may follow, empty when the listing is complete.
  protocol::ScanResult Scan(std::string_view prefix, std::string_view cursor,
                            std::uint32_t limit) const;

  // Every entry with its value, most recently used first (by last access; under SIEVE, accesses
  // within the same millisecond are ordered by insertion). A snapshot: entries inserted or
  // removed meanwhile may or may not appear. For writing the tier out at shutdown.
  std::vector<std::pair<std::string, ValueRef>> EntriesByRecency() const;

  // Changes the byte capacity at run time (SIGHUP reload). Evicts until the charged bytes fit the
  // new capacity or nothing more can be evicted; returns the number of entries evicted. Values
  // still in use (being received or sent) cannot be evicted: until they are released the tier
  // may stay above a lowered capacity, and new allocations fail until there is room. Allocations
  // racing with the call may be charged against either capacity. kOutOfRange for 0.
  Result<std::uint64_t> SetCapacity(std::uint64_t capacity_bytes);

  // Changes the quota of a namespace that has one (a namespace without a quota cannot gain one
  // at run time: kNotFound). Evicts within the namespace down to the new quota as SetCapacity.
  Result<std::uint64_t> SetNamespaceQuota(std::string_view ns, std::uint64_t quota_bytes);

  // Creates the shared-memory arena (capacity_bytes + headroom_bytes, fixed for the life of the
  // tier) in place of the private one: values allocated from then on live in it while it has a
  // free range large enough, in heap memory otherwise (e.g. after the capacity was raised by a
  // reload). headroom_bytes covers memory that values hold beyond the capacity, e.g. evicted
  // values waiting in the SSD tier's write buffer. Call once, before use. Errors from
  // ShmArena::Create.
  Status EnableSharedArena(std::uint64_t headroom_bytes = 0);
  // The shared arena, or null without one (the private arena is never handed out).
  const std::shared_ptr<ShmArena>& arena() const { return shared_arena_; }

  HostTierStats stats() const;
  std::uint64_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  EvictionPolicy policy() const { return policy_; }

 private:
  struct Shard;
  Shard& ShardFor(std::string_view key) const;
  // Which of a shard's eviction orders holds `key`: 0 for keys outside every quota namespace,
  // 1 + the quota's position otherwise.
  std::uint32_t OrderFor(std::string_view key) const;
  // Evicts the globally next victim (the oldest stamp over all shards); with namespace_only, the
  // next victim of namespace `ns` (which has a quota). Returns the victim's charge (freed when
  // no one else holds the value), 0 when there is nothing to evict.
  std::uint64_t EvictOne(std::string_view ns = {}, bool namespace_only = false);
  // Adds `charge` to `counter` if it stays within `limit`, evicting (within `ns` when
  // namespace_only) as needed. False when nothing more can be evicted.
  bool Reserve(std::atomic<std::uint64_t>& counter, std::uint64_t limit, std::uint64_t charge,
               std::string_view ns, bool namespace_only);
  // A range of the arena for a value of `padded` bytes, evicting up to `padded` more bytes of
  // entries to free one; nullopt when there is no arena or still no range.
  std::optional<std::uint64_t> PlaceInArena(std::uint64_t padded);

  std::atomic<std::uint64_t> capacity_;
  const EvictionPolicy policy_;
  std::shared_ptr<std::atomic<std::uint64_t>> used_;
  std::vector<std::unique_ptr<Shard>> shards_;
  // Eviction stamps: taken under the shard's lock, so each shard's orders stay sorted by them.
  std::atomic<std::uint64_t> clock_{0};
  // Where an order's next victim stands: {SIEVE sweeps ahead of the global hand, stamp}.
  using VictimKey = std::pair<std::uint64_t, std::uint64_t>;
  // Per order index (OrderFor), the sweep of the last SIEVE victim: the global hand's.
  std::unique_ptr<std::atomic<std::uint64_t>[]> sweeps_;
  struct Quota {
    std::unique_ptr<std::atomic<std::uint64_t>> limit;  // changed by SetNamespaceQuota
    std::shared_ptr<std::atomic<std::uint64_t>> used;
    std::uint32_t order = 0;  // its eviction order in every shard (OrderFor)
  };
  std::map<std::string, Quota, std::less<>> quotas_;  // the set of keys is fixed at construction
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, evictions_{0}, inserts_{0}, rejected_{0};
  std::atomic<std::uint64_t> arena_fallbacks_{0}, arena_evictions_{0};
  EvictionListener eviction_listener_;
  std::shared_ptr<ShmArena> arena_;         // where values go: shared_arena_ or a private one
  std::shared_ptr<ShmArena> shared_arena_;  // set by EnableSharedArena
};

}  // namespace kvdepot::daemon
