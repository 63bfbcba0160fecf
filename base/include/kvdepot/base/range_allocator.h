// RangeAllocator: carves [0, capacity) of one pre-allocated region (the GPU tier's cudaMalloc'd
// pool, the host tier's shared-memory arena) into ranges. Best-fit over a free list kept sorted
// by offset and by size; neighbouring free ranges are merged on Free, so a region that is empty
// again is one free range again.
//
// Sizes are rounded up to `granularity` (a power of two, at least 256; 4 KiB for both tiers) and
// every offset is a multiple of it. Allocate never exceeds the capacity: the bytes in use
// (rounded) are at most capacity at all times.
//
// Thread-safety: every method may be called concurrently (one mutex, held for O(log n) map
// operations only). Memory: O(number of free ranges), independent of the region's size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "kvdepot/base/status.h"

namespace kvdepot {

struct RangeAllocatorStats {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;          // rounded bytes of live ranges
  std::uint64_t ranges = 0;        // live ranges
  std::uint64_t free_ranges = 0;   // fragments of free space
  std::uint64_t largest_free = 0;  // the largest range an Allocate can still return
  std::uint64_t failures = 0;      // Allocate calls that found no range
};

class RangeAllocator {
 public:
  // kInvalidArgument unless granularity is a power of two >= 256 and capacity is a positive
  // multiple of it.
  static Result<std::unique_ptr<RangeAllocator>> Create(std::uint64_t capacity,
                                                        std::uint64_t granularity);

  // The offset of a free range of at least `bytes` (rounded up to the granularity), or nullopt
  // when no free range is large enough (bytes == 0 also gives nullopt).
  std::optional<std::uint64_t> Allocate(std::uint64_t bytes);
  // Returns a range from Allocate. kInvalidArgument (nothing changed) for an offset that is not
  // the start of a live range.
  Status Free(std::uint64_t offset);
  // The rounded size of the live range at `offset`, or 0.
  std::uint64_t SizeOf(std::uint64_t offset) const;

  std::uint64_t RoundUp(std::uint64_t bytes) const {
    return (bytes + granularity_ - 1) & ~(granularity_ - 1);
  }
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t granularity() const { return granularity_; }
  RangeAllocatorStats stats() const;

 private:
  RangeAllocator(std::uint64_t capacity, std::uint64_t granularity);
  void InsertFree(std::uint64_t offset, std::uint64_t size);            // mu_ held
  void EraseFree(std::map<std::uint64_t, std::uint64_t>::iterator it);  // mu_ held

  const std::uint64_t capacity_;
  const std::uint64_t granularity_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;     // offset -> size
  std::multimap<std::uint64_t, std::uint64_t> free_by_size_;  // size -> offset
  std::map<std::uint64_t, std::uint64_t> live_;               // offset -> rounded size
  std::uint64_t used_ = 0;
  std::uint64_t failures_ = 0;
};

}  // namespace kvdepot
