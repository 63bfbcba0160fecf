// kvdepotd's log: one line per event on stderr ("2026-11-30T05:00:00.123Z info message"), which
// systemd's journal or a terminal picks up. Thread-safe; lines never interleave.
#pragma once

#include <string_view>

#include "kvdepot/daemon/config.h"

namespace kvdepot::daemon {

void SetLogLevel(LogLevel level);
void Log(LogLevel level, std::string_view message);

}  // namespace kvdepot::daemon
