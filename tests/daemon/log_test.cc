#include "kvdepot/daemon/log.h"

#include <gtest/gtest.h>

namespace kvdepot::daemon {
namespace {

std::string Line(std::string_view message, std::initializer_list<LogField> fields) {
  return FormatLogLine("2026-11-30T05:00:00.123Z", LogLevel::kWarn, message, fields.begin(),
                       fields.size());
}

TEST(LogTest, LinesAreLogfmt) {
  EXPECT_EQ(Line("listening on 127.0.0.1:7600", {{"tcp", "127.0.0.1:7600"}, {"io_threads", "2"}}),
            R"(ts=2026-11-30T05:00:00.123Z level=warn msg="listening on 127.0.0.1:7600" )"
            R"(tcp=127.0.0.1:7600 io_threads=2)");
  EXPECT_EQ(Line("started", {}), "ts=2026-11-30T05:00:00.123Z level=warn msg=started");
}

TEST(LogTest, ValuesThatAreNotPlainTokensAreQuotedAndEscaped) {
  EXPECT_EQ(Line("m", {{"empty", ""}}), R"(ts=2026-11-30T05:00:00.123Z level=warn msg=m empty="")");
  EXPECT_EQ(Line("m", {{"error", "file \"a b\"\\x=1\n\x01"}}),
            R"(ts=2026-11-30T05:00:00.123Z level=warn msg=m error="file \"a b\"\\x=1\n\x01")");
}

TEST(LogTest, LevelFiltersAndNames) {
  SetLogLevel(LogLevel::kError);
  EXPECT_EQ(GetLogLevel(), LogLevel::kError);
  testing::internal::CaptureStderr();
  Log(LogLevel::kInfo, "hidden");
  Log(LogLevel::kError, "shown", {{"k", "v"}});
  const std::string out = testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find("level=error msg=shown k=v\n"), std::string::npos) << out;
  EXPECT_EQ(LogLevelName(LogLevel::kDebug), "debug");
}

}  // namespace
}  // namespace kvdepot::daemon
