// The SSD tier: values appended to large segment files with O_DIRECT (io_uring, or a pread/pwrite
// thread pool where io_uring is unavailable), indexed by RocksDB. Formats and the durability
// contract: docs/durability.md.
//
// Capacity: the segment files never exceed `capacity_bytes` together. When a new segment is
// needed, the oldest is dropped whole (its chunks become misses; hot chunks live in the host
// tier, which demotes them again when it evicts them). A restart does not cost a segment: the
// segment being written when the daemon stopped takes new writes again after its last indexed
// record, and other segments are cut to their last indexed record.
//
// Memory: values waiting to be written are charged either to the host tier (write-through) or,
// once evicted from it, to this tier's write buffer (`write_buffer_bytes`); a demotion that does
// not fit the buffer is refused, and the host tier keeps the value until the writer catches up.
//
// Integrity: every read verifies the record's key, length and XXH3-64 checksum; a copy that does
// not verify is never served: it is reported as kNotFound, removed and counted.
//
// Thread-safety: every public method may be called concurrently from any thread and never
// waits for the disk (Erase appends to RocksDB's log, a buffered write into the page cache);
// completions run on the tier's own threads. Open() and Close() are called
// from one controlling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/protocol/tier.h"

namespace kvdepot::daemon {

namespace ssd {
struct IoRequest;
}

// What survives a crash under each setting: docs/durability.md. Under every setting the index
// (writes and deletes) goes through RocksDB's log, so a killed process loses nothing the tier had
// indexed and brings back nothing it had erased.
enum class SsdDurability {
  kNone,   // nothing is synced: a power loss may lose or undo anything not flushed
  kAsync,  // segments and the index's log synced every `sync_interval_ms`
  kSync,   // a PUT is acknowledged once its payload and index entry are on stable storage
};
enum class SsdWritePolicy { kWriteBack, kWriteThrough };
enum class SsdPromotion { kAlways, kNever, kSecondHit };
enum class SsdIoPath { kAuto, kIoUring, kPread };

Result<SsdDurability> ParseSsdDurability(std::string_view name);    // none|async|sync
Result<SsdWritePolicy> ParseSsdWritePolicy(std::string_view name);  // write-back|write-through
Result<SsdPromotion> ParseSsdPromotion(std::string_view name);      // always|never|second-hit
Result<SsdIoPath> ParseSsdIoPath(std::string_view name);            // auto|io_uring|pread
std::string_view SsdDurabilityName(SsdDurability d);
std::string_view SsdWritePolicyName(SsdWritePolicy p);
std::string_view SsdPromotionName(SsdPromotion p);
std::string_view SsdIoPathName(SsdIoPath p);

struct SsdTierOptions {
  std::string dir;  // empty: no SSD tier
  std::uint64_t capacity_bytes = 64ull << 30;
  std::uint64_t segment_bytes = 256ull << 20;
  std::uint64_t write_buffer_bytes = 256ull << 20;
  SsdDurability durability = SsdDurability::kAsync;
  SsdWritePolicy write_policy = SsdWritePolicy::kWriteBack;
  SsdPromotion promotion = SsdPromotion::kAlways;
  SsdIoPath io_path = SsdIoPath::kAuto;
  std::uint32_t queue_depth = 64;         // io_uring entries / pread threads ×8
  std::uint32_t sync_interval_ms = 1000;  // kAsync
  // Warm restarts: at shutdown kvdepotd writes the host tier's values this tier lacks, most
  // recently used first, for at most flush_budget (shutdown_flush.h). Read by kvdepotd only.
  bool flush_on_shutdown = true;
  std::chrono::milliseconds flush_budget{20000};
  // Called under the tier's index lock when a key becomes readable from the tier (its write was
  // indexed) or stops being readable (segment eviction, Erase, a failed checksum); not for the
  // entries found by Open. Must be quick and must not call into the tier (KV events, which only
  // queue it: docs/events.md). May be empty.
  std::function<void(std::string_view key, bool readable)> on_index_change;
  // Tests only: fail chosen requests (see ssd::FaultHook).
  std::function<int(const ssd::IoRequest&)> fault;
};

struct SsdTierStats {
  std::uint64_t bytes = 0;       // segment bytes on disk (live + garbage)
  std::uint64_t live_bytes = 0;  // bytes of indexed values
  std::uint64_t capacity = 0;
  std::uint64_t chunks = 0;
  std::uint64_t segments = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;  // chunks dropped with their segment
  std::uint64_t segments_evicted = 0;
  std::uint64_t demotions = 0;          // host evictions written here
  std::uint64_t demotions_dropped = 0;  // ... that can never be written (larger than a segment)
  std::uint64_t demotions_refused = 0;  // ... refused for now: the write buffer was full
  std::uint64_t promotions = 0;         // SSD hits inserted into the host tier
  std::uint64_t reads = 0;
  std::uint64_t read_bytes = 0;
  std::uint64_t writes = 0;
  std::uint64_t write_bytes = 0;
  std::uint64_t write_errors = 0;
  std::uint64_t read_errors = 0;
  std::uint64_t checksum_failures = 0;
  std::uint64_t write_buffer_bytes = 0;  // charged to the write buffer now
  std::uint64_t recovered_chunks = 0;    // found valid at start
  std::uint64_t recovery_dropped = 0;    // index entries dropped at start
  std::string io_path;                   // "io_uring" or "pread"
  bool direct_io = true;                 // false where the file system refused O_DIRECT
};

class SsdTier {
 public:
  using ReadCallback = std::function<void(Result<ValueRef>)>;
  using WriteCallback = std::function<void(Status)>;
  // Allocates the buffer a read fills (the caller charges it, e.g. to the host tier).
  using Allocator = std::function<Result<std::shared_ptr<Value>>(std::size_t size)>;

