#include "kvdepot/daemon/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
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
  EXPECT_EQ(*ParseSize("0"), 0ull);
  EXPECT_EQ(*ParseSize("7B"), 7ull);
  EXPECT_EQ(*ParseSize("512KiB"), 512ull << 10);
  EXPECT_EQ(*ParseSize("3TiB"), 3ull << 40);
  EXPECT_EQ(*ParseSize("5KB"), 5000ull);
  EXPECT_EQ(*ParseSize("5MB"), 5000000ull);
  EXPECT_EQ(*ParseSize("5TB"), 5000000000000ull);
  EXPECT_EQ(*ParseSize("16777215TiB"), 16777215ull << 40);
  EXPECT_FALSE(ParseSize("MiB").ok());
  EXPECT_FALSE(ParseSize("12XB").ok());
  EXPECT_FALSE(ParseSize("99999999999999999999").ok());
}

// One grammar: digits directly followed by one of the documented units, nothing else.
TEST(ConfigTest, SizeGrammarIsStrict) {
  for (const char* bad : {"64 MiB", "64M", "64K", "64G", "64mib", "64Mi", "-1", "+1", "1.5GiB", "",
                          " 64MiB", "64MiB ", "0x10", "1XB", "64MiB64", "1e9", "64 "}) {
    const auto r = ParseSize(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("digits followed directly by"), std::string::npos)
        << r.status().message();
  }
  for (const char* huge : {"99999999999TiB", "18446744073709551616", "16777216TiB"}) {
    EXPECT_EQ(ParseSize(huge).status().code(), StatusCode::kOutOfRange) << huge;
  }
}

