#include "kvdepot/base/range_allocator.h"

#include <string>

namespace kvdepot {

Result<std::unique_ptr<RangeAllocator>> RangeAllocator::Create(std::uint64_t capacity,
                                                               std::uint64_t granularity) {
  if (granularity < 256 || (granularity & (granularity - 1)) != 0) {
    return InvalidArgument("range allocator: granularity " + std::to_string(granularity) +
                           " is not a power of two >= 256");
  }
  if (capacity == 0 || capacity % granularity != 0) {
    return InvalidArgument("range allocator: capacity " + std::to_string(capacity) +
                           " is not a positive multiple of the granularity " +
                           std::to_string(granularity));
  }
  return std::unique_ptr<RangeAllocator>(new RangeAllocator(capacity, granularity));
}

RangeAllocator::RangeAllocator(std::uint64_t capacity, std::uint64_t granularity)
    : capacity_(capacity), granularity_(granularity) {
  InsertFree(0, capacity);
}

void RangeAllocator::InsertFree(std::uint64_t offset, std::uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void RangeAllocator::EraseFree(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  auto [lo, hi] = free_by_size_.equal_range(it->second);
  for (auto s = lo; s != hi; ++s) {
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  }
  free_by_offset_.erase(it);
}

std::optional<std::uint64_t> RangeAllocator::Allocate(std::uint64_t bytes) {
  if (bytes == 0 || bytes > capacity_) return std::nullopt;
  const std::uint64_t size = RoundUp(bytes);
  std::lock_guard lock(mu_);
  auto fit = free_by_size_.lower_bound(size);  // best fit: the smallest range that holds it
  if (fit == free_by_size_.end()) {
    ++failures_;
    return std::nullopt;
  }
  const std::uint64_t offset = fit->second;
  const std::uint64_t have = fit->first;
  EraseFree(free_by_offset_.find(offset));
  if (have > size) InsertFree(offset + size, have - size);
  live_.emplace(offset, size);
  used_ += size;
  return offset;
}

Status RangeAllocator::Free(std::uint64_t offset) {
  std::lock_guard lock(mu_);
  auto live = live_.find(offset);
  if (live == live_.end()) {
    return InvalidArgument("range allocator: offset " + std::to_string(offset) +
                           " is not the start of a live range");
  }
  std::uint64_t start = offset;
  std::uint64_t size = live->second;
  used_ -= size;
  live_.erase(live);
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    auto after = std::next(next);
    EraseFree(next);
    next = after;
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
  return Status::Ok();
}

std::uint64_t RangeAllocator::SizeOf(std::uint64_t offset) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second;
}

RangeAllocatorStats RangeAllocator::stats() const {
  std::lock_guard lock(mu_);
  RangeAllocatorStats s;
  s.capacity = capacity_;
  s.used = used_;
  s.ranges = live_.size();
  s.free_ranges = free_by_offset_.size();
  s.largest_free = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  s.failures = failures_;
  return s;
}

}  // namespace kvdepot
