#include "kvdepot/client/cli.h"

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
  out << "usage: kvdepot [--addr HOST:PORT | --addr unix:PATH] COMMAND [ARGS...]\n"
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
  const char* env_addr = std::getenv("KVDEPOT_ADDR");
  std::string addr = env_addr != nullptr && *env_addr != '\0' ? env_addr : "127.0.0.1:7600";
  if (argc > 1 && std::string_view(argv[1]).rfind("--addr", 0) == 0) {
    const std::string_view flag = argv[1];
    if (flag.size() > 7 && flag[6] == '=') {
      addr = std::string(flag.substr(7));
      first = 2;
    } else if (flag == "--addr" && argc > 2) {
      addr = argv[2];
      first = 3;
    } else {
      io.err << "kvdepot: error: usage: --addr needs HOST:PORT or unix:PATH\n";
      return kExitUsage;
    }
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
    status = RunRemoteCommand(addr, command, rest, io, &handled);
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
