#include "kvdepot/daemon/reload.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "kvdepot/client/client.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/protocol/lm_wire.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using ::kvdepot::test_socket::ClosedByPeer;
using ::kvdepot::test_socket::ConnectLoopback;
using ::kvdepot::test_socket::WaitFor;

using namespace std::chrono_literals;

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(ConfigEntriesTest, EveryEntryRoundTripsThroughItsFlag) {
  Config c;
  c.server.listen = "[::1]:7000";
  c.host.capacity_bytes = 3ull << 30;
  c.log_level = LogLevel::kWarn;
  c.metrics_listen = "";
  c.host.namespace_quotas[std::string(16, '\x01')] = 1 << 20;
  Config copy;
  for (const auto& [key, value] : ConfigEntries(c)) {
    std::string flag = key;
    if (flag.rfind("host.quotas.", 0) == 0) {
      ASSERT_TRUE(ApplyConfigFlag("host-quota", flag.substr(12) + "=" + value, copy).ok());
      continue;
    }
    std::replace(flag.begin(), flag.end(), '.', '-');
    std::replace(flag.begin(), flag.end(), '_', '-');
    ASSERT_TRUE(ApplyConfigFlag(flag, value, copy).ok()) << key << "=" << value;
  }
  EXPECT_TRUE(ChangedKeys(c, copy).empty());
  EXPECT_EQ(ConfigEntries(c).size(), ConfigKeys().size())  // one quota here, one quota help line
      << "every key is rendered";
}

TEST(ConfigEntriesTest, MetricsListenIsValidated) {
  Config c;
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9600");
  EXPECT_TRUE(ApplyConfigFlag("metrics-listen", "0.0.0.0:0", c).ok());
  EXPECT_TRUE(ApplyConfigFlag("metrics-listen", "", c).ok());
  EXPECT_FALSE(ApplyConfigFlag("metrics-listen", "9600", c).ok());
  EXPECT_FALSE(ApplyConfigFlag("metrics-listen", "host:99999", c).ok());
}

