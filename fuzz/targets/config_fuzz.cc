// config: the YAML configuration loader (ApplyConfigFile on a file holding the input), then
// ValidateConfig, and the contract that every effective value ConfigEntries reports is accepted
// back by ApplyConfigFlag.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz_targets.h"
#include "kvdepot/daemon/config.h"

namespace kvdepot::fuzz {
namespace {

std::string FlagFor(const std::string& key) {
  std::string flag = key;
  for (char& ch : flag) {
    if (ch == '.' || ch == '_') ch = '-';
  }
  return flag;
}

}  // namespace

int FuzzConfig(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("kvdepot-fuzz-config-" + std::to_string(::getpid()) + ".yaml"))
                                      .string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  daemon::Config config;
  const Status s = daemon::ApplyConfigFile(path, config);
  if (!s.ok()) {
    if (s.message().empty()) __builtin_trap();  // errors must say what is wrong
    return 0;
  }
  (void)daemon::ValidateConfig(config);
  daemon::Config again;
  for (const auto& [key, value] : daemon::ConfigEntries(config)) {
    if (key.rfind("host.quotas.", 0) == 0) {
      if (!daemon::ApplyConfigFlag("host-quota", key.substr(12) + "=" + value, again).ok()) {
        __builtin_trap();
      }
      continue;
    }
    if (!daemon::ApplyConfigFlag(FlagFor(key), value, again).ok()) __builtin_trap();
  }
  if (!daemon::ChangedKeys(config, again).empty()) __builtin_trap();
  return 0;
}

}  // namespace kvdepot::fuzz
