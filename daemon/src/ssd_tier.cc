#include "kvdepot/daemon/ssd_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "kvdepot/base/checksum.h"
#include "kvdepot/daemon/log.h"
#include "ssd/index_store.h"
#include "ssd/io_engine.h"
#include "ssd/record.h"

namespace kvdepot::daemon {
namespace fs = std::filesystem;
using ssd::IoKind;
using ssd::IoRequest;
using ssd::Location;

Result<SsdDurability> ParseSsdDurability(std::string_view name) {
  if (name == "none") return SsdDurability::kNone;
  if (name == "async") return SsdDurability::kAsync;
  if (name == "sync") return SsdDurability::kSync;
  return InvalidArgument("unknown ssd durability '" + std::string(name) +
                         "' (expected none, async or sync)");
}

std::string_view SsdDurabilityName(SsdDurability d) {
  return d == SsdDurability::kNone ? "none" : d == SsdDurability::kAsync ? "async" : "sync";
}

std::string_view SsdWritePolicyName(SsdWritePolicy p) {
  return p == SsdWritePolicy::kWriteBack ? "write-back" : "write-through";
}

std::string_view SsdPromotionName(SsdPromotion p) {
  return p == SsdPromotion::kAlways ? "always" : p == SsdPromotion::kNever ? "never" : "second-hit";
}

std::string_view SsdIoPathName(SsdIoPath p) {
  return p == SsdIoPath::kAuto ? "auto" : p == SsdIoPath::kIoUring ? "io_uring" : "pread";
}

Result<SsdWritePolicy> ParseSsdWritePolicy(std::string_view name) {
  if (name == "write-back") return SsdWritePolicy::kWriteBack;
  if (name == "write-through") return SsdWritePolicy::kWriteThrough;
  return InvalidArgument("unknown ssd write policy '" + std::string(name) +
                         "' (expected write-back or write-through)");
}

Result<SsdPromotion> ParseSsdPromotion(std::string_view name) {
  if (name == "always") return SsdPromotion::kAlways;
  if (name == "never") return SsdPromotion::kNever;
  if (name == "second-hit") return SsdPromotion::kSecondHit;
  return InvalidArgument("unknown ssd promotion policy '" + std::string(name) +
                         "' (expected always, never or second-hit)");
}

Result<SsdIoPath> ParseSsdIoPath(std::string_view name) {
  if (name == "auto") return SsdIoPath::kAuto;
  if (name == "io_uring") return SsdIoPath::kIoUring;
  if (name == "pread") return SsdIoPath::kPread;
  return InvalidArgument("unknown ssd io path '" + std::string(name) +
                         "' (expected auto, io_uring or pread)");
}

namespace {

std::uint64_t NowMs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// One aligned block, freed with free().
std::shared_ptr<std::byte> AlignedBlock() {
  void* p = std::aligned_alloc(ssd::kBlock, ssd::kBlock);
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* b) { std::free(b); });
}

