// The bounded queue between the producers of KV events (I/O threads, the SSD tier's threads) and
// the publisher thread. TryPush never waits for room: a full queue refuses the event (the caller
// counts it as dropped), so a slow or stuck publisher never slows the store down. The one lock is
// held for a move into a preallocated slot; a producer wakes the consumer only when the queue was
// empty, so a busy queue costs no futex wake-up per event.
//
// Thread-safety: every method from any thread; one consumer (Pop).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "events/event_encoding.h"

namespace kvdepot::daemon::events {

// What a producer hands over: the raw key (interpreted on the publisher thread), or a
// namespace's origin (kind kOrigin: key = the namespace id).
struct QueuedEvent {
  enum class Kind : std::uint8_t { kStored, kRemoved, kCleared, kOrigin };
  Kind kind = Kind::kStored;
  EventMedium medium = EventMedium::kCpu;
  std::string key;
  std::string instance;  // kOrigin only
  std::string model;     // kOrigin only
};

class EventQueue {
 public:
  explicit EventQueue(std::size_t capacity) : slots_(capacity == 0 ? 1 : capacity) {}

  // False when full (nothing changed) or closed.
  bool TryPush(QueuedEvent&& event) {
    bool was_empty = false;
    {
      std::lock_guard lock(mu_);
      if (closed_ || size_ == slots_.size()) return false;
      slots_[(head_ + size_) % slots_.size()] = std::move(event);
      was_empty = size_++ == 0;
    }
    if (was_empty) ready_.notify_one();
    return true;
  }

  // Waits for room; false when closed.
  bool PushWait(QueuedEvent&& event) {
    {
      std::unique_lock lock(mu_);
      room_.wait(lock, [this] { return closed_ || size_ < slots_.size(); });
      if (closed_) return false;
      slots_[(head_ + size_) % slots_.size()] = std::move(event);
      ++size_;
    }
    ready_.notify_one();
    return true;
  }

  // Moves up to `max` events into `out` (appended), waiting up to `wait` for the first one.
  // Returns how many were moved.
  std::size_t Pop(std::vector<QueuedEvent>& out, std::size_t max, std::chrono::milliseconds wait) {
    std::size_t n = 0;
    {
      std::unique_lock lock(mu_);
      ready_.wait_for(lock, wait, [this] { return size_ != 0 || closed_; });
      while (size_ != 0 && n < max) {
        out.push_back(std::move(slots_[head_]));
        head_ = (head_ + 1) % slots_.size();
        --size_;
        ++n;
      }
    }
    if (n != 0) room_.notify_all();
    return n;
  }

  // Refuses new events and wakes every waiter; queued events can still be popped.
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
  }

  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return size_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable ready_;  // the consumer waits for events
  std::condition_variable room_;   // PushWait waits for room
  std::vector<QueuedEvent> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
  bool closed_ = false;
};

}  // namespace kvdepot::daemon::events
