// The commands kvdepotd's resp:// listener serves (docs/resp.md), with what COMMAND, COMMAND INFO
// and COMMAND DOCS report about them (Redis 7's reply layouts, as redis-cli, redis-benchmark and
// redis-py read them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvdepot::daemon::resp {

enum class CommandId {
  kAuth,
  kClient,
  kCommand,
  kConfig,
  kDbsize,
  kDel,
  kEcho,
  kExists,
  kGet,
  kHello,
  kInfo,
  kMget,
  kMset,
  kPing,
  kQuit,
  kScan,
  kSelect,
  kSet,
  kStrlen,
  kType,
  kUnlink,
};

struct CommandSpec {
  CommandId id;
  const char* name;  // lower case
  int arity;         // Redis's convention: N = exactly N arguments with the name, -N = at least N
  std::vector<const char*> flags;
  int first_key, last_key, step;  // key positions (0 when none; last -1: to the end)
  const char* group;
  const char* since;
  const char* summary;
  const char* complexity;
  std::vector<const char*> acl_categories;
};

// Every served command, sorted by name.
const std::vector<CommandSpec>& Commands();
// The command named `name` (any case), or null.
const CommandSpec* FindCommand(std::string_view name);
// Whether `argc` arguments (the name included) satisfy the command's arity.
bool ArityAllows(const CommandSpec& spec, std::size_t argc);

// One COMMAND / COMMAND INFO entry: [name, arity, flags, first, last, step, acl categories, tips,
// key specs, subcommands].
void AppendCommandInfo(std::string& out, const CommandSpec& spec, bool resp3);
// One COMMAND DOCS value (the map of summary, since, group, complexity, arguments).
void AppendCommandDocs(std::string& out, const CommandSpec& spec, bool resp3);

}  // namespace kvdepot::daemon::resp
