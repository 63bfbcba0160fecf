// The watchdog pings only while the probe answers (a stuck I/O loop stops the pings), checked
// against a notify socket this test owns.
#include "kvdepot/daemon/service_notify.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace kvdepot::daemon {
namespace {

class NotifySocket {
 public:
  NotifySocket() {
    path_ = (std::filesystem::temp_directory_path() /
             ("kvd-notify-" + std::to_string(::getpid()) + ".sock"))
                .string();
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{0, 20000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
    ::setenv("WATCHDOG_USEC", "100000", 1);  // ping every 50 ms
    ::unsetenv("WATCHDOG_PID");
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  // WATCHDOG=1 messages received within `window`.
  int CountPings(std::chrono::milliseconds window) {
    int pings = 0;
    const auto end = std::chrono::steady_clock::now() + window;
    char buf[256];
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0 && std::string(buf, static_cast<std::size_t>(n)) == "WATCHDOG=1") ++pings;
    }
    return pings;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(WatchdogTest, PingsOnlyWhileTheProbeAnswers) {
  NotifySocket notify;
  std::atomic<bool> stuck{false};
  std::atomic<int> probes{0};
  Watchdog watchdog([&](std::function<void()> done) {
    ++probes;
    if (!stuck.load()) {
      std::thread(std::move(done)).detach();  // answered from another thread, like an I/O loop
    }
  });
  ASSERT_TRUE(watchdog.enabled());
  EXPECT_EQ(watchdog.interval(), std::chrono::microseconds(100000));
  EXPECT_GE(notify.CountPings(std::chrono::milliseconds(400)), 4);
  stuck = true;
  notify.CountPings(std::chrono::milliseconds(60));  // a ping already on its way
  EXPECT_EQ(notify.CountPings(std::chrono::milliseconds(300)), 0) << "a stuck loop gets no ping";
  EXPECT_GE(probes.load(), 8) << "it keeps probing";
  stuck = false;
  EXPECT_GE(notify.CountPings(std::chrono::milliseconds(300)), 2) << "pings resume";
}

TEST(WatchdogTest, DisabledWithoutWatchdogUsec) {
  ::unsetenv("WATCHDOG_USEC");
  Watchdog watchdog([](std::function<void()> done) { done(); });
  EXPECT_FALSE(watchdog.enabled());
}

}  // namespace
}  // namespace kvdepot::daemon
