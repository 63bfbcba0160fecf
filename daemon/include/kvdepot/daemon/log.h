// kvdepotd's log: one logfmt line per event on stderr, which systemd's journal or a terminal picks
// up:
//
//   ts=2026-11-30T05:00:00.123Z level=info msg="listening on 127.0.0.1:7600" tcp=127.0.0.1:7600
//
// Keys are fixed identifiers; a value is written bare when it is a plain token and quoted (with
// `"` and `\` escaped, control characters as \n, \t or \xNN) otherwise, so every line parses as
// logfmt whatever the values hold. Lines are for notable events (start with the effective
// configuration, listeners, reloads, tier changes, errors): nothing is logged per request at
// level info or above.
//
// Thread-safety: every function may be called from any thread; lines never interleave.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvdepot::daemon {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// One key=value pair of a log line.
struct LogField {
  std::string_view key;
  std::string value;
};

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
std::string_view LogLevelName(LogLevel level);  // "debug", "info", "warn", "error"

// Writes the line when `level` is at or above the current level.
void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields = {});
void Log(LogLevel level, std::string_view message, const std::vector<LogField>& fields);

// The line Log would write, without the trailing newline (for tests and for callers that build
// their own field lists).
std::string FormatLogLine(std::string_view timestamp, LogLevel level, std::string_view message,
                          const LogField* fields, std::size_t count);

}  // namespace kvdepot::daemon
