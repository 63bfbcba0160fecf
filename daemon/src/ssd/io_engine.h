// Asynchronous block I/O for the SSD tier: io_uring, or a pread/pwrite thread pool where io_uring
// is unavailable. Both run each request's completion on their own thread.
//
// Requests address whole blocks of an O_DIRECT file: buffer addresses, lengths and offsets must
// be multiples of the file system's logical block size (the tier uses 4096 throughout).
//
// Thread-safety: Submit() may be called from any thread and never blocks on I/O. Stop() is called
// once, from one thread; it waits for every submitted request to complete.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon::ssd {

enum class IoKind { kRead, kWrite, kDataSync, kAllocate };

struct IoRequest {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  std::uint64_t offset = 0;  // kAllocate: 0
  std::uint64_t length = 0;  // kAllocate: the bytes to reserve; read/write: derived from `iov`
  std::vector<iovec> iov;    // read/write buffers, in file order
  // Called once on the engine's thread with the bytes transferred (read/write; a short transfer
  // is reported as -EIO), 0 (sync) or -errno.
  std::function<void(std::int64_t result)> done;
  // Kept alive until `done` has run (buffers, the file's descriptor holder).
  std::shared_ptr<void> keep_alive;
};

// Test hook: return -errno to fail a request instead of running it (e.g. -ENOSPC, -EIO), or 0.
using FaultHook = std::function<int(const IoRequest&)>;

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void Submit(std::vector<IoRequest> requests) = 0;
  virtual void Stop() = 0;
  virtual std::string_view name() const = 0;  // "io_uring" or "pread"
};

// An io_uring engine with `queue_depth` submission entries, or kUnavailable naming why it could
// not be set up (kernel, seccomp, memlock).
Result<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth, FaultHook fault);

// `threads` threads running blocking preadv/pwritev/fdatasync/fallocate.
std::unique_ptr<IoEngine> MakeThreadEngine(unsigned threads, FaultHook fault);

// Runs one request synchronously on the calling thread (used by both engines and at start-up).
std::int64_t RunBlocking(const IoRequest& request);

}  // namespace kvdepot::daemon::ssd