  // Opens (creating if needed) the tier in options.dir, reconciles the index with the segment
  // files, and starts its threads. Errors name the directory and the failing step.
  static Result<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options);
  ~SsdTier();  // Close()s
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // Finishes every queued write and read, syncs, flushes and closes the index and stops the
  // threads. Afterwards only stats() may be called.
  void Close();

  // Queues `value` for writing under `key`; `done` (optional) runs after it is as durable as
  // configured, or with the error (kResourceExhausted for ENOSPC, kIoError, kOutOfRange for a
  // value larger than a segment).
  void Write(std::string_view key, ValueRef value, WriteCallback done);

  // A value the host tier evicts: queued for writing unless this tier already holds these bytes
  // or has them queued. False when the write buffer is full: the value must stay in memory for
  // now (the host tier keeps it; the PUT that needed room gets kResourceExhausted). A value that
  // can never be written (larger than a segment) is dropped and counted.
  bool Demote(std::string_view key, const ValueRef& value);

  // Reads `key` into a buffer from `allocate`; kNotFound when absent or when the copy failed
  // verification. `done` runs on an I/O thread (or inline for a miss or an allocation error).
  void Read(std::string_view key, const Allocator& allocate, ReadCallback done);

  bool Contains(std::string_view key) const;
  // Whether this tier holds exactly `value` for `key` (indexed with its checksum) or has that
  // value's write queued: writing it again would add nothing.
  bool Holds(std::string_view key, const ValueRef& value) const;
  // Whether a hit on `key` should be promoted now (per the promotion policy).
  bool ShouldPromote(std::string_view key);
  void CountPromotion();  // a hit was copied into the host tier
  // Removes `key` (and voids its queued writes). An indexed copy's entry is removed from RocksDB's
  // log before this returns (a buffered write, no sync), so a killed process never serves the old
  // value again once the caller has acknowledged the erase. True when there was a copy.
  bool Erase(std::string_view key);
  protocol::ScanResult Scan(std::string_view prefix, std::string_view cursor,
                            std::uint32_t limit) const;

  SsdTierStats stats() const;
  const SsdTierOptions& options() const;

  class Impl;

 private:
  explicit SsdTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon
