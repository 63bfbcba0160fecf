#include "kvdepot/daemon/shutdown_flush.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "ssd/record.h"

namespace kvdepot::daemon {
namespace {

// The writes in flight and what completed; shared with the SSD tier's completion callbacks.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t in_flight_bytes = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t written_chunks = 0;
  std::uint64_t written_bytes = 0;
  std::uint64_t failed_chunks = 0;
};

}  // namespace

FlushReport FlushHostToSsd(const HostTier& host, SsdTier& ssd, std::chrono::milliseconds budget,
                           std::uint64_t window_bytes) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + budget;
  const SsdTierOptions& o = ssd.options();
  const std::uint64_t room =
      o.capacity_bytes > o.segment_bytes ? o.capacity_bytes - o.segment_bytes : 0;

  FlushReport report;
  const auto entries = host.EntriesByRecency();
  report.host_chunks = entries.size();
  auto progress = std::make_shared<Progress>();
  std::uint64_t queued_record_bytes = 0;
  for (const auto& [key, value] : entries) {
    if (ssd.Holds(key, value)) {
      ++report.already_on_ssd;
      continue;
    }
    const std::uint64_t size = value->bytes().size();
    const std::uint64_t record = ssd::RecordBytes(size);
    bool leave = report.budget_exhausted || report.capacity_reached;
    if (!leave && queued_record_bytes + record > room) {
      report.capacity_reached = true;
      leave = true;
    }
    if (!leave) {
      // Wait for room in the window, or for the deadline.
      std::unique_lock lock(progress->mu);
      progress->cv.wait_until(lock, deadline, [&] {
        return progress->in_flight == 0 || progress->in_flight_bytes + size <= window_bytes;
      });
      if (Clock::now() >= deadline) {
        report.budget_exhausted = true;
        leave = true;
      } else {
        progress->in_flight_bytes += size;
        ++progress->in_flight;
      }
    }
    if (leave) {
      ++report.left_chunks;
      report.left_bytes += size;
      continue;
    }
    queued_record_bytes += record;
    ssd.Write(key, value, [progress, size](Status s) {
      std::lock_guard lock(progress->mu);
      progress->in_flight_bytes -= size;
      --progress->in_flight;
      if (s.ok()) {
        ++progress->written_chunks;
        progress->written_bytes += size;
      } else {
        ++progress->failed_chunks;
      }
      progress->cv.notify_all();
    });
  }
  {
    std::unique_lock lock(progress->mu);
    progress->cv.wait(lock, [&] { return progress->in_flight == 0; });
    report.written_chunks = progress->written_chunks;
    report.written_bytes = progress->written_bytes;
    report.failed_chunks = progress->failed_chunks;
  }
  report.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return report;
}

}  // namespace kvdepot::daemon