// Counts down completions of requests handed to the engine; the submitting thread waits on it.
class Latch {
 public:
  void Add(int n) {
    std::lock_guard lock(mu_);
    count_ += n;
  }
  void Done() {
    std::lock_guard lock(mu_);
    if (--count_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

// The writer's window: records submitted and not yet completed, at most. The writer refills it
// as records complete instead of waiting for a whole batch, so the device's queue never drains
// while records are waiting (fio's reference job keeps 8 × 4 MiB = 32 MiB queued). A record
// larger than the window is written alone.
constexpr std::uint64_t kWindowBytes = 64ull << 20;
constexpr std::uint32_t kWindowRecords = 64;

struct Segment {
  std::uint64_t id = 0;
  int fd = -1;
  std::uint64_t size = 0;         // bytes reserved on disk
  std::uint64_t used = 0;         // append offset (writer thread only)
  std::uint32_t uncommitted = 0;  // records placed in it and not yet committed (writer only)
  std::vector<std::string> keys;  // written into it (guarded by the tier's mutex)
  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
};

struct IndexEntry {
  Location location;
  std::uint64_t ticket = 0;  // the write that produced it (0: recovered at start)
  std::uint32_t hits = 0;
  std::uint64_t last_access_ms = 0;
};

// One value to write: queued, taken into the writer's window, placed and submitted, completed by
// the I/O engine, then committed (indexed and reported) by the writer thread.
struct WriteJob {
  std::string key;
  ValueRef value;
  SsdTier::WriteCallback done;
  std::uint64_t ticket = 0;
  bool buffered = false;  // counted in the write-through queue's bytes
  // Filled by the writer.
  bool placed = false;  // given a place in a segment and submitted
  Status placement;     // why it was not placed
  std::shared_ptr<Segment> segment;
  Location location;
  std::shared_ptr<std::byte> header;
  std::int64_t result = 0;  // the engine's result, set before the job is handed back
  std::uint64_t record_bytes() const { return ssd::RecordBytes(value->bytes().size()); }
};

using JobList = std::vector<std::unique_ptr<WriteJob>>;

}  // namespace

class SsdTier::Impl {
 public:
  explicit Impl(const SsdTierOptions& o)
      : options_(o), write_buffer_used_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

  Status Open();
  void Close();
  void Write(std::string_view key, ValueRef value, WriteCallback done);
  bool Demote(std::string_view key, const ValueRef& value);
  bool Holds(std::string_view key, const ValueRef& value) const;
  void Read(std::string_view key, const Allocator& allocate, ReadCallback done);
  bool Contains(std::string_view key) const {
    std::lock_guard lock(mu_);
    return index_.find(key) != index_.end() || queued_.count(std::string(key)) != 0;
  }
  bool ShouldPromote(std::string_view key);
  void CountPromotion() { ++promotions_; }
  bool Erase(std::string_view key);
  protocol::ScanResult Scan(std::string_view prefix, std::string_view cursor,
                            std::uint32_t limit) const;
  SsdTierStats stats() const;
  const SsdTierOptions& options() const { return options_; }

 private:
  std::string SegmentPath(std::uint64_t id) const {
    return (fs::path(options_.dir) / "segments" / ssd::SegmentFileName(id)).string();
  }
  Result<int> OpenSegmentFile(std::uint64_t id, bool create);
  Status Recover();
  // Makes the newest segment the active one again, or cuts segments to their last indexed
  // record (`live_end`: segment id -> end of its last indexed record).
  void ReuseSegments(const std::map<std::uint64_t, std::uint64_t>& live_end);

  // The writer thread.
  void WriterLoop();
  bool WindowHasRoom(const WriteJob& next) const;
  void LeaveWindow(const WriteJob& job);
  void PlaceAndSubmit(std::unique_ptr<WriteJob> job);
  // Indexes and reports every job in finished_.
  void CommitFinished();
  // Commits until no record placed in `segment` is uncommitted (waiting for their completions).
  void CommitUntilIdle(const Segment& segment);
  Status Rollover();
  bool EvictOldestSegment();
  // fdatasync of the given segments; the first error, if any.
  Status SyncSegments(const std::set<std::uint64_t>& ids);
  // fsync of the segments directory if a segment was created since the last call.
  void SyncDirectory();
  // durability async: every sync_interval_ms, fdatasync of the segments written since the last
  // turn, the directory, then RocksDB's log — on its own thread, so the writer's window keeps the
  // device busy while the drive flushes.
  void SyncerLoop();
  // RocksDB's log has changes not yet synced (called after an Apply outside the writer's commit);
  // under `sync` the writer syncs it at once.
  void NoteLogged();

  void Enqueue(WriteJob job);
  // Removes `key`'s index entry, in memory and in RocksDB, if it still points to `at`.
  bool RemoveIfAt(std::string_view key, const Location& at);

  const SsdTierOptions options_;
  std::unique_ptr<ssd::IndexStore> index_store_;
  std::unique_ptr<ssd::IoEngine> engine_;
  bool direct_io_ = true;

  // Held from a change of the in-memory index until that change is written to RocksDB, so
  // RocksDB receives the changes in the order they were made in memory (a delete after the entry
  // it removes, an entry after the delete it follows). Taken before mu_ and wmu_.
  std::mutex index_order_mu_;

  // The in-memory index and the segments (all reads look here; never on disk).
  mutable std::mutex mu_;
  std::map<std::string, IndexEntry, std::less<>> index_;
  std::map<std::uint64_t, std::shared_ptr<Segment>> segments_;  // oldest first
  // Key -> ticket of its last Erase while writes were queued. Written under mu_ and wmu_; read
  // and pruned by the writer thread under either.
  std::unordered_map<std::string, std::uint64_t> erased_;
  // The latest write queued (or being written) for each key, served from memory until it is
  // indexed: a value being demoted is never a miss. Guarded by mu_.
  std::unordered_map<std::string, ValueRef> queued_;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t segment_bytes_total_ = 0;  // written by the writer thread (and Open) under mu_

  // The writer thread's queue and what the I/O engine hands back. Guarded by wmu_.
  std::mutex wmu_;
  std::condition_variable wcv_;
  std::deque<WriteJob> jobs_;
  JobList completed_;                       // written (or failed) by the engine, not yet committed
  std::uint64_t pending_bytes_ = 0;         // write-through bytes queued
  std::uint64_t unfinished_jobs_ = 0;       // queued, in the window or waiting to be committed
  std::uint64_t next_ticket_ = 0;           // Erase reads it under mu_+wmu_
  bool log_unsynced_ = false;               // RocksDB's log has changes not yet synced
  std::set<std::uint64_t> dirty_segments_;  // async: written since the syncer's last turn
  bool directory_unsynced_ = false;         // a segment was created since the last sync
  bool closing_ = false;
  bool syncer_stop_ = false;
  std::condition_variable syncer_cv_;
  std::thread writer_;
  std::thread syncer_;  // durability async only

  // Writer thread only.
  std::shared_ptr<Segment> active_;
  std::uint64_t next_segment_id_ = 1;
  std::uint64_t window_bytes_ = 0;  // records submitted, not yet completed
  std::uint32_t window_records_ = 0;
  std::set<std::uint64_t> uncommitted_tickets_;  // taken from jobs_, not yet committed
  JobList finished_;                             // done with the device (or not placed), to commit
  bool enospc_logged_ = false;

  std::shared_ptr<std::atomic<std::uint64_t>> write_buffer_used_;
  mutable std::atomic<std::uint64_t> hits_{0}, misses_{0}, evictions_{0}, segments_evicted_{0},
      demotions_{0}, demotions_dropped_{0}, demotions_refused_{0}, promotions_{0}, reads_{0},
      read_bytes_{0}, writes_{0}, write_bytes_{0}, write_errors_{0}, read_errors_{0},
      checksum_failures_{0}, recovered_{0}, recovery_dropped_{0};
};

// ---- opening and recovery ------------------------------------------------------------------

Result<int> SsdTier::Impl::OpenSegmentFile(std::uint64_t id, bool create) {
  const std::string path = SegmentPath(id);
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  int fd = ::open(path.c_str(), flags | (direct_io_ ? O_DIRECT : 0), 0644);
  if (fd < 0 && errno == EINVAL && direct_io_) {
    // The file system does not do O_DIRECT (tmpfs before Linux 6.6): buffered I/O, logged once.
    direct_io_ = false;
    Log(LogLevel::kWarn,
        "ssd tier: " + options_.dir + " does not support O_DIRECT; using buffered I/O");
    fd = ::open(path.c_str(), flags, 0644);
  }
  if (fd < 0) return StatusFromErrno(errno, "ssd tier: opening " + path);
  return fd;
}

Status SsdTier::Impl::Open() {
  std::error_code ec;
  fs::create_directories(fs::path(options_.dir) / "segments", ec);
  if (ec) return IOError("ssd tier: creating " + options_.dir + "/segments: " + ec.message());
  KVD_ASSIGN_OR_RETURN(index_store_,
                       ssd::IndexStore::Open((fs::path(options_.dir) / "index").string()));
  if (options_.io_path != SsdIoPath::kPread) {
    auto uring = ssd::MakeUringEngine(options_.queue_depth, options_.fault);
    if (uring.ok()) {
      engine_ = std::move(*uring);
    } else if (options_.io_path == SsdIoPath::kIoUring) {
      return Status(uring.status().code(),
                    "ssd tier: io_uring requested but unavailable: " + uring.status().message());
    } else {
      Log(LogLevel::kWarn, "ssd tier: io_uring unavailable (" + uring.status().message() +
                               "); using the pread/pwrite thread pool");
    }
  }
  if (!engine_) {
    engine_ = ssd::MakeThreadEngine(std::max(options_.queue_depth / 8, 2u), options_.fault);
  }
  KVD_RETURN_IF_ERROR(Recover());
  writer_ = std::thread([this] { WriterLoop(); });
  if (options_.durability == SsdDurability::kAsync) syncer_ = std::thread([this] { SyncerLoop(); });
  return Status::Ok();
}

// Reconciles the index with the segment files: entries whose segment is missing or too short are
// dropped; segments no entry points to are deleted; the newest segment takes new writes again.
Status SsdTier::Impl::Recover() {
  std::error_code ec;
  for (const auto& file : fs::directory_iterator(fs::path(options_.dir) / "segments", ec)) {
    auto id = ssd::ParseSegmentFileName(file.path().filename().string());
    if (!id.ok()) continue;  // not ours
    KVD_ASSIGN_OR_RETURN(const int fd, OpenSegmentFile(*id, /*create=*/false));
    auto seg = std::make_shared<Segment>();
    seg->id = *id;
    seg->fd = fd;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return StatusFromErrno(errno, "ssd tier: stat " + SegmentPath(*id));
    seg->size = seg->used = static_cast<std::uint64_t>(st.st_size);
    segments_[*id] = std::move(seg);
    next_segment_id_ = std::max(next_segment_id_, *id + 1);
  }
  if (ec) return IOError("ssd tier: listing " + options_.dir + "/segments: " + ec.message());

  std::vector<ssd::IndexChange> drop;
  std::map<std::uint64_t, std::uint64_t> live_end;
  KVD_RETURN_IF_ERROR(index_store_->ForEach([&](std::string_view key, const Result<Location>& loc) {
    auto seg = loc.ok() ? segments_.find(loc->segment) : segments_.end();
    const std::uint64_t end = loc.ok() ? loc->offset + ssd::RecordBytes(loc->value_length) : 0;
    if (seg == segments_.end() || end > seg->second->size) {
      drop.push_back({std::string(key), std::nullopt});
      return;
    }
    IndexEntry e;
    e.location = *loc;
    e.last_access_ms = NowMs();
    index_.emplace(std::string(key), e);
    seg->second->keys.emplace_back(key);
    live_bytes_ += loc->value_length;
    live_end[loc->segment] = std::max(live_end[loc->segment], end);
  }));
  recovered_ = index_.size();
  recovery_dropped_ = drop.size();
  KVD_RETURN_IF_ERROR(index_store_->Apply(drop));
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (it->second->keys.empty()) {
      ::unlink(SegmentPath(it->first).c_str());
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  ReuseSegments(live_end);
  for (const auto& [id, seg] : segments_) segment_bytes_total_ += seg->size;
  while (segment_bytes_total_ > options_.capacity_bytes && EvictOldestSegment()) {
  }
  KVD_RETURN_IF_ERROR(index_store_->Flush());
  Log(LogLevel::kInfo,
      "ssd tier: " + options_.dir + ": recovered " + std::to_string(index_.size()) + " chunks (" +
          std::to_string(live_bytes_ >> 20) + " MiB) in " + std::to_string(segments_.size()) +
          " segments (" + std::to_string(segment_bytes_total_ >> 20) + " MiB on disk" +
          (active_ ? "; appending to " + SegmentPath(active_->id) + " at offset " +
                         std::to_string(active_->used)
                   : std::string()) +
          "); dropped " + std::to_string(drop.size()) + " stale index entries; io path " +
          std::string(engine_->name()) + ", durability " +
          std::string(SsdDurabilityName(options_.durability)));
  return Status::Ok();
}

// A restart must not cost a segment. The newest segment was being written when the daemon
// stopped: if it has the configured size, writing continues after its last indexed record (what
// lies beyond is a torn or never-indexed record: garbage no entry points to, overwritten). Every
// other segment is cut to its last indexed record, so the space past it (left by a daemon that
// did not reuse segments, or after ssd.segment_size changed) is given back.
void SsdTier::Impl::ReuseSegments(const std::map<std::uint64_t, std::uint64_t>& live_end) {
  if (segments_.empty()) return;
  if (const auto& newest = segments_.rbegin()->second; newest->size == options_.segment_bytes) {
    newest->used = live_end.at(newest->id);
    active_ = newest;
  }
  for (const auto& [id, seg] : segments_) {
    const std::uint64_t end = live_end.at(id);
    if (seg == active_ || seg->size <= end) continue;
    if (::ftruncate(seg->fd, static_cast<off_t>(end)) != 0) {
      Log(LogLevel::kWarn, "ssd tier: cutting " + SegmentPath(id) + " to its last record (" +
                               std::to_string(end) + " bytes) failed: " + std::strerror(errno) +
                               "; its " + std::to_string(seg->size) +
                               " bytes stay counted against ssd.capacity");
      continue;
    }
    seg->size = seg->used = end;
  }
}

void SsdTier::Impl::Close() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lock(wmu_);
    closing_ = true;
  }
  wcv_.notify_all();
  writer_.join();
  if (syncer_.joinable()) {  // its last turn syncs what the writer finished
    {
      std::lock_guard lock(wmu_);
      syncer_stop_ = true;
    }
    syncer_cv_.notify_all();
    syncer_.join();
  }
  engine_->Stop();
  if (Status s = index_store_->Flush(); !s.ok()) Log(LogLevel::kError, s.message());
  index_store_.reset();  // releases the index's lock: another process may open the tier now
  std::lock_guard lock(mu_);
  Log(LogLevel::kInfo, "ssd tier: closed with " + std::to_string(index_.size()) + " chunks in " +
                           std::to_string(segments_.size()) + " segments");
}

// ---- writing ---------------------------------------------------------------------------------

void SsdTier::Impl::Enqueue(WriteJob job) {
  {
    std::scoped_lock lock(mu_, wmu_);
    if (job.buffered) {
      // Write-through without a waiting client: skipped (the value is then demoted on eviction)
      // rather than queued past the write buffer.
      if (pending_bytes_ + job.value->bytes().size() > options_.write_buffer_bytes) return;
      pending_bytes_ += job.value->bytes().size();
    }
    job.ticket = ++next_ticket_;
    ++unfinished_jobs_;
    queued_[job.key] = job.value;
    jobs_.push_back(std::move(job));
  }
  wcv_.notify_one();
}

void SsdTier::Impl::Write(std::string_view key, ValueRef value, WriteCallback done) {
  if (ssd::RecordBytes(value->bytes().size()) > options_.segment_bytes) {
    ++write_errors_;
    if (done) {
      done(OutOfRange("ssd tier: a value of " + std::to_string(value->bytes().size()) +
                      " bytes does not fit a segment of " +
                      std::to_string(options_.segment_bytes)));
    }
    return;
  }
  WriteJob job;
  job.key = std::string(key);
  job.value = std::move(value);
  job.buffered = !done;
  job.done = std::move(done);
  Enqueue(std::move(job));
}

bool SsdTier::Impl::Holds(std::string_view key, const ValueRef& value) const {
  std::lock_guard lock(mu_);
  if (const std::uint64_t sum = value->ssd_checksum(); sum != 0) {
    auto it = index_.find(key);
    if (it != index_.end() && it->second.location.checksum == sum) return true;  // already here
  }
  auto q = queued_.find(std::string(key));
  return q != queued_.end() && q->second == value;  // its write is queued already
}

bool SsdTier::Impl::Demote(std::string_view key, const ValueRef& value) {
  if (Holds(key, value)) return true;
  if (ssd::RecordBytes(value->bytes().size()) > options_.segment_bytes) {
    ++demotions_dropped_;
    return true;
  }
  if (!value->TransferCharge(write_buffer_used_, options_.write_buffer_bytes)) {
    ++demotions_refused_;
    return false;
  }
  ++demotions_;
  WriteJob job;
  job.key = std::string(key);
  job.value = value;
  Enqueue(std::move(job));
  return true;
}

bool SsdTier::Impl::WindowHasRoom(const WriteJob& next) const {
  return window_records_ == 0 ||
         (window_records_ < kWindowRecords && window_bytes_ + next.record_bytes() <= kWindowBytes);
}

void SsdTier::Impl::LeaveWindow(const WriteJob& job) {
  window_bytes_ -= job.record_bytes();
  --window_records_;
}

// Each turn hands the device the records that fit the window first, then commits those that
// completed, so the device works while this thread syncs, indexes and reports.
void SsdTier::Impl::WriterLoop() {
  const bool sync = options_.durability == SsdDurability::kSync;
  while (true) {
    JobList admitted;
    bool sync_log = false, last = false;
    {
      std::unique_lock lock(wmu_);
      wcv_.wait(lock, [this, sync] {
        return !completed_.empty() || (sync && log_unsynced_) ||
               (!jobs_.empty() && WindowHasRoom(jobs_.front())) ||
               (closing_ && jobs_.empty() && window_records_ == 0);
      });
      for (auto& job : completed_) {
        LeaveWindow(*job);
        finished_.push_back(std::move(job));
      }
      completed_.clear();
      while (!jobs_.empty() && WindowHasRoom(jobs_.front())) {
        auto job = std::make_unique<WriteJob>(std::move(jobs_.front()));
        jobs_.pop_front();
        window_bytes_ += job->record_bytes();
        ++window_records_;
        uncommitted_tickets_.insert(job->ticket);
        admitted.push_back(std::move(job));
      }
      // Under `sync`, an erase (or an eviction) logged since the last sync is synced now.
      if (sync) sync_log = std::exchange(log_unsynced_, false);
      last = closing_ && jobs_.empty() && window_records_ == 0 && admitted.empty();
    }
    for (auto& job : admitted) PlaceAndSubmit(std::move(job));
    CommitFinished();
    if (sync_log) {
      if (Status s = index_store_->SyncLog(); !s.ok()) Log(LogLevel::kError, s.message());
    }
    if (last) break;
  }
}

void SsdTier::Impl::SyncerLoop() {
  const auto interval =
      std::chrono::milliseconds(std::max<std::uint32_t>(options_.sync_interval_ms, 1));
  std::unique_lock lock(wmu_);
  while (true) {
    const bool stop = syncer_cv_.wait_for(lock, interval, [this] { return syncer_stop_; });
    const std::set<std::uint64_t> dirty = std::exchange(dirty_segments_, {});
    const bool logged = std::exchange(log_unsynced_, false);
    lock.unlock();
    // The segments first: an entry the log sync makes durable points to data already on stable
    // storage, unless it was committed after this turn began (its data is synced by the next
    // turn; a power loss in between makes it a miss, never wrong bytes).
    (void)SyncSegments(dirty);  // errors are logged and counted
    SyncDirectory();
    if (logged || !dirty.empty()) {
      if (Status s = index_store_->SyncLog(); !s.ok()) Log(LogLevel::kError, s.message());
    }
    lock.lock();
    if (stop) return;
  }
}

void SsdTier::Impl::SyncDirectory() {
  {
    std::lock_guard lock(wmu_);
    if (!std::exchange(directory_unsynced_, false)) return;
  }
  const std::string path = (fs::path(options_.dir) / "segments").string();
  const int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0 || ::fsync(dir) != 0) {
    ++write_errors_;
    Log(LogLevel::kError, "ssd tier: syncing the directory " + path + ": " + std::strerror(errno) +
                              "; a new segment may be lost by a power loss");
  }
  if (dir >= 0) ::close(dir);
}

void SsdTier::Impl::NoteLogged() {
  {
    std::lock_guard lock(wmu_);
    log_unsynced_ = true;
  }
  if (options_.durability == SsdDurability::kSync) wcv_.notify_one();
}

// Places the record at the active segment's end (rolling over when it does not fit), computes its
// checksum and header, and submits its write. A record that cannot be placed goes straight to
// finished_ with the reason.
void SsdTier::Impl::PlaceAndSubmit(std::unique_ptr<WriteJob> job) {
  const std::uint64_t record = job->record_bytes();
  if (!active_ || active_->used + record > active_->size) {
    Status rolled = Rollover();
    if (!rolled.ok()) {
      if (!enospc_logged_ || rolled.code() != StatusCode::kResourceExhausted) {
        Log(LogLevel::kError, rolled.message() + "; SSD writes fail until space is freed");
      }
      enospc_logged_ = rolled.code() == StatusCode::kResourceExhausted;
      job->placement = std::move(rolled);
      LeaveWindow(*job);
      finished_.push_back(std::move(job));
      return;
    }
    enospc_logged_ = false;
  }
  job->placed = true;
  job->segment = active_;
  ++active_->uncommitted;
  job->location.segment = active_->id;
  job->location.offset = active_->used;
  job->location.value_length = job->value->bytes().size();
  job->location.checksum = Checksum64(job->value->bytes());
  active_->used += record;
  job->header = AlignedBlock();
  ssd::RecordHeader h;
  h.key = job->key.size() <= ssd::kMaxRecordKey ? job->key : job->key.substr(0, ssd::kMaxRecordKey);
  h.value_length = job->location.value_length;
  h.value_checksum = job->location.checksum;
  h.sequence = job->ticket;
  ssd::EncodeRecordHeader(h, std::span<std::byte, ssd::kBlock>(job->header.get(), ssd::kBlock));
  IoRequest r;
  r.kind = IoKind::kWrite;
  r.fd = job->segment->fd;
  r.offset = job->location.offset;
  const auto padded = job->value->padded_bytes();
  r.iov = {{job->header.get(), ssd::kBlock},
           {const_cast<std::byte*>(padded.data()), padded.size()}};
  // The request owns the job until it completes; then completed_ does.
  r.done = [this, raw = job.release()](std::int64_t res) {
    raw->result = res;
    {
      std::lock_guard lock(wmu_);
      completed_.emplace_back(raw);
    }
    wcv_.notify_one();
  };
  engine_->Submit({std::move(r)});
}

