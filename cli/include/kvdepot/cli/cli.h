// The `kvdepot` command-line tool. The executable's main() only calls RunCli.
#pragma once

#include <iosfwd>

namespace kvdepot::cli {

// Exit codes of every kvdepot command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // the command failed (bad input, I/O error, ...)
inline constexpr int kExitUsage = 2;  // the command line itself is wrong

// Runs `kvdepot ARGS...`. Results go to `out`; on failure exactly one line
// "kvdepot: error: ..." goes to `err`. Never throws.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace kvdepot::cli
