// Shared pieces of the CLI's command implementations.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/client/client.h"

namespace kvdepot::cli {

// The largest value the CLI reads or accepts (1 TiB): no limit of its own in practice, since the
// server's limits.max_value_bytes governs (it refuses larger values with its limit).
inline constexpr std::uint64_t kCliMaxValueBytes = 1ull << 40;

// Output streams of one CLI invocation.
struct Io {
  std::ostream& out;
  std::ostream& err;
};

// `kvdepot codec SUBCOMMAND ...`; argv starts after "codec".
Status RunCodecCommand(std::span<const char* const> argv, Io io);

// Help text of `kvdepot codec`.
void PrintCodecUsage(std::ostream& out);

// Prints a container's header, sections and checksum status (text or JSON); an error when the
// container is malformed or a checksum fails (after printing what could be read). `name` labels
// the output (a file name or a key).
Status InspectContainerBytes(const std::string& name, std::span<const std::byte> bytes, bool json,
                             Io io);

// Which of the process's standard streams are terminals: `get` without -o writes to stdout
// unless it is one, `del --prefix` asks for confirmation only on one, `bench` draws its progress
// bar only on one. All false when RunCli writes to other streams (tests).
struct Terminals {
  bool stdout_is_terminal = false;
  bool stdin_is_terminal = false;
  bool stderr_is_terminal = false;
};

// Commands that talk to kvdepotd as `remote` says (address, token, TLS). Sets *handled = false
// for an unknown command.
Status RunRemoteCommand(const client::ClientOptions& remote, std::string_view command,
                        std::span<const char* const> argv, Io io, bool* handled,
                        const Terminals& terminals = {});

// `kvdepot stats` and `kvdepot top` (cli_stats.cc).
Status RunStats(const client::ClientOptions& remote, std::span<const char* const> argv, Io io);
Status RunTop(const client::ClientOptions& remote, std::span<const char* const> argv, Io io);

// A connection to kvdepotd as `remote` says; errors name the address.
Result<std::unique_ptr<client::Connection>> Connect(const client::ClientOptions& remote);

// `kvdepot cluster status|owner ...` (cluster_command.cc); argv starts after "cluster".
Status RunClusterCommand(const client::ClientOptions& remote, std::span<const char* const> argv,
                         Io io);

// `kvdepot bench`: a PUT/GET/LOOKUP load generator against kvdepotd, or Redis with --redis.
Status RunBench(const client::ClientOptions& remote, std::span<const char* const> argv, Io io,
                const Terminals& terminals);

// Sizes for people: "512 B", "1.5 KiB", "64.0 MiB", "2.00 GiB".
std::string HumanBytes(double bytes);

// A command-line KEY: 96 hex digits decode to a 48-byte chunk key; anything else is taken as is.
std::string KeyFromArg(std::string_view arg);
// A stored key for display: as is when printable ASCII, else hex.
std::string KeyForDisplay(std::string_view key);

}  // namespace kvdepot::cli