void SsdTier::Impl::CommitUntilIdle(const Segment& segment) {
  CommitFinished();
  while (segment.uncommitted != 0) {
    {
      std::unique_lock lock(wmu_);
      wcv_.wait(lock, [this] { return !completed_.empty(); });
      for (auto& job : completed_) {
        LeaveWindow(*job);
        finished_.push_back(std::move(job));
      }
      completed_.clear();
    }
    CommitFinished();
  }
}

void SsdTier::Impl::CommitFinished() {
  if (finished_.empty()) return;
  JobList jobs = std::exchange(finished_, {});
  std::vector<Status> outcome(jobs.size(), Status::Ok());

  // 1. Durability: under `sync`, the records reach stable storage before the index says so.
  std::set<std::uint64_t> written;
  for (const auto& job : jobs) {
    if (job->placed) --job->segment->uncommitted;
    if (job->placed && job->result > 0) written.insert(job->location.segment);
  }
  Status synced = Status::Ok();
  if (options_.durability == SsdDurability::kSync && !written.empty()) {
    synced = SyncSegments(written);
    SyncDirectory();
  }

  // 2. Index the values that were written and are still wanted (not erased or overwritten since
  // they were queued), in memory and in RocksDB's log, in one step for other index changes.
  std::vector<ssd::IndexChange> changes;
  Status indexed = Status::Ok();
  {
    std::lock_guard order(index_order_mu_);
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        WriteJob& job = *jobs[i];
        if (auto q = queued_.find(job.key); q != queued_.end() && q->second == job.value) {
          queued_.erase(q);  // from now on the index (or nothing, on failure) answers for it
        }
        if (!job.placed || job.result <= 0 || !synced.ok()) {
          ++write_errors_;
          outcome[i] = !job.placed       ? job.placement
                       : job.result <= 0 ? StatusFromErrno(static_cast<int>(-job.result),
                                                           "ssd tier: writing segment " +
                                                               SegmentPath(job.location.segment))
                                         : synced;
          continue;
        }
        job.segment->keys.push_back(job.key);
        auto erased = erased_.find(job.key);
        if (erased != erased_.end() && erased->second > job.ticket) continue;
        auto [it, inserted] = index_.try_emplace(job.key);
        if (!inserted && it->second.ticket > job.ticket) continue;  // a newer write landed first
        if (!inserted) live_bytes_ -= it->second.location.value_length;
        it->second.location = job.location;
        it->second.ticket = job.ticket;
        it->second.hits = 0;
        it->second.last_access_ms = NowMs();
        live_bytes_ += job.location.value_length;
        changes.push_back({job.key, job.location});
        if (options_.on_index_change) options_.on_index_change(job.key, true);
      }
    }
    indexed = index_store_->Apply(changes);
  }
  if (indexed.ok() && options_.durability == SsdDurability::kSync && !changes.empty()) {
    {
      std::lock_guard lock(wmu_);
      log_unsynced_ = false;  // this sync covers every change applied so far
    }
    indexed = index_store_->SyncLog();
  }
  if (!indexed.ok()) Log(LogLevel::kError, indexed.message());

  // 3. Bookkeeping: what the syncer syncs next (async); erase markers older than every
  // unfinished write can go.
  {
    std::lock_guard lock(wmu_);
    if (options_.durability == SsdDurability::kAsync) {
      dirty_segments_.insert(written.begin(), written.end());
      log_unsynced_ = log_unsynced_ || !changes.empty();
    }
    for (const auto& job : jobs) {
      if (job->buffered) pending_bytes_ -= job->value->bytes().size();
      uncommitted_tickets_.erase(job->ticket);
    }
    unfinished_jobs_ -= jobs.size();
    std::uint64_t oldest = jobs_.empty() ? next_ticket_ + 1 : jobs_.front().ticket;
    if (!uncommitted_tickets_.empty()) oldest = std::min(oldest, *uncommitted_tickets_.begin());
    for (auto it = erased_.begin(); it != erased_.end();) {
      it = it->second < oldest ? erased_.erase(it) : std::next(it);
    }
  }

  // 4. Report. A write counts once its index entry is logged.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    WriteJob& job = *jobs[i];
    if (outcome[i].ok()) {
      ++writes_;
      write_bytes_ += ssd::RecordBytes(job.location.value_length);
    }
    if (outcome[i].ok() && !indexed.ok()) outcome[i] = indexed;
    if (outcome[i].ok()) job.value->set_ssd_checksum(job.location.checksum);
    if (job.done) job.done(outcome[i]);
    job.value.reset();  // releases a demoted value's write-buffer charge
  }
}

