#include "kvdepot/cli/cli.h"

#include <cstdlib>
#include <exception>
#include <new>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "cli_args.h"
#include "cli_internal.h"

namespace kvdepot::cli {
namespace {

constexpr const char* kVersion = "0.1.0";

void PrintUsage(std::ostream& out) {
  out << "usage: kvdepot [--addr HOST:PORT | --addr unix:PATH] [--token-file FILE]\n"
         "               [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
         "               COMMAND [ARGS...]\n"
         "\n"
         "commands:\n"
         "  codec     offline chunk tools: encode, decode, inspect, compare, synth\n"
         "  ping, stats, ls, inspect, get, put, del, lookup, bench: talk to kvdepotd\n"
         "  version   print the version\n"
         "  help      this text\n"
         "\n";
  PrintCodecUsage(out);
  out << "\n";
  PrintRemoteUsage(out);
}

// Folds a message onto one line, so stderr always carries exactly one error line.
std::string OneLine(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

int Run(int argc, const char* const* argv, Io io) {
  int first = 1;
  client::ClientOptions remote;
  const char* env_addr = std::getenv("KVDEPOT_ADDR");
  remote.address = env_addr != nullptr && *env_addr != '\0' ? env_addr : "127.0.0.1:7600";
  const char* env_token = std::getenv("KVDEPOT_TOKEN_FILE");
  std::string token_file = env_token != nullptr ? env_token : "";
  // Connection flags, before the command: --NAME VALUE or --NAME=VALUE; --tls is a switch.
  const std::pair<const char*, std::string*> valued[] = {
      {"--addr", &remote.address},          {"--token-file", &token_file},
      {"--tls-ca", &remote.tls_ca_file},    {"--tls-cert", &remote.tls_cert_file},
      {"--tls-key", &remote.tls_key_file},  {"--tls-server-name", &remote.tls_server_name}};
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
      if (arg == n && first + 1 < argc) {
        *target = argv[first + 1];
        first += 2;
      } else if (arg.size() > n.size() && arg.substr(0, n.size()) == n && arg[n.size()] == '=') {
        *target = std::string(arg.substr(n.size() + 1));
        first += 1;
      } else {
        continue;
      }
      known = true;
      break;
    }
    if (!known) break;  // --help, --version, or an error reported below
  }
  if (!remote.tls_ca_file.empty() || !remote.tls_cert_file.empty()) remote.tls = true;
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
    PrintUsage(io.out);
    return kExitOk;
  } else if (command == "version" || command == "--version") {
    io.out << "kvdepot " << kVersion << "\n";
    return kExitOk;
  } else if (command == "codec") {
    status = RunCodecCommand(rest, io);
  } else {
    status = RunRemoteCommand(remote, command, rest, io, &handled);
    if (!handled) {
      status = UsageError("unknown command '" + std::string(command) + "' (try 'kvdepot help')");
    }
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
