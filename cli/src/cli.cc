#include "kvdepot/cli/cli.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "cli_args.h"
#include "cli_commands.h"
#include "cli_internal.h"

namespace kvdepot::cli {
namespace {

constexpr const char* kVersion = KVDEPOT_VERSION;  // the CMake project's version

void PrintUsage(std::ostream& out) {
  out << "usage: kvdepot [--addr HOST:PORT | --addr unix:PATH] [--token-file FILE]\n"
         "               [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
         "               [--tls-server-name NAME] COMMAND [ARGS...]\n"
         "The address is --addr, else $KVDEPOT_ADDR, else 127.0.0.1:7600; --token-file (or\n"
         "$KVDEPOT_TOKEN_FILE) AUTHs with the file's first token; --tls and --tls-* for a TLS\n"
         "listener. 'kvdepot COMMAND --help' (or 'kvdepot help COMMAND') describes one command.\n"
         "\n"
         "commands:\n";
  for (const CommandSpec& c : Commands()) {
    PrintSynopsis(c, out);
    out << "      " << c.summary << "\n";
  }
  out << "KEY is any string of 1-256 bytes (e.g. k1), or a 96-hex-digit chunk key.\n\n";
  PrintCodecUsage(out);
}

// The table's entry for `command` and its first operand (a codec subcommand), or nullptr.
const CommandSpec* CommandFor(std::string_view command, std::span<const char* const> rest) {
  if (const CommandSpec* c = FindCommand(command); c != nullptr) return c;
  if (rest.empty()) return nullptr;
  return FindCommand(std::string(command) + " " + rest[0]);
}

// True when `args` hold --help or -h before any "--".
bool AsksForHelp(std::span<const char* const> args) {
  for (const char* a : args) {
    const std::string_view arg = a;
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

// Folds a message onto one line, so stderr always carries exactly one error line.
std::string OneLine(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

// A usage error when `address` (from `from`) is neither HOST:PORT nor unix:PATH.
Status CheckAddressSyntax(const std::string& address, const std::string& from) {
  const auto colon = address.rfind(':');
  const bool unix_path = address.rfind("unix:", 0) == 0 && address.size() > 5;
  const bool host_port = colon != std::string::npos && colon > 0 && colon + 1 < address.size();
  if (unix_path || host_port) return Status::Ok();
  return UsageError("address '" + address + "' (from " + from +
                    ") is not HOST:PORT or unix:PATH, e.g. 127.0.0.1:7600 or "
                    "unix:/run/kvdepot/kvdepotd.sock");
}

// Adds what to check to a failed connection: which address was tried, where it came from, and
// whether a kvdepotd is expected there.
Status ExplainConnectFailure(const Status& status, const std::string& address,
                             const std::string& from) {
  const std::string& m = status.message();
  if (m.find("connect " + address) == std::string::npos) return status;
  std::string hint = "address from " + from;
  if (m.find("Connection refused") != std::string::npos ||
      m.find("No such file or directory") != std::string::npos) {
    hint +=
        "; is kvdepotd running and listening there? Its log's 'listening on' line names "
        "its addresses; give another with --addr or $KVDEPOT_ADDR";
  }
  return Status(status.code(), m + " (" + hint + ")");
}

int Run(int argc, const char* const* argv, Io io) {
  int first = 1;
  client::ClientOptions remote;
  const char* env_addr = std::getenv("KVDEPOT_ADDR");
  const bool from_env = env_addr != nullptr && *env_addr != '\0';
  remote.address = from_env ? env_addr : "127.0.0.1:7600";
  std::string address_from = from_env ? "$KVDEPOT_ADDR" : "the default; no --addr or $KVDEPOT_ADDR";
  const char* env_token = std::getenv("KVDEPOT_TOKEN_FILE");
  std::string token_file = env_token != nullptr ? env_token : "";
  // Connection flags, before the command: --NAME VALUE or --NAME=VALUE; --tls is a switch.
  const std::pair<const char*, std::string*> valued[] = {
      {"--addr", &remote.address},         {"--token-file", &token_file},
      {"--tls-ca", &remote.tls_ca_file},   {"--tls-cert", &remote.tls_cert_file},
      {"--tls-key", &remote.tls_key_file}, {"--tls-server-name", &remote.tls_server_name}};
  while (first < argc && std::string_view(argv[first]).rfind("--", 0) == 0) {
    const std::string_view arg = argv[first];
    if (arg == "--tls") {
      remote.tls = true;
      ++first;
      continue;
    }
    bool known = false;
    for (const auto& [name, target] : valued) {
      const std::string_view n = name;
      if (arg == n && first + 1 >= argc) {
        io.err << "kvdepot: error: " << n << " needs a value (try 'kvdepot help')\n";
        return kExitUsage;
      }
      if (arg == n) {
        *target = argv[first + 1];
        first += 2;
      } else if (arg.size() > n.size() && arg.substr(0, n.size()) == n && arg[n.size()] == '=') {
        *target = std::string(arg.substr(n.size() + 1));
        first += 1;
      } else {
        continue;
      }
      if (target == &remote.address) address_from = "--addr";
      known = true;
      break;
    }
    if (!known) break;  // --help, --version, or an error reported below
  }
  if (!remote.tls_ca_file.empty() || !remote.tls_cert_file.empty()) remote.tls = true;
  // The server's limits govern what it sends and accepts: the CLI imposes none of its own.
  remote.limits.max_value_bytes = kCliMaxValueBytes;
  remote.limits.max_body_bytes = kCliMaxValueBytes + (1 << 20);
  if (!token_file.empty()) {
    auto token = client::ReadTokenFile(token_file);
    if (!token.ok()) {
      io.err << "kvdepot: error: " << token.status().message() << "\n";
      return kExitError;
    }
    remote.token = std::move(*token);
  }
  if (argc <= first) {
    PrintUsage(io.err);
    return kExitUsage;
  }
  const std::string_view command = argv[first];
  const std::span<const char* const> rest(argv + first + 1,
                                          static_cast<std::size_t>(argc - first - 1));
  Status status;
  bool handled = false;
  if (command == "help" || command == "--help" || command == "-h") {
    if (rest.empty()) {
      PrintUsage(io.out);
      return kExitOk;
    }
    const CommandSpec* c = CommandFor(rest[0], rest.subspan(1));
    if (c == nullptr && std::string_view(rest[0]) == "codec") {
      PrintCodecUsage(io.out);
      return kExitOk;
    }
    if (c == nullptr) {
      io.err << "kvdepot: error: usage: help " << rest[0]
             << ": no such command (try 'kvdepot help')\n";
      return kExitUsage;
    }
    PrintCommandHelp(*c, io.out);
    return kExitOk;
  } else if (command == "version" || command == "--version") {
    io.out << "kvdepot " << kVersion << "\n";
    return kExitOk;
  } else if (const CommandSpec* c = CommandFor(command, rest); c != nullptr && AsksForHelp(rest)) {
    PrintCommandHelp(*c, io.out);
    return kExitOk;
  } else if (command == "codec") {
    if (!rest.empty() && AsksForHelp(rest.subspan(0, 1))) {
      PrintCodecUsage(io.out);
      return kExitOk;
    }
    status = RunCodecCommand(rest, io);
  } else if (command == "completion") {
    status = rest.size() == 1 ? PrintCompletion(rest[0], io.out)
                              : UsageError("completion needs one argument: bash or zsh");
  } else {
    status = CheckAddressSyntax(remote.address, address_from);
    // Only the process's own streams can be terminals (tests pass string streams).
    const bool own = &io.out == &std::cout;
    const Terminals terminals{own && ::isatty(STDOUT_FILENO) == 1,
                              own && ::isatty(STDIN_FILENO) == 1,
                              own && &io.err == &std::cerr && ::isatty(STDERR_FILENO) == 1};
    if (status.ok()) status = RunRemoteCommand(remote, command, rest, io, &handled, terminals);
    if (status.ok() && !handled) {
      status = UsageError("unknown command '" + std::string(command) + "' (try 'kvdepot help')");
    }
    if (!status.ok()) status = ExplainConnectFailure(status, remote.address, address_from);
  }
  if (status.ok()) return kExitOk;
  io.err << "kvdepot: error: " << OneLine(status.message()) << "\n";
  return IsUsageError(status) ? kExitUsage : kExitError;
}

}  // namespace

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  try {
    return Run(argc, argv, Io{out, err});
  } catch (const std::bad_alloc&) {
    err << "kvdepot: error: out of memory\n";
  } catch (const std::exception& e) {
    err << "kvdepot: error: internal error: " << OneLine(e.what()) << "\n";
  }
  return kExitError;
}

}  // namespace kvdepot::cli