Status SsdTier::Impl::SyncSegments(const std::set<std::uint64_t>& ids) {
  std::vector<IoRequest> syncs;
  Latch latch;
  std::mutex error_mu;
  Status first_error = Status::Ok();
  {
    std::lock_guard lock(mu_);
    for (std::uint64_t id : ids) {
      auto it = segments_.find(id);
      if (it == segments_.end()) continue;
      IoRequest r;
      r.kind = IoKind::kDataSync;
      r.fd = it->second->fd;
      r.keep_alive = it->second;
      r.done = [this, &latch, &error_mu, &first_error, id](std::int64_t res) {
        if (res < 0) {
          ++write_errors_;
          Status s =
              StatusFromErrno(static_cast<int>(-res), "ssd tier: fdatasync of " + SegmentPath(id));
          Log(LogLevel::kError, s.message());
          std::lock_guard error_lock(error_mu);
          if (first_error.ok()) first_error = std::move(s);
        }
        latch.Done();
      };
      syncs.push_back(std::move(r));
    }
  }
  latch.Add(static_cast<int>(syncs.size()));
  if (!syncs.empty()) engine_->Submit(std::move(syncs));
  latch.Wait();
  std::lock_guard lock(error_mu);
  return first_error;
}

// Drops the oldest segment and every chunk whose latest copy is in it, once its records still
// being written are committed (an index entry never points to a dropped segment). False when
// there is none to drop (only the active segment is left).
bool SsdTier::Impl::EvictOldestSegment() {
  std::shared_ptr<Segment> victim;
  {
    std::lock_guard lock(mu_);
    if (segments_.empty() || segments_.begin()->second == active_) return false;
    victim = segments_.begin()->second;
  }
  CommitUntilIdle(*victim);
  std::vector<ssd::IndexChange> deletes;
  {
    std::lock_guard order(index_order_mu_);
    {
      std::lock_guard lock(mu_);
      segments_.erase(victim->id);
      segment_bytes_total_ -= victim->size;
      for (const std::string& key : victim->keys) {
        auto it = index_.find(key);
        if (it == index_.end() || it->second.location.segment != victim->id) continue;
        live_bytes_ -= it->second.location.value_length;
        index_.erase(it);
        deletes.push_back({key, std::nullopt});
        if (options_.on_index_change) options_.on_index_change(key, false);
      }
    }
    if (Status s = index_store_->Apply(deletes); !s.ok()) Log(LogLevel::kError, s.message());
  }
  if (!deletes.empty()) NoteLogged();
  evictions_ += deletes.size();
  ++segments_evicted_;
  {
    std::lock_guard lock(wmu_);
    dirty_segments_.erase(victim->id);
  }
  ::unlink(SegmentPath(victim->id).c_str());  // the data stays readable for reads in flight
  return true;
}

