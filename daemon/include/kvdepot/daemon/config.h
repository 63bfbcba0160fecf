// kvdepotd's configuration: embedded defaults, then the YAML file (config/kvdepot.yaml documents
// every key), then command-line flags — each later source overriding the earlier ones. Every key
// has a flag: the key path with dots turned into dashes (`host.capacity` -> `--host-capacity`).
//
// Validation errors name where the value came from: "FILE:LINE: key 'host.capacity': ..." or
// "flag --host-capacity: ...".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/status.h"

namespace kvdepot::daemon {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

struct Config {
  ServerOptions server;  // listen, unix, io_threads, limits, max_output_bytes
  HostTierOptions host;
  SsdTierOptions ssd;  // ssd.dir empty: no SSD tier
  LmServerOptions lm;    // the lm:// listener (LMCache's protocol); off unless lm.listen is set
  // The resp:// listener (the Redis protocol, docs/resp.md); off unless resp.listen is set. Its
  // value and key limits and its tokens are the native listener's (set at start).
  RespServerOptions resp;
  std::string data_dir = "kvdepot-data";
  LogLevel log_level = LogLevel::kInfo;
  // HTTP address of /metrics and /healthz (HOST:PORT; port 0 = ephemeral); empty = none.
  std::string metrics_listen = "127.0.0.1:9600";
  // Token file (auth.h, docs/security.md); empty: no authentication. Loaded at start.
  std::string auth_token_file;
  // With auth on, lm:// (whose protocol has no credentials) starts only when this is true.
  bool lm_allow_unauthenticated = false;
  // The GPU tier (docs/gpu-tier.md): a device-memory pool of gpu_capacity bytes on CUDA device
  // gpu_device above the host tier; 0 = off. Needs a build with CUDA and a GPU at start.
  std::uint64_t gpu_capacity = 0;
  std::int32_t gpu_device = 0;
};

// "64MiB", "1GiB", "512KiB", "1000000" (bytes), "2GB" (10^9). Errors name the text.
Result<std::uint64_t> ParseSize(std::string_view text);

// Applies a YAML file on top of `config`. Unknown keys are errors (a typo must not be ignored).
Status ApplyConfigFile(const std::string& path, Config& config);

// Applies one flag (`name` without the leading dashes, e.g. "host-capacity") on top of `config`.
Status ApplyConfigFlag(std::string_view name, std::string_view value, Config& config);

// Cross-field checks (e.g. at least one listener). Call after all sources are applied.
Status ValidateConfig(const Config& config);

// The effective value of every key, in ConfigKeys() order, as text that ApplyConfigFlag accepts
// (sizes in bytes; one entry "host.quotas.NSID" per quota). For the start-up log line and for
// telling which keys a reload changed.
std::vector<std::pair<std::string, std::string>> ConfigEntries(const Config& config);

// Keys whose values differ between `a` and `b` (per ConfigEntries; a quota present in only one of
// them counts as changed).
std::vector<std::string> ChangedKeys(const Config& a, const Config& b);

// Every key with its flag and one-line help, for `kvdepotd --help`.
struct ConfigKeyHelp {
  std::string key;
  std::string flag;
  std::string help;
};
std::vector<ConfigKeyHelp> ConfigKeys();

}  // namespace kvdepot::daemon
