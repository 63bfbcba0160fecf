// Command-line parsing for kvdepot's subcommands: `--name value`, `--name=value`, boolean
// switches and positional arguments. Unknown flags are errors that name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::cli {

struct FlagSpec {
  std::set<std::string> with_value;  // e.g. "--codec"
  std::set<std::string> switches;    // e.g. "--json"
};

class Args {
 public:
  // `argv` excludes the program and subcommand names. "--" ends flag parsing.
  static Result<Args> Parse(std::span<const char* const> argv, const FlagSpec& spec);

  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> Get(const std::string& flag) const;
  // The flag's value as an integer in [min, max]; `fallback` when absent; errors name the flag.
  Result<std::uint64_t> GetUint(const std::string& flag, std::uint64_t fallback, std::uint64_t min,
                                std::uint64_t max) const;
  // Like GetUint, but the flag must be present.
  Result<std::uint64_t> RequireUint(const std::string& flag, std::uint64_t min,
                                    std::uint64_t max) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // An error unless there are exactly `names.size()` positional arguments.
  Status ExpectPositional(std::initializer_list<const char*> names) const;

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// A usage error (exit code 2) is an InvalidArgument whose message starts with this prefix.
inline constexpr const char* kUsagePrefix = "usage: ";
Status UsageError(const std::string& message);
bool IsUsageError(const Status& status);

// The value of `flag` parsed by `parse` (e.g. ParseCodecName); a value it rejects is a usage error
// that names the flag: "--codec foo: unknown codec ...".
template <typename Parse>
auto ParseFlagValue(const std::string& flag, const std::string& value, Parse parse)
    -> decltype(parse(value)) {
  auto parsed = parse(value);
  if (!parsed.ok()) return UsageError(flag + " " + value + ": " + parsed.status().message());
  return parsed;
}

}  // namespace kvdepot::cli
