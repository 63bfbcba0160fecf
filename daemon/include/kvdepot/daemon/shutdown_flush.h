// Warm restarts (docs/durability.md, "Planned restarts"): at shutdown, the host tier's values
// that the SSD tier does not hold yet are written to it, most recently used first, within a time
// budget, so that the next start serves them from the SSD at once (the SSD tier's index is
// recovered at Open()).
//
// Call after every front end has stopped (no PUT races the flush) and before SsdTier::Close().
#pragma once

#include <chrono>
#include <cstdint>

#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/ssd_tier.h"

namespace kvdepot::daemon {

// What a flush did. Every host entry lands in exactly one of: already held by the SSD tier,
// written, failed, or left (the budget ran out, or writing it could have evicted segments this
// flush wrote).
struct FlushReport {
  std::uint64_t host_chunks = 0;  // entries in the host tier when the flush began
  std::uint64_t already_on_ssd = 0;
  std::uint64_t written_chunks = 0;
  std::uint64_t written_bytes = 0;
  std::uint64_t failed_chunks = 0;  // the SSD tier reported an error (e.g. ENOSPC)
  std::uint64_t left_chunks = 0;
  std::uint64_t left_bytes = 0;
  bool budget_exhausted = false;  // entries were left because the time budget ran out
  bool capacity_reached = false;  // ... because the SSD tier's capacity (less a segment) was met
  std::chrono::milliseconds elapsed{0};
};

// Writes `host`'s entries that `ssd` does not hold, most recently used first. Stops queueing new
// writes once `budget` has elapsed (writes already queued — at most `window_bytes` — complete,
// so the whole call may overrun the budget by the time they take) or once the bytes written
// would exceed the SSD tier's capacity less one segment (beyond it, the tier would drop the
// oldest segments, which hold what this flush wrote first). A budget of 0 writes nothing.
// Blocks until every write it queued completed; never throws.
FlushReport FlushHostToSsd(const HostTier& host, SsdTier& ssd, std::chrono::milliseconds budget,
                           std::uint64_t window_bytes = 64ull << 20);

}  // namespace kvdepot::daemon