// Every size setting takes the same grammar, as a flag and in the file.
TEST(ConfigTest, EverySizeSettingUsesTheGrammar) {
  const std::string sizes[] = {"host.capacity",          "gpu.capacity",
                               "ssd.capacity",           "ssd.segment_size",
                               "ssd.write_buffer",       "lm.max_value_bytes",
                               "limits.max_value_bytes", "limits.max_body_bytes",
                               "limits.max_lease_bytes", "limits.max_output_bytes"};
  for (const std::string& key : sizes) {
    const std::string flag = FlagOf(key).substr(2);
    Config c;
    EXPECT_TRUE(ApplyConfigFlag(flag, "4MiB", c).ok()) << key;
    const Status spaced = ApplyConfigFlag(flag, "4 MiB", c);
    EXPECT_EQ(spaced.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(spaced.message().find("flag " + FlagOf(key) + " (" + key + "): '4 MiB'"),
              std::string::npos)
        << spaced.message();
    const auto dot = key.find('.');
    const std::string yaml = dot == std::string::npos
                                 ? key + ": 4 MiB\n"
                                 : key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": 4 MiB\n";
    const std::string path = WriteTemp(yaml);
    const Status in_file = ApplyConfigFile(path, c);
    EXPECT_NE(in_file.message().find(path + ":2: key '" + key + "' (" + FlagOf(key) + "): '4 MiB'"),
              std::string::npos)
        << in_file.message();
  }
}

TEST(ConfigTest, ConfigFileMustBeARegularFile) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("kvdepot-config-fs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Config c;
  const Status is_dir = ApplyConfigFile(dir.string(), c);
  EXPECT_EQ(is_dir.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(is_dir.message(), "--config " + dir.string() + ": is a directory, not a file");

  const std::string fifo = (dir / "fifo.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Status is_fifo = ApplyConfigFile(fifo, c);  // returns at once: a FIFO is not opened
  EXPECT_EQ(is_fifo.message(), "--config " + fifo + ": is a FIFO, not a regular file");

  const fs::path dangling = dir / "dangling.yaml";
  fs::create_symlink(dir / "gone.yaml", dangling);
  const Status gone = ApplyConfigFile(dangling.string(), c);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("--config " + dangling.string() +
                                ": cannot open: No such file or directory"),
            std::string::npos)
      << gone.message();

  // A symlink to a regular file (a Kubernetes ConfigMap) is fine.
  const fs::path real = dir / "real.yaml";
  std::ofstream(real) << "log_level: warn\n";
  fs::create_symlink(real, dir / "link.yaml");
  ASSERT_TRUE(ApplyConfigFile((dir / "link.yaml").string(), c).ok());
  EXPECT_EQ(c.log_level, LogLevel::kWarn);

  // An oversized file is refused before it is read.
  const fs::path big = dir / "big.yaml";
  std::ofstream(big) << std::string(kMaxConfigFileBytes + 1, '#');
  const Status too_big = ApplyConfigFile(big.string(), c);
  EXPECT_EQ(too_big.code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_big.message().find("--config " + big.string() + ": file is"), std::string::npos)
      << too_big.message();
  fs::remove_all(dir);
}

TEST(ConfigTest, CheckReadableFile) {
  namespace fs = std::filesystem;
  EXPECT_TRUE(CheckReadableFile(WriteTemp("x")).ok());
  const Status dir = CheckReadableFile(fs::temp_directory_path().string());
  EXPECT_EQ(dir.message(), "is a directory, not a file");
  const Status missing = CheckReadableFile("/nonexistent/file");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("cannot open: No such file or directory"), std::string::npos)
      << missing.message();
  EXPECT_EQ(CheckReadableFile("/dev/null").message(), "is a character device, not a regular file");
}

TEST(ConfigTest, LoadConfigAppliesFileThenFlagsThenChecks) {
  Config c;
  const std::string path = WriteTemp("listen: 127.0.0.1:9000\nhost:\n  capacity: 64MiB\n");
  ASSERT_TRUE(LoadConfig(path, {"--host-capacity", "128MiB", "--log-level=warn"}, c).ok());
  EXPECT_EQ(c.host.capacity_bytes, 128ull << 20);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  EXPECT_EQ(c.server.listen, "127.0.0.1:9000");
  EXPECT_NE(LoadConfig("", {"stray"}, c).message().find("unexpected argument 'stray'"),
            std::string::npos);
  EXPECT_EQ(LoadConfig("", {"--listen"}, c).message(), "flag --listen needs a value");
  const Status cross = LoadConfig(path, {"--listen", "", "--unix", ""}, c);
  EXPECT_NE(cross.message().find(path + ": no listener"), std::string::npos) << cross.message();
  EXPECT_FALSE(LoadConfig(std::filesystem::temp_directory_path().string(), {}, c).ok());
}

TEST(ConfigTest, UnixPathFitsSunPath) {
  Config c;
  const std::string longest = "/tmp/" + std::string(107 - 5, 'u');
  EXPECT_TRUE(ApplyConfigFlag("unix", longest, c).ok());
  const Status s = ApplyConfigFlag("unix", longest + "u", c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("flag --unix (unix): '" + longest + "u' is 108 bytes"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("at most 107"), std::string::npos);
}

TEST(ConfigTest, ListenAddressesAreCheckedWhenRead) {
  Config c;
  for (const char* ok : {"127.0.0.1:0", "[::1]:7600", "0.0.0.0:65535", ""}) {
    EXPECT_TRUE(ApplyConfigFlag("listen", ok, c).ok()) << ok;
    EXPECT_TRUE(ApplyConfigFlag("lm-listen", ok, c).ok()) << ok;
  }
  for (const char* bad :
       {"localhost:7600", "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:x", ":7600"}) {
    const Status s = ApplyConfigFlag("listen", bad, c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string("'") + bad + "'"), std::string::npos) << s.message();
    EXPECT_FALSE(ApplyConfigFlag("lm-listen", bad, c).ok()) << bad;
  }
}

TEST(ConfigTest, SettingErrorNamesKeyFlagValueAndCause) {
  EXPECT_EQ(SettingError("metrics.listen", "127.0.0.1:9464", "address already in use"),
            "metrics.listen 127.0.0.1:9464: address already in use; change metrics.listen or "
            "--metrics-listen");
  EXPECT_EQ(FlagOf("limits.max_value_bytes"), "--limits-max-value-bytes");
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

// An unset limits.max_value_bytes follows host.capacity and ssd.segment_size; an explicit one
// that cannot fit is refused, naming both keys (issue 23).
TEST(ConfigTest, ValueLimitIsDerivedUnlessSetExplicitly) {
  Config c;
  ASSERT_TRUE(LoadConfig("", {"--host-capacity", "16MiB"}, c).ok());
  EXPECT_LT(c.server.limits.max_value_bytes, 16ull << 20);
  EXPECT_GE(c.server.limits.max_value_bytes, 15ull << 20);
  EXPECT_LE(HostTier::ChargeFor(c.server.limits.max_key_bytes, c.server.limits.max_value_bytes),
            16ull << 20)
      << "the largest value accepted can be stored";
  ASSERT_TRUE(LoadConfig("", {}, c).ok());
  EXPECT_EQ(c.server.limits.max_value_bytes, 64ull << 20) << "the default where it fits";
  ASSERT_TRUE(
      LoadConfig(
          "",
          {"--ssd-dir", "/tmp/kvd-ssd", "--ssd-segment-size", "8MiB", "--ssd-capacity", "64MiB"}, c)
          .ok());
  EXPECT_EQ(c.server.limits.max_value_bytes, (8ull << 20) - 4096);
  const Status s =
      LoadConfig("", {"--host-capacity", "16MiB", "--limits-max-value-bytes", "64MiB"}, c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* needle : {"limits.max_value_bytes", "host.capacity", "set explicitly",
                             "--limits-max-value-bytes", "--host-capacity"}) {
    EXPECT_NE(s.message().find(needle), std::string::npos) << needle << ": " << s.message();
  }
}

TEST(ConfigTest, RelativeSsdDirIsUnderDataDir) {
  Config c;
  ASSERT_TRUE(LoadConfig("", {"--data-dir", "/var/lib/kvdepot", "--ssd-dir", "ssd"}, c).ok());
  EXPECT_EQ(c.ssd.dir, "/var/lib/kvdepot/ssd");
  ASSERT_TRUE(LoadConfig("", {"--data-dir", "/var/lib/kvdepot", "--ssd-dir", "/mnt/nvme"}, c).ok());
  EXPECT_EQ(c.ssd.dir, "/mnt/nvme");
}

// Every key's effective value, as ConfigEntries prints it (the start-up log line), is accepted by
// the key's flag and sets exactly that value: an operator can copy any logged value to a flag.
TEST(ConfigTest, EveryPrintedValueRoundTripsThroughItsFlag) {
  Config changed;
  ASSERT_TRUE(ApplyConfigFlag("host-capacity", "3GiB", changed).ok());
  ASSERT_TRUE(ApplyConfigFlag("limits-request-timeout", "1500ms", changed).ok());
  ASSERT_TRUE(ApplyConfigFlag("log-level", "debug", changed).ok());
  for (const Config& source : {Config{}, changed}) {
    const auto entries = ConfigEntries(source);
    Config target;
    for (const auto& [key, value] : entries) {
      const std::string flag = FlagOf(key).substr(2);
      const Status s = ApplyConfigFlag(flag, value, target);
      EXPECT_TRUE(s.ok()) << key << " = '" << value << "': " << s.message();
    }
    EXPECT_EQ(ConfigEntries(target), entries);
    EXPECT_TRUE(ChangedKeys(source, target).empty());
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
  EXPECT_NE(bad.message().find(":3: key 'host.quotas.xyz' (--host-quota): namespace id 'xyz'"),
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
