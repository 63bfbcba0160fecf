#include "kvdepot/daemon/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kvdepot::daemon {
namespace {

std::string WriteTemp(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvdepot-config-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

TEST(ConfigTest, Sizes) {
  EXPECT_EQ(*ParseSize("64MiB"), 64ull << 20);
  EXPECT_EQ(*ParseSize("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseSize("2GB"), 2000000000ull);
  EXPECT_EQ(*ParseSize("4096"), 4096ull);
  EXPECT_FALSE(ParseSize("MiB").ok());
  EXPECT_FALSE(ParseSize("12XB").ok());
  EXPECT_FALSE(ParseSize("99999999999999999999").ok());
}

TEST(ConfigTest, TimeoutsApplyToBothListeners) {
  Config c;
  EXPECT_EQ(c.server.request_timeout, std::chrono::seconds(30));
  EXPECT_EQ(c.server.idle_timeout, std::chrono::minutes(10));
  ASSERT_TRUE(ApplyConfigFlag("limits-request-timeout", "5s", c).ok());
  EXPECT_EQ(c.server.request_timeout, std::chrono::seconds(5));
  EXPECT_EQ(c.lm.request_timeout, std::chrono::seconds(5));
  ASSERT_TRUE(ApplyConfigFlag("limits-idle-timeout", "0", c).ok());
  EXPECT_EQ(c.server.idle_timeout.count(), 0);
  EXPECT_EQ(c.lm.idle_timeout.count(), 0);
  ASSERT_TRUE(ApplyConfigFlag("limits-idle-timeout", "250ms", c).ok());
  EXPECT_EQ(c.lm.idle_timeout, std::chrono::milliseconds(250));
  ASSERT_TRUE(ApplyConfigFlag("limits-idle-timeout", "2m", c).ok());
  EXPECT_EQ(c.server.idle_timeout, std::chrono::minutes(2));
  for (const char* bad : {"", "s", "5x", "25h", "-1s", "99999999999999999999"}) {
    const Status s = ApplyConfigFlag("limits-request-timeout", bad, c);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--limits-request-timeout"), std::string::npos) << s.message();
  }
}

TEST(ConfigTest, FileThenFlags) {
  Config c;
  const std::string path = WriteTemp(
      "listen: 127.0.0.1:9000\nhost:\n  capacity: 64MiB\n  eviction: lru\nlog_level: debug\n");
  ASSERT_TRUE(ApplyConfigFile(path, c).ok());
  EXPECT_EQ(c.server.listen, "127.0.0.1:9000");
  EXPECT_EQ(c.host.capacity_bytes, 64ull << 20);
  EXPECT_EQ(c.host.policy, EvictionPolicy::kLru);
  ASSERT_TRUE(ApplyConfigFlag("host-capacity", "128MiB", c).ok());
  EXPECT_EQ(c.host.capacity_bytes, 128ull << 20);
  ASSERT_TRUE(ApplyConfigFlag("unix", "/tmp/x.sock", c).ok());
  EXPECT_EQ(c.server.unix_path, "/tmp/x.sock");
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(ConfigTest, ErrorsNameFileLineAndKey) {
  Config c;
  const std::string path = WriteTemp("listen: 127.0.0.1:9000\nhost:\n  capacity: lots\n");
  const Status s = ApplyConfigFile(path, c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ":3: key 'host.capacity'"), std::string::npos) << s.message();
  const Status unknown = ApplyConfigFile(WriteTemp("hots:\n  capacity: 1GiB\n"), c);
  EXPECT_NE(unknown.message().find(":2: key 'hots.capacity': unknown key"), std::string::npos)
      << unknown.message();
  const Status syntax = ApplyConfigFile(WriteTemp("listen: [\n"), c);
  EXPECT_FALSE(syntax.ok());
  EXPECT_EQ(ApplyConfigFile("/nonexistent.yaml", c).code(), StatusCode::kNotFound);
  const Status flag = ApplyConfigFlag("io-threads", "0", c);
  EXPECT_NE(flag.message().find("flag --io-threads"), std::string::npos) << flag.message();
  EXPECT_FALSE(ApplyConfigFlag("no-such-flag", "1", c).ok());
  c.server.listen.clear();
  EXPECT_FALSE(ValidateConfig(c).ok());
}

TEST(ConfigTest, EveryKeyHasAFlag) {
  for (const ConfigKeyHelp& k : ConfigKeys()) {
    EXPECT_EQ(k.flag.rfind("--", 0), 0u);
    EXPECT_FALSE(k.help.empty()) << k.key;
  }
}

}  // namespace
}  // namespace kvdepot::daemon

namespace kvdepot::daemon {
namespace {

TEST(ConfigTest, NamespaceQuotas) {
  Config c;
  const std::string nsid = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(ApplyConfigFile(WriteTemp("host:\n  quotas:\n    " + nsid + ": 64MiB\n"), c).ok());
  ASSERT_EQ(c.host.namespace_quotas.size(), 1u);
  EXPECT_EQ(c.host.namespace_quotas.begin()->second, 64ull << 20);
  EXPECT_EQ(c.host.namespace_quotas.begin()->first[15], '\xff');
  ASSERT_TRUE(ApplyConfigFlag("host-quota", "ffeeddccbbaa99887766554433221100=2GiB", c).ok());
  EXPECT_EQ(c.host.namespace_quotas.size(), 2u);
  const Status bad = ApplyConfigFile(WriteTemp("host:\n  quotas:\n    xyz: 1GiB\n"), c);
  EXPECT_NE(bad.message().find(":3: key 'host.quotas.xyz': namespace id 'xyz'"),
            std::string::npos)
      << bad.message();
  EXPECT_FALSE(ApplyConfigFlag("host-quota", "nonsense", c).ok());
}

}  // namespace
}  // namespace kvdepot::daemon

namespace kvdepot::daemon {
namespace {

TEST(ConfigTest, RespListener) {
  Config c;
  EXPECT_TRUE(c.resp.listen.empty());  // off by default
  ASSERT_TRUE(ApplyConfigFile(WriteTemp("resp:\n  listen: 127.0.0.1:6379\n  io_threads: 4\n"
                                        "limits:\n  idle_timeout: 5s\n  request_timeout: 2s\n"),
                              c)
                  .ok());
  EXPECT_EQ(c.resp.listen, "127.0.0.1:6379");
  EXPECT_EQ(c.resp.io_threads, 4u);
  EXPECT_EQ(c.resp.idle_timeout, std::chrono::milliseconds(5000));
  EXPECT_EQ(c.resp.request_timeout, std::chrono::milliseconds(2000));
  EXPECT_TRUE(ApplyConfigFlag("resp-io-threads", "2", c).ok());
  EXPECT_EQ(c.resp.io_threads, 2u);
  EXPECT_FALSE(ApplyConfigFlag("resp-io-threads", "0", c).ok());
  EXPECT_TRUE(ApplyConfigFlag("resp-listen", "", c).ok());
  EXPECT_TRUE(c.resp.listen.empty());
}

}  // namespace
}  // namespace kvdepot::daemon
