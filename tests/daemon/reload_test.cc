#include "kvdepot/daemon/reload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kvdepot/daemon/log.h"

namespace kvdepot::daemon {
namespace {

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

}  // namespace
}  // namespace kvdepot::daemon