// Starts a new segment, dropping the oldest ones to stay within the capacity.
Status SsdTier::Impl::Rollover() {
  while (segment_bytes_total_ + options_.segment_bytes > options_.capacity_bytes &&
         EvictOldestSegment()) {
  }
  const std::uint64_t id = next_segment_id_++;
  KVD_ASSIGN_OR_RETURN(const int fd, OpenSegmentFile(id, /*create=*/true));
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  seg->fd = fd;
  seg->size = options_.segment_bytes;
  // Reserve the whole segment now: ENOSPC shows up here, once, not in the middle of a write.
  IoRequest alloc;
  alloc.kind = IoKind::kAllocate;
  alloc.fd = fd;
  alloc.length = options_.segment_bytes;
  std::int64_t result = 0;
  Latch latch;
  latch.Add(1);
  alloc.done = [&](std::int64_t r) {
    result = r;
    latch.Done();
  };
  engine_->Submit({std::move(alloc)});
  latch.Wait();
  if (result == -ENOSPC && EvictOldestSegment()) {
    result = ssd::RunBlocking([&] {
      IoRequest retry;
      retry.kind = IoKind::kAllocate;
      retry.fd = fd;
      retry.length = options_.segment_bytes;
      return retry;
    }());
  }
  if (result < 0 && result != -EOPNOTSUPP) {
    ::unlink(SegmentPath(id).c_str());
    return StatusFromErrno(static_cast<int>(-result), "ssd tier: reserving " +
                                                          std::to_string(options_.segment_bytes) +
                                                          " bytes for segment " + SegmentPath(id));
  }
  {
    // The new file's directory entry is synced before any index entry pointing to it is (by the
    // next sync, not here: a directory fsync can take longer than the window's writes).
    std::lock_guard lock(wmu_);
    directory_unsynced_ = options_.durability != SsdDurability::kNone;
  }
  {
    std::lock_guard lock(mu_);
    segments_[id] = seg;
    segment_bytes_total_ += seg->size;
  }
  active_ = std::move(seg);
  return Status::Ok();
}

