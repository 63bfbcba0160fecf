// Every library the daemon is built on links and works on this machine: the build-level promise
// of the foundation issue, checked for real (a RocksDB database, an io_uring ring, a YAML parse,
// a Prometheus exposition, an Asio event loop, the systemd notify API).
#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <gtest/gtest.h>
#include <liburing.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <rocksdb/db.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "kvdepot/daemon/platform_probe.h"

namespace kvdepot::daemon {
namespace {

TEST(DependenciesTest, RocksDbOpensWritesAndReads) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvdepot-rocksdb-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "key", "value").ok());
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "key", &value).ok());
  EXPECT_EQ(value, "value");
  db.reset();
  std::filesystem::remove_all(dir);
}

TEST(DependenciesTest, PlatformProbeReportsIoUring) {
  const PlatformReport report = ProbePlatform();
  EXPECT_FALSE(report.rocksdb_version.empty());
  EXPECT_EQ(report.boost_version.rfind("1.", 0), 0u) << report.boost_version;
  EXPECT_FALSE(report.io_uring_detail.empty());
  std::cout << FormatPlatformReport(report);
  if (!report.io_uring_available) {
    GTEST_SKIP() << "io_uring unavailable on this host: " << report.io_uring_detail;
  }
}

TEST(DependenciesTest, YamlParses) {
  const YAML::Node node = YAML::Load("listen: 127.0.0.1:7600\nhost_capacity: 64MiB\n");
  EXPECT_EQ(node["listen"].as<std::string>(), "127.0.0.1:7600");
  EXPECT_EQ(node["host_capacity"].Mark().line, 1);
}

TEST(DependenciesTest, PrometheusSerializes) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("kvdepot_probe_total").Help("probe").Register(
      *registry);
  family.Add({{"tier", "host"}}).Increment(3);
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("kvdepot_probe_total{tier=\"host\"} 3"), std::string::npos) << text;
}

TEST(DependenciesTest, AsioRunsHandlers) {
  boost::asio::io_context io;
  int ran = 0;
  boost::asio::post(io, [&] { ++ran; });
  io.run();
  EXPECT_EQ(ran, 1);
}

TEST(DependenciesTest, SystemdNotifyIsANoOpOutsideSystemd) {
  // Without NOTIFY_SOCKET sd_notify returns 0 (nothing to notify), never an error.
  if (::getenv("NOTIFY_SOCKET") != nullptr) GTEST_SKIP() << "running under systemd notify";
  EXPECT_EQ(sd_notify(0, "STATUS=probe"), 0);
}

}  // namespace
}  // namespace kvdepot::daemon
