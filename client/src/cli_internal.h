// Shared pieces of the CLI's command implementations.
#pragma once

#include <ostream>
#include <span>

#include "kvdepot/status.h"

namespace kvdepot::cli {

// Output streams of one CLI invocation.
struct Io {
  std::ostream& out;
  std::ostream& err;
};

// `kvdepot codec SUBCOMMAND ...`; argv starts after "codec".
Status RunCodecCommand(std::span<const char* const> argv, Io io);

// Help text of `kvdepot codec`.
void PrintCodecUsage(std::ostream& out);

}  // namespace kvdepot::cli
