#include "cli_args.h"

#include <charconv>
#include <string_view>

namespace kvdepot::cli {

Status UsageError(const std::string& message) {
  return InvalidArgument(kUsagePrefix + message);
}

bool IsUsageError(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument &&
         status.message().rfind(kUsagePrefix, 0) == 0;
}

Result<Args> Args::Parse(std::span<const char* const> argv, const FlagSpec& spec) {
  Args args;
  bool flags_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string_view arg = argv[i];
    const bool short_flag =
        arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' &&
        (spec.with_value.count(std::string(arg)) || spec.switches.count(std::string(arg)));
    if (flags_done || arg.size() < 2 || (arg.substr(0, 2) != "--" && !short_flag)) {
      args.positional_.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string name(arg);
    std::optional<std::string> inline_value;
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      inline_value = std::string(arg.substr(eq + 1));
    }
    if (spec.switches.count(name)) {
      if (inline_value) return UsageError(name + " takes no value");
      args.values_[name] = "";
    } else if (spec.with_value.count(name)) {
      if (inline_value) {
        args.values_[name] = *inline_value;
      } else if (i + 1 < argv.size()) {
        args.values_[name] = argv[++i];
      } else {
        return UsageError(name + " needs a value");
      }
    } else {
      return UsageError("unknown option " + name);
    }
  }
  return args;
}

std::optional<std::string> Args::Get(const std::string& flag) const {
  const auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<std::uint64_t> Args::GetUint(const std::string& flag, std::uint64_t fallback,
                                    std::uint64_t min, std::uint64_t max) const {
  const auto value = Get(flag);
  if (!value) return fallback;
  std::uint64_t parsed = 0;
  const char* end = value->data() + value->size();
  const auto [ptr, ec] = std::from_chars(value->data(), end, parsed);
  if (ec != std::errc() || ptr != end || value->empty()) {
    return UsageError(flag + " expects a non-negative integer, got '" + *value + "'");
  }
  if (parsed < min || parsed > max) {
    return UsageError(flag + " = " + *value + " is out of range [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
  }
  return parsed;
}

Result<std::uint64_t> Args::RequireUint(const std::string& flag, std::uint64_t min,
                                        std::uint64_t max) const {
  if (!Has(flag)) return UsageError(flag + " is required");
  return GetUint(flag, 0, min, max);
}

Status Args::ExpectPositional(std::initializer_list<const char*> names) const {
  if (positional_.size() == names.size()) return Status::Ok();
  std::string want;
  for (const char* n : names) want += std::string(want.empty() ? "" : " ") + n;
  if (positional_.size() > names.size()) {
    return UsageError("unexpected argument '" + positional_[names.size()] + "' (expected " + want +
                      ")");
  }
  return UsageError("missing argument " + std::string(*(names.begin() + positional_.size())) +
                    " (expected " + want + ")");
}

}  // namespace kvdepot::cli
