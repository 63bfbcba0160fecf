// ShmArena: the host tier's value arena. Either shared (docs/gpu-tier.md): one memfd of a fixed
// size, mapped read-write by the daemon and sealed (F_SEAL_SHRINK | F_SEAL_GROW |
// F_SEAL_FUTURE_WRITE) so that a client that receives its descriptor over SCM_RIGHTS can map it
// read-only only: it can neither write the daemon's values nor resize the file under the daemon
// (no SIGBUS). Or private: an anonymous MAP_NORESERVE mapping that no one else sees.
//
// Either way the arena is address space the daemon owns for its whole life: a page is faulted in
// when a value first uses it and stays (the arena never returns memory to the kernel), so reusing
// a range costs no page fault. Its resident size is at most the highest offset ever used.
//
// Ranges are 4 KiB-aligned and come from a RangeAllocator; a range is returned by Free. Which
// ranges are live, and for how long, is the host tier's business (a Value owns its range).
//
// Thread-safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "kvdepot/base/range_allocator.h"
#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

class ShmArena {
 public:
  static constexpr std::uint64_t kGranularity = 4096;

  // A sealed memfd of `bytes` (rounded up to 4 KiB), mapped. kIoError naming the call that
  // failed (memfd_create, ftruncate, mmap, fcntl F_ADD_SEALS).
  static Result<std::shared_ptr<ShmArena>> Create(std::uint64_t bytes);
  // A private anonymous mapping of `bytes` (rounded up to 4 KiB), reserved without committing
  // memory (MAP_NORESERVE) and advised for transparent huge pages. kIoError when mmap fails
  // (e.g. under vm.overcommit_memory=2 without room for it).
  static Result<std::shared_ptr<ShmArena>> CreatePrivate(std::uint64_t bytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  std::optional<std::uint64_t> Allocate(std::uint64_t bytes) { return alloc_->Allocate(bytes); }
  void Free(std::uint64_t offset) { (void)alloc_->Free(offset); }

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  // The descriptor to pass to clients (owned by the arena; sendmsg duplicates it); -1 for a
  // private arena.
  int fd() const { return fd_; }
  bool shared() const { return fd_ >= 0; }
  RangeAllocatorStats stats() const { return alloc_->stats(); }

 private:
  ShmArena() = default;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  std::unique_ptr<RangeAllocator> alloc_;
};

}  // namespace kvdepot::daemon