// ---- reading and the index -----------------------------------------------------------------

void SsdTier::Impl::Read(std::string_view key, const Allocator& allocate, ReadCallback done) {
  Location loc;
  std::shared_ptr<Segment> seg;
  ValueRef queued;
  {
    std::lock_guard lock(mu_);  // released before `done` runs
    if (auto q = queued_.find(std::string(key)); q != queued_.end()) {
      queued = q->second;
    } else if (auto it = index_.find(key); it != index_.end()) {
      loc = it->second.location;
      it->second.last_access_ms = NowMs();
      if (auto sg = segments_.find(loc.segment); sg != segments_.end()) seg = sg->second;
    }
  }
  if (queued) {
    ++hits_;
    return done(std::move(queued));  // still waiting for its write: served from memory
  }
  if (!seg) {
    ++misses_;
    return done(NotFound("ssd tier: key not found"));
  }
  auto buffer = allocate(loc.value_length);
  if (!buffer.ok()) return done(buffer.status());
  std::shared_ptr<Value> value = std::move(*buffer);
  auto header = AlignedBlock();
  IoRequest r;
  r.kind = IoKind::kRead;
  r.fd = seg->fd;
  r.offset = loc.offset;
  const auto padded = value->mutable_padded_bytes();
  r.iov = {{header.get(), ssd::kBlock}, {padded.data(), padded.size()}};
  r.keep_alive = seg;
  r.done = [this, key = std::string(key), loc, value, header,
            done = std::move(done)](std::int64_t res) {
    if (res < 0) {
      ++read_errors_;
      return done(StatusFromErrno(
          static_cast<int>(-res),
          "ssd tier: reading " + SegmentPath(loc.segment) + " at " + std::to_string(loc.offset)));
    }
    auto h =
        ssd::DecodeRecordHeader(std::span<const std::byte, ssd::kBlock>(header.get(), ssd::kBlock));
    const bool valid =
        h.ok() && h->value_length == loc.value_length && h->value_checksum == loc.checksum &&
        std::string_view(h->key) == std::string_view(key).substr(0, ssd::kMaxRecordKey) &&
        Checksum64(value->bytes()) == loc.checksum;
    if (!valid) {
      ++checksum_failures_;
      Log(LogLevel::kWarn, "ssd tier: chunk at " + SegmentPath(loc.segment) + " offset " +
                               std::to_string(loc.offset) +
                               " failed verification; removed, served as a miss");
      RemoveIfAt(key, loc);
      return done(NotFound("ssd tier: the stored copy failed verification"));
    }
    ++hits_;
    ++reads_;
    read_bytes_ += ssd::RecordBytes(loc.value_length);
    value->set_ssd_checksum(loc.checksum);
    done(ValueRef(value));
  };
  engine_->Submit({std::move(r)});
}

bool SsdTier::Impl::RemoveIfAt(std::string_view key, const Location& at) {
  std::lock_guard order(index_order_mu_);
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second.location.segment != at.segment ||
        it->second.location.offset != at.offset) {
      return false;  // gone already, or replaced by a newer write (whose entry RocksDB has)
    }
    live_bytes_ -= it->second.location.value_length;
    index_.erase(it);
    if (options_.on_index_change) options_.on_index_change(key, false);
  }
  if (Status s = index_store_->Apply({{std::string(key), std::nullopt}}); !s.ok()) {
    Log(LogLevel::kError, s.message() +
                              " (removing the SSD index entry of a chunk: a restart may "
                              "find the entry again)");
  }
  NoteLogged();
  return true;
}

