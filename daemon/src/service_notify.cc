#include "kvdepot/daemon/service_notify.h"

#include <systemd/sd-daemon.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "kvdepot/daemon/log.h"

namespace kvdepot::daemon {

void NotifyReady(std::string_view status) {
  const std::string message = "READY=1\nSTATUS=" + std::string(status);
  sd_notify(0, message.c_str());
}

void NotifyReloading() {
  sd_notify(0, "RELOADING=1");
}
void NotifyStopping() {
  sd_notify(0, "STOPPING=1");
}

void NotifyStatus(std::string_view status, std::chrono::microseconds extend) {
  std::string message = "STATUS=" + std::string(status);
  if (extend.count() > 0) message += "\nEXTEND_TIMEOUT_USEC=" + std::to_string(extend.count());
  sd_notify(0, message.c_str());
}

// Shared with the probe callbacks, which may run after the Watchdog is gone.
struct Watchdog::State {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::uint64_t asked = 0;     // probes sent
  std::uint64_t answered = 0;  // highest probe answered
};

Watchdog::Watchdog(Probe probe) : probe_(std::move(probe)), state_(std::make_shared<State>()) {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  interval_ = std::chrono::microseconds(usec);
  thread_ = std::thread([this] { Run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Run() {
  const auto period = interval_ / 2;
  std::unique_lock lock(state_->mu);
  while (!state_->stop) {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t id = ++state_->asked;
    lock.unlock();
    probe_([state = state_, id] {
      {
        std::lock_guard l(state->mu);
        if (id > state->answered) state->answered = id;
      }
      state->cv.notify_all();
    });
    lock.lock();
    const bool alive = state_->cv.wait_until(
        lock, start + period, [&] { return state_->stop || state_->answered >= id; });
    if (state_->stop) break;
    if (alive) {
      sd_notify(0, "WATCHDOG=1");
    } else {
      Log(LogLevel::kWarn, "watchdog: an I/O loop did not answer; withholding the ping",
          {{"period_ms", std::to_string(period.count() / 1000)}});
    }
    state_->cv.wait_until(lock, start + period, [&] { return state_->stop; });
  }
}

}  // namespace kvdepot::daemon
