#include "kvdepot/client/cli.h"

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
  out << "usage: kvdepot COMMAND [ARGS...]\n"
         "\n"
         "commands:\n"
         "  codec     offline chunk tools: encode, decode, inspect, compare, synth\n"
         "  version   print the version\n"
         "  help      this text\n"
         "\n";
  PrintCodecUsage(out);
}

// Folds a message onto one line, so stderr always carries exactly one error line.
std::string OneLine(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

int Run(int argc, const char* const* argv, Io io) {
  if (argc < 2) {
    PrintUsage(io.err);
    return kExitUsage;
  }
  const std::string_view command = argv[1];
  const std::span<const char* const> rest(argv + 2, static_cast<std::size_t>(argc - 2));
  Status status;
  if (command == "help" || command == "--help" || command == "-h") {
    PrintUsage(io.out);
    return kExitOk;
  } else if (command == "version" || command == "--version") {
    io.out << "kvdepot " << kVersion << "\n";
    return kExitOk;
  } else if (command == "codec") {
    status = RunCodecCommand(rest, io);
  } else {
    status = UsageError("unknown command '" + std::string(command) + "' (try 'kvdepot help')");
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