bool SsdTier::Impl::ShouldPromote(std::string_view key) {
  std::lock_guard lock(mu_);
  // A value served from the write queue stays the write buffer's; it is not copied up.
  if (queued_.count(std::string(key)) != 0) return false;
  if (options_.promotion != SsdPromotion::kSecondHit) {
    return options_.promotion == SsdPromotion::kAlways;
  }
  auto it = index_.find(key);
  return it != index_.end() && ++it->second.hits >= 2;
}

// Writes queued before now are void (an erase marker, while any are unfinished) and an indexed
// copy is removed from memory and from RocksDB's log before this returns: once the caller
// acknowledges the delete, a killed process can no longer bring the old value back.
bool SsdTier::Impl::Erase(std::string_view key) {
  bool queued = false;
  std::optional<Location> indexed;
  {
    std::scoped_lock lock(mu_, wmu_);
    if (unfinished_jobs_ != 0) erased_[std::string(key)] = ++next_ticket_;
    if (auto it = index_.find(key); it != index_.end()) indexed = it->second.location;
    queued = queued_.erase(std::string(key)) != 0;
  }
  // Nothing indexed: no RocksDB entry to remove (a write committed from now on is either void by
  // the marker or newer than this erase). An entry replaced in between by a newer write stays.
  // Under `sync`, the writer then syncs the log at once (RemoveIfAt notes it).
  if (indexed) RemoveIfAt(key, *indexed);
  return queued || indexed.has_value();
}

protocol::ScanResult SsdTier::Impl::Scan(std::string_view prefix, std::string_view cursor,
                                         std::uint32_t limit) const {
  protocol::ScanResult result;
  const std::uint64_t now = NowMs();
  std::lock_guard lock(mu_);
  auto it = cursor > prefix ? index_.upper_bound(cursor) : index_.lower_bound(prefix);
  for (; it != index_.end() && result.entries.size() < limit; ++it) {
    if (std::string_view(it->first).substr(0, prefix.size()) != prefix) break;
    result.entries.push_back({it->first, it->second.location.value_length, protocol::Tier::kSsd,
                              now - std::min(now, it->second.last_access_ms)});
  }
  if (result.entries.size() == limit && limit > 0) result.next_cursor = result.entries.back().key;
  return result;
}

SsdTierStats SsdTier::Impl::stats() const {
  SsdTierStats s;
  {
    std::lock_guard lock(mu_);
    s.bytes = segment_bytes_total_;
    s.live_bytes = live_bytes_;
    s.chunks = index_.size();
    s.segments = segments_.size();
  }
  s.capacity = options_.capacity_bytes;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.segments_evicted = segments_evicted_;
  s.demotions = demotions_;
  s.demotions_dropped = demotions_dropped_;
  s.demotions_refused = demotions_refused_;
  s.promotions = promotions_;
  s.reads = reads_;
  s.read_bytes = read_bytes_;
  s.writes = writes_;
  s.write_bytes = write_bytes_;
  s.write_errors = write_errors_;
  s.read_errors = read_errors_;
  s.checksum_failures = checksum_failures_;
  s.write_buffer_bytes = write_buffer_used_->load();
  s.recovered_chunks = recovered_;
  s.recovery_dropped = recovery_dropped_;
  s.io_path = std::string(engine_->name());
  s.direct_io = direct_io_;
  return s;
}

// ---- public wrapper --------------------------------------------------------------------------

Result<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options) {
  if (options.dir.empty()) return InvalidArgument("ssd tier: no directory given");
  if (options.segment_bytes < (1u << 20) || options.segment_bytes % ssd::kBlock != 0) {
    return InvalidArgument("ssd tier: segment size " + std::to_string(options.segment_bytes) +
                           " must be a multiple of 4096 and at least 1 MiB");
  }
  if (options.capacity_bytes < 2 * options.segment_bytes) {
    return InvalidArgument("ssd tier: capacity " + std::to_string(options.capacity_bytes) +
                           " must hold at least two segments of " +
                           std::to_string(options.segment_bytes));
  }
  auto impl = std::make_unique<Impl>(options);
  KVD_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<SsdTier>(new SsdTier(std::move(impl)));
}

SsdTier::SsdTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SsdTier::~SsdTier() {
  Close();
}
void SsdTier::Close() {
  impl_->Close();
}
void SsdTier::Write(std::string_view key, ValueRef value, WriteCallback done) {
  impl_->Write(key, std::move(value), std::move(done));
}
bool SsdTier::Demote(std::string_view key, const ValueRef& value) {
  return impl_->Demote(key, value);
}
void SsdTier::Read(std::string_view key, const Allocator& allocate, ReadCallback done) {
  impl_->Read(key, allocate, std::move(done));
}
bool SsdTier::Holds(std::string_view key, const ValueRef& value) const {
  return impl_->Holds(key, value);
}
bool SsdTier::Contains(std::string_view key) const {
  return impl_->Contains(key);
}
bool SsdTier::ShouldPromote(std::string_view key) {
  return impl_->ShouldPromote(key);
}
void SsdTier::CountPromotion() {
  impl_->CountPromotion();
}
bool SsdTier::Erase(std::string_view key) {
  return impl_->Erase(key);
}
protocol::ScanResult SsdTier::Scan(std::string_view prefix, std::string_view cursor,
                                   std::uint32_t limit) const {
  return impl_->Scan(prefix, cursor, limit);
}
SsdTierStats SsdTier::stats() const {
  return impl_->stats();
}
const SsdTierOptions& SsdTier::options() const {
  return impl_->options();
}

}  // namespace kvdepot::daemon
