// LogLimiter: at most one log line per interval for one kind of event, so that a client repeating
// a mistake (reconnecting with the wrong wire layout, sending oversized values, wrong tokens)
// cannot flood the log. Lines it suppresses are counted by the caller's metrics, not here.
//
// Thread-safety: Allow may be called from any thread; of racing callers at most one gets true.
#pragma once

#include <atomic>
#include <chrono>

namespace kvdepot::daemon {

class LogLimiter {
 public:
  // True when no line was allowed in the last `interval` (the caller then logs).
  bool Allow(std::chrono::steady_clock::duration interval) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto last = last_.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval.count()) return false;
    return last_.compare_exchange_strong(last, now, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::chrono::steady_clock::rep> last_{0};
};

}  // namespace kvdepot::daemon
