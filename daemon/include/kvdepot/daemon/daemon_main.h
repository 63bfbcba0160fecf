// kvdepotd's command line: flags, config loading, start, signal handling, graceful shutdown.
#pragma once

namespace kvdepot::daemon {

// Runs kvdepotd. Exit status: 0 after a clean shutdown (SIGTERM/SIGINT) or a successful
// --check-config / --help / --version; 2 when the command line or the configuration is wrong
// (what --check-config refuses: a bad flag or value, a config file that is missing, a directory
// or not YAML); 1 when a valid configuration cannot start here (a busy port, a missing
// certificate or token file, an unwritable directory). A failed start writes exactly one
// "kvdepotd: error: ..." line naming the setting, its value and the cause (docs/operations.md).
// Never ends by an exception: one that reaches here is reported that way, with status 1.
int DaemonMain(int argc, char** argv);

}  // namespace kvdepot::daemon
