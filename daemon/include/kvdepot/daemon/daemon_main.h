// kvdepotd's command line: flags, config loading, start, signal handling, graceful shutdown.
#pragma once

namespace kvdepot::daemon {

// Runs kvdepotd. Exit status: 0 after a clean shutdown (SIGTERM/SIGINT) or a successful
// --check-config / --help / --version; 1 when the daemon cannot start; 2 for a bad command line
// or configuration.
int DaemonMain(int argc, char** argv);

}  // namespace kvdepot::daemon
