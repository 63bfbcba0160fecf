// The platform probe kvdepotd logs at start-up (platform_probe.h): library versions and whether
// io_uring works here.
#include "kvdepot/daemon/platform_probe.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>

namespace kvdepot::daemon {
namespace {

TEST(PlatformProbeTest, ReportsVersionsAndIoUring) {
  const PlatformReport report = ProbePlatform();
  EXPECT_FALSE(report.rocksdb_version.empty());
  EXPECT_EQ(report.boost_version.rfind("1.", 0), 0u) << report.boost_version;
  EXPECT_FALSE(report.io_uring_detail.empty());
  const std::string text = FormatPlatformReport(report);
  EXPECT_NE(text.find(report.rocksdb_version), std::string::npos) << text;
  std::cout << text;
  if (!report.io_uring_available) {
    GTEST_SKIP() << "io_uring unavailable on this host: " << report.io_uring_detail;
  }
}

}  // namespace
}  // namespace kvdepot::daemon
