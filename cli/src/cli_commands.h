// The CLI's command and flag table: the one list every command parses its flags from, and that
// `kvdepot help`, `kvdepot COMMAND --help` and `kvdepot completion bash|zsh` are generated from.
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.h"

namespace kvdepot::cli {

struct FlagDoc {
  std::string_view name;     // "--tier", "-o"
  std::string_view metavar;  // "gpu|host|ssd" (choices), "FILE", "N"; empty for a switch
  // The values a shell may complete: the metavar's '|'-separated choices when it has them.
  std::vector<std::string> Choices() const;
  // The value is a file path (metavar FILE, or ending in .npy/.kvd).
  bool TakesFile() const;
};

struct CommandSpec {
  std::string_view path;      // "ls", or "codec encode" for a subcommand
  std::string_view operands;  // e.g. "KEY FILE|-", after the flags in the synopsis
  std::string_view summary;   // one line
  std::vector<FlagDoc> flags;
  std::string_view details = {};  // further lines for `kvdepot COMMAND --help`
};

// Every command, in the order `kvdepot help` lists them.
std::span<const CommandSpec> Commands();
// The flags accepted before the command (--addr, --token-file, --tls ...).
std::span<const FlagDoc> ConnectionFlags();
// The command named `path` ("ls", "codec encode"), or nullptr.
const CommandSpec* FindCommand(std::string_view path);
// What Args::Parse accepts for `path` (which must be in the table).
FlagSpec FlagsOf(std::string_view path);

// "ls [--namespace NSID] [--prefix P] ... [PATTERN]", wrapped to 100 columns with `indent`.
void PrintSynopsis(const CommandSpec& command, std::ostream& out, std::size_t indent = 2);
// `kvdepot COMMAND --help`: synopsis, summary and details.
void PrintCommandHelp(const CommandSpec& command, std::ostream& out);

// The completion script for `shell` ("bash" or "zsh"); a usage error for another shell.
Status PrintCompletion(std::string_view shell, std::ostream& out);

}  // namespace kvdepot::cli
