// systemd integration for Type=notify services (systemd/kvdepotd.service): readiness, reload and
// stop notifications and the watchdog, through libsystemd's sd_notify. Outside systemd
// (NOTIFY_SOCKET unset) every call is a no-op, so kvdepotd runs the same from a terminal.
//
// Thread-safety: the Notify functions may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

namespace kvdepot::daemon {

void NotifyReady(std::string_view status);  // READY=1 with a STATUS= line: listeners are bound
void NotifyReloading();                     // RELOADING=1: a SIGHUP reload began (READY=1 ends it)
void NotifyStopping();                      // STOPPING=1: draining before exit
// STATUS=`status`, and EXTEND_TIMEOUT_USEC=`extend` when not zero: the service manager then
// waits at least that much longer for the current step (e.g. the shutdown flush) to end.
void NotifyStatus(std::string_view status, std::chrono::microseconds extend = {});

// Sends WATCHDOG=1 every WatchdogSec/2 while the daemon proves it is alive: before each ping it
// asks `probe` to call back once every I/O loop has gone round (Server::Probe), and it pings only
// when the callback came within the period. A stuck I/O thread therefore stops the pings and
// systemd restarts the service; a warning is logged for each missed period. Does nothing when the
// service manager asked for no watchdog (WATCHDOG_USEC unset, or for another pid).
class Watchdog {
 public:
  using Probe = std::function<void(std::function<void()> done)>;
  explicit Watchdog(Probe probe);
  ~Watchdog();  // stops pinging; returns once the pinging thread has exited
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  bool enabled() const { return interval_.count() > 0; }
  std::chrono::microseconds interval() const { return interval_; }  // WatchdogSec

 private:
  struct State;
  void Run();
  std::chrono::microseconds interval_{0};
  Probe probe_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace kvdepot::daemon
