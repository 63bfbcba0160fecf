#include "kvdepot/daemon/shm_arena.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1
#endif

namespace kvdepot::daemon {
namespace {

Status Errno(const std::string& what) {
  return IOError("shm arena: " + what + ": " + std::strerror(errno));
}

}  // namespace

Result<std::shared_ptr<ShmArena>> ShmArena::Create(std::uint64_t bytes) {
  const std::uint64_t size = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  std::shared_ptr<ShmArena> a(new ShmArena());
  KVD_ASSIGN_OR_RETURN(a->alloc_, RangeAllocator::Create(size, kGranularity));
  a->fd_ = ::memfd_create("kvdepot-host-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (a->fd_ < 0) return Errno("memfd_create");
  if (::ftruncate(a->fd_, static_cast<off_t>(size)) != 0) {
    return Errno("ftruncate to " + std::to_string(size) + " bytes");
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd_, 0);
  if (p == MAP_FAILED) return Errno("mmap of " + std::to_string(size) + " bytes");
  a->base_ = static_cast<std::byte*>(p);
  a->size_ = size;
  // Existing (the daemon's) writable mapping stays writable; clients can only map read-only.
  if (::fcntl(a->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0) {
    return Errno("fcntl F_ADD_SEALS (needs Linux >= 5.1)");
  }
  return a;
}

Result<std::shared_ptr<ShmArena>> ShmArena::CreatePrivate(std::uint64_t bytes) {
  const std::uint64_t size = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  std::shared_ptr<ShmArena> a(new ShmArena());
  KVD_ASSIGN_OR_RETURN(a->alloc_, RangeAllocator::Create(size, kGranularity));
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Errno("private mmap of " + std::to_string(size) + " bytes");
  a->base_ = static_cast<std::byte*>(p);
  a->size_ = size;
  // Fewer first-touch faults and TLB misses for multi-MiB values; advice only (the kernel may
  // have THP off), so its failure changes nothing.
  (void)::madvise(p, size, MADV_HUGEPAGE);
  return a;
}

ShmArena::~ShmArena() {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kvdepot::daemon
