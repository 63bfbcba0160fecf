#include "ssd/io_engine.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace kvdepot::daemon::ssd {
namespace {

std::uint64_t IovBytes(const std::vector<iovec>& iov) {
  std::uint64_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

// A completed transfer shorter than asked is an error: the tier never reads past a record.
std::int64_t CheckLength(const IoRequest& r, std::int64_t result) {
  if (result < 0) return result;
  if ((r.kind == IoKind::kRead || r.kind == IoKind::kWrite) &&
      static_cast<std::uint64_t>(result) != IovBytes(r.iov)) {
    return -EIO;
  }
  return result;
}

// Requests handed over by Submit(), waiting for the engine's thread(s).
class RequestQueue {
 public:
  void Push(std::vector<IoRequest> requests) {
    std::lock_guard lock(mu_);
    for (IoRequest& r : requests) queue_.push_back(std::move(r));
    cv_.notify_all();
  }
  std::deque<IoRequest> TakeAll() {
    std::lock_guard lock(mu_);
    return std::exchange(queue_, {});
  }
  // Blocks until a request is queued or the queue is closed; nullopt-like false when closed and
  // empty.
  bool PopWait(IoRequest& out) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || closed_; });
    if (queue_.empty()) return false;
    out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  bool closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoRequest> queue_;
  bool closed_ = false;
};

void Complete(IoRequest& r, std::int64_t result) {
  if (r.done) r.done(CheckLength(r, result));
  r.keep_alive.reset();
}

// ---- io_uring -------------------------------------------------------------------------------
// One thread owns the ring. Submit() queues requests and writes an eventfd that the ring itself
// watches (a pending read on it), so the thread sleeps in io_uring_submit_and_wait only.
class UringEngine final : public IoEngine {
 public:
  UringEngine(io_uring ring, int event_fd, unsigned depth, FaultHook fault)
      : ring_(ring), event_fd_(event_fd), depth_(depth), fault_(std::move(fault)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~UringEngine() override { Stop(); }

  void Submit(std::vector<IoRequest> requests) override {
    queue_.Push(std::move(requests));
    Wake();
  }

  void Stop() override {
    if (!thread_.joinable()) return;
    queue_.Close();
    Wake();
    thread_.join();
    io_uring_queue_exit(&ring_);
    ::close(event_fd_);
  }

  std::string_view name() const override { return "io_uring"; }

 private:
  static constexpr std::uint64_t kWakeTag = 0;

  void Wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof(one));
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof(wake_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Moves queued requests into the ring while it has room (one entry stays for the wake read).
  void Fill() {
    for (IoRequest& r : queue_.TakeAll()) waiting_.push_back(std::move(r));
    while (!waiting_.empty() && in_flight_ + 1 < depth_) {
      IoRequest r = std::move(waiting_.front());
      waiting_.pop_front();
      if (fault_) {
        if (const int e = fault_(r); e != 0) {
          Complete(r, e);
          continue;
        }
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      switch (r.kind) {
        case IoKind::kRead:
          io_uring_prep_readv(sqe, r.fd, r.iov.data(), static_cast<unsigned>(r.iov.size()),
                              r.offset);
          break;
        case IoKind::kWrite:
          io_uring_prep_writev(sqe, r.fd, r.iov.data(), static_cast<unsigned>(r.iov.size()),
                               r.offset);
          break;
        case IoKind::kDataSync: io_uring_prep_fsync(sqe, r.fd, IORING_FSYNC_DATASYNC); break;
        case IoKind::kAllocate: io_uring_prep_fallocate(sqe, r.fd, 0, r.offset, r.length); break;
      }
      auto* owned = new IoRequest(std::move(r));
      io_uring_sqe_set_data(sqe, owned);
      ++in_flight_;
    }
  }

  void Run() {
    ArmWake();
    while (true) {
      Fill();
      if (in_flight_ == 0 && waiting_.empty() && queue_.closed()) {
        // Drain: anything queued after the last Fill() is still served.
        Fill();
        if (in_flight_ == 0 && waiting_.empty()) break;
      }
      if (const int rc = io_uring_submit_and_wait(&ring_, 1); rc < 0 && rc != -EINTR) {
        // Submission itself failed: fail what is waiting rather than spin.
        for (IoRequest& r : waiting_) Complete(r, rc);
        waiting_.clear();
      }
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          ArmWake();
          continue;
        }
        std::unique_ptr<IoRequest> r(reinterpret_cast<IoRequest*>(tag));
        --in_flight_;
        Complete(*r, cqe->res);
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  io_uring ring_;
  int event_fd_;
  unsigned depth_;
  FaultHook fault_;
  RequestQueue queue_;
  std::deque<IoRequest> waiting_;  // taken from queue_, not yet in the ring (ring thread only)
  unsigned in_flight_ = 0;
  std::uint64_t wake_value_ = 0;
  std::thread thread_;
};

// ---- blocking threads -----------------------------------------------------------------------
class ThreadEngine final : public IoEngine {
 public:
  ThreadEngine(unsigned threads, FaultHook fault) : fault_(std::move(fault)) {
    for (unsigned i = 0; i < std::max(threads, 1u); ++i) {
      threads_.emplace_back([this] {
        IoRequest r;
        while (queue_.PopWait(r)) {
          const int injected = fault_ ? fault_(r) : 0;
          Complete(r, injected != 0 ? injected : RunBlocking(r));
        }
      });
    }
  }
  ~ThreadEngine() override { Stop(); }

  void Submit(std::vector<IoRequest> requests) override { queue_.Push(std::move(requests)); }

  void Stop() override {
    queue_.Close();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::string_view name() const override { return "pread"; }

 private:
  FaultHook fault_;
  RequestQueue queue_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::int64_t RunBlocking(const IoRequest& r) {
  ssize_t n = 0;
  switch (r.kind) {
    case IoKind::kRead:
      n = ::preadv(r.fd, r.iov.data(), static_cast<int>(r.iov.size()),
                   static_cast<off_t>(r.offset));
      break;
    case IoKind::kWrite:
      n = ::pwritev(r.fd, r.iov.data(), static_cast<int>(r.iov.size()),
                    static_cast<off_t>(r.offset));
      break;
    case IoKind::kDataSync: n = ::fdatasync(r.fd); break;
    case IoKind::kAllocate:
      n = ::fallocate(r.fd, 0, static_cast<off_t>(r.offset), static_cast<off_t>(r.length));
      break;
  }
  return n < 0 ? -errno : CheckLength(r, n);
}

Result<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth, FaultHook fault) {
  io_uring ring{};
  if (const int rc = io_uring_queue_init(std::max(queue_depth, 4u), &ring, 0); rc < 0) {
    return Unavailable(std::string("io_uring_queue_init: ") + std::strerror(-rc));
  }
  const int event_fd = ::eventfd(0, EFD_CLOEXEC);
  if (event_fd < 0) {
    const int e = errno;
    io_uring_queue_exit(&ring);
    return StatusFromErrno(e, "eventfd");
  }
  return std::unique_ptr<IoEngine>(
      new UringEngine(ring, event_fd, std::max(queue_depth, 4u), std::move(fault)));
}

std::unique_ptr<IoEngine> MakeThreadEngine(unsigned threads, FaultHook fault) {
  return std::make_unique<ThreadEngine>(threads, std::move(fault));
}

}  // namespace kvdepot::daemon::ssd
