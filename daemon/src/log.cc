#include "kvdepot/daemon/log.h"
#include "kvdepot/base/hex.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

namespace kvdepot::daemon {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mu;

bool IsBare(std::string_view v) {
  if (v.empty()) return false;
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u >= 0x7f || c == '"' || c == '=' || c == '\\') return false;
  }
  return true;
}

void AppendValue(std::string& out, std::string_view v) {
  if (IsBare(v)) {
    out += v;
    return;
  }
  out += '"';
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < ' ' || u == 0x7f) {
      AppendHexEscape(out, u);
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string Now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[40];
  const std::size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ", static_cast<int>(ms.count()));
  return stamp;
}

void Write(LogLevel level, std::string_view message, const LogField* fields, std::size_t count) {
  if (level < g_level.load()) return;
  std::string line = FormatLogLine(Now(), level, message, fields, count);
  line += '\n';
  std::lock_guard lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}

void SetLogLevel(LogLevel level) {
  g_level = level;
}
LogLevel GetLogLevel() {
  return g_level.load();
}

std::string FormatLogLine(std::string_view timestamp, LogLevel level, std::string_view message,
                          const LogField* fields, std::size_t count) {
  std::string line = "ts=";
  line += timestamp;
  line += " level=";
  line += LogLevelName(level);
  line += " msg=";
  AppendValue(line, message);
  for (std::size_t i = 0; i < count; ++i) {
    line += ' ';
    line += fields[i].key;
    line += '=';
    AppendValue(line, fields[i].value);
  }
  return line;
}

void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields) {
  Write(level, message, fields.begin(), fields.size());
}

void Log(LogLevel level, std::string_view message, const std::vector<LogField>& fields) {
  Write(level, message, fields.data(), fields.size());
}

}  // namespace kvdepot::daemon