TEST(ReloadTest, AppliesWhatCanChangeAndReportsTheRest) {
  Config running;
  running.host = HostTierOptions::With(64ull << 20);
  running.host.namespace_quotas[std::string(16, 'A')] = 8 << 20;
  HostTier host(running.host);
  for (int i = 0; i < 40; ++i) {
    auto v = host.Allocate("k" + std::to_string(i), 1 << 20);
    ASSERT_TRUE(v.ok());
    host.Insert("k" + std::to_string(i), *v);
  }
  Config next = running;
  next.log_level = LogLevel::kDebug;
  next.host.capacity_bytes = 16ull << 20;
  next.host.namespace_quotas[std::string(16, 'A')] = 4 << 20;
  next.host.namespace_quotas[std::string(16, 'B')] = 4 << 20;
  next.server.listen = "127.0.0.1:7601";
  next.server.io_threads = 7;
  testing::internal::CaptureStderr();
  const ReloadResult r = ApplyReload(next, running, host);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(GetLogLevel(), LogLevel::kDebug);
  SetLogLevel(LogLevel::kInfo);
  EXPECT_TRUE(Has(r.applied, "log_level"));
  EXPECT_TRUE(Has(r.applied, "host.capacity"));
  EXPECT_TRUE(Has(r.applied, "host.quotas.41414141414141414141414141414141"));
  EXPECT_TRUE(Has(r.restart_needed, "listen"));
  EXPECT_TRUE(Has(r.restart_needed, "io_threads"));
  EXPECT_TRUE(Has(r.restart_needed, "host.quotas.42424242424242424242424242424242"));
  EXPECT_EQ(host.capacity(), 16ull << 20);
  EXPECT_LE(host.stats().bytes, 16ull << 20);
  EXPECT_EQ(host.stats().namespaces.at(0).quota, 4u << 20);
  EXPECT_EQ(running.host.capacity_bytes, 16ull << 20);
  EXPECT_EQ(running.server.listen, "127.0.0.1:7600") << "the running value is kept";
  EXPECT_NE(log.find(R"(msg="host tier capacity changed" tier=host from=67108864 to=16777216)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(R"(level=warn msg="config change needs a restart; keeping the running )"
                     R"(value" key=listen running=127.0.0.1:7600 configured=127.0.0.1:7601)"),
            std::string::npos)
      << log;
  // A second reload of the same file changes nothing more.
  testing::internal::CaptureStderr();
  const ReloadResult again = ApplyReload(next, running, host);
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(again.applied.empty());
  EXPECT_EQ(again.restart_needed.size(), r.restart_needed.size());
}

// SIGHUP's limits.request_timeout and limits.idle_timeout reach the running listeners, native and
// lm://: connections opened before the reload (idle, or stalled inside a request) are closed by
// the new, shorter timeouts — request_timeout was off before — and so are new ones; a busy
// connection stays open. Each change is logged.
TEST(ReloadTest, TimeoutsReachOpenAndNewConnectionsOfBothListeners) {
  Config running;
  running.server.listen = "127.0.0.1:0";
  running.server.request_timeout = running.lm.request_timeout = 0ms;  // off
  running.server.idle_timeout = running.lm.idle_timeout = 600000ms;   // 10 min
  running.lm.listen = "127.0.0.1:0";
  HostTier host(HostTierOptions::With(16ull << 20));
  Store store(host, nullptr);
  Server server(running.server, store);
  ASSERT_TRUE(server.Start().ok());
  LmServer lm(running.lm, store);
  ASSERT_TRUE(lm.Start().ok());

  // Before the reload: an idle connection and one stalled mid-header on each listener.
  const int native_idle = ConnectLoopback(server.tcp_port());
  const int native_stalled = ConnectLoopback(server.tcp_port());
  const std::array<char, 10> half_frame = {'K', 'V', 'D', 'P', 1, 1, 0, 0, 0, 0};
  ASSERT_EQ(::send(native_stalled, half_frame.data(), half_frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(half_frame.size()));
  const int lm_idle = ConnectLoopback(lm.port());
  const int lm_stalled = ConnectLoopback(lm.port());
  std::array<std::byte, lm::kRequestHeaderBytes> lm_header{};
  lm_header[0] = std::byte{lm::kCommandHealth};
  ASSERT_EQ(::send(lm_stalled, lm_header.data(), 90, MSG_NOSIGNAL), 90);
  client::ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string(server.tcp_port());
  auto busy = client::Connection::Connect(co);
  ASSERT_TRUE(busy.ok());
  ASSERT_TRUE(WaitFor([&] { return server.stats().connections_open == 3; }));
  ASSERT_TRUE(WaitFor([&] { return lm.stats().connections_open == 2; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server.stats().idle_timeouts + server.stats().request_timeouts, 0u);

  Config next = running;
  next.server.request_timeout = next.lm.request_timeout = 300ms;
  next.server.idle_timeout = next.lm.idle_timeout = 800ms;
  testing::internal::CaptureStderr();
  const ReloadResult r = ApplyReload(next, running, host, ReloadTargets{&server, &lm});
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Has(r.applied, "limits.request_timeout"));
  EXPECT_TRUE(Has(r.applied, "limits.idle_timeout"));
  EXPECT_TRUE(r.restart_needed.empty());
  EXPECT_EQ(running.server.idle_timeout, 800ms);
  EXPECT_EQ(running.lm.request_timeout, 300ms);
  EXPECT_NE(log.find(R"(msg="connection timeout changed" key=limits.idle_timeout from=600000ms )"
                     R"(to=800ms listeners=native,lm connections="new and open")"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(R"(key=limits.request_timeout from=0ms to=300ms listeners=native,lm)"),
            std::string::npos)
      << log;

  const int native_new = ConnectLoopback(server.tcp_port());  // opened after the reload
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 15; ++i) {  // 1.5 s of pings, 100 ms apart: never idle
    ASSERT_TRUE((*busy)->Ping().ok()) << i;
    std::this_thread::sleep_for(100ms);
  }
  for (int fd : {native_idle, native_stalled, lm_idle, lm_stalled, native_new}) {
    EXPECT_TRUE(ClosedByPeer(fd)) << fd;
    ::close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
  EXPECT_TRUE((*busy)->Ping().ok()) << "a busy connection stays open";
  EXPECT_EQ(server.stats().request_timeouts, 1u);
  EXPECT_EQ(server.stats().idle_timeouts, 2u);
  EXPECT_EQ(lm.stats().request_timeouts, 1u);
  EXPECT_EQ(lm.stats().idle_timeouts, 1u);
  busy->reset();
  lm.Stop();
  server.Stop();
}

}  // namespace
}  // namespace kvdepot::daemon
