// kvdepotd's configuration: embedded defaults, then the YAML file (config/kvdepot.yaml documents
// every key), then command-line flags — each later source overriding the earlier ones. Every key
// has a flag: the key path with dots turned into dashes (`host.capacity` -> `--host-capacity`).
//
// Validation errors name where the value came from and both spellings of the setting:
// "FILE:LINE: key 'host.capacity' (--host-capacity): ..." or "flag --host-capacity
// (host.capacity): ...". Nothing here throws: every failure is a Status (docs/operations.md lists
// the grammar of sizes and durations and the daemon's exit statuses).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/ssd_tier.h"

namespace kvdepot::daemon {

// The cluster (docs/cluster.md): off while etcd is empty (a single daemon, as without it).
struct ClusterConfig {
  std::string etcd;              // comma-separated http:// endpoints of etcd's v3 gateway
  std::string name = "kvdepot";  // members live under /kvdepot/<name>/members/
  std::string advertise;  // HOST:PORT of the native listener as other nodes and clients reach it
  std::uint32_t replicas = 1;      // copies of each key (every member must agree)
  std::uint32_t group_chunks = 8;  // consecutive chunks of a prefix placed together (must agree)
  std::chrono::milliseconds lease_ttl{6000};
  std::chrono::milliseconds handoff_grace{30000};
  // With a TLS listener (tls.cert_file), members reach each other over TLS: the CA that signed
  // the other members' certificates. Empty: tls.client_ca_file.
  std::string tls_ca_file;
};

struct Config {
  ServerOptions server;  // listen, unix, io_threads, limits, max_output_bytes
  HostTierOptions host;
  SsdTierOptions ssd;  // ssd.dir empty: no SSD tier
  LmServerOptions lm;  // the lm:// listener (LMCache's protocol); off unless lm.listen is set
  // The resp:// listener (the Redis protocol, docs/resp.md); off unless resp.listen is set. Its
  // value and key limits and its tokens are the native listener's (set at start).
  RespServerOptions resp;
  // KV events (docs/events.md); off unless events.publish is set.
  KvEventsOptions events;
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
  ClusterConfig cluster;
  // Whether limits.max_value_bytes was set (file or flag). When not, LoadConfig lowers the
  // default to what host.capacity (and ssd.segment_size) can hold (DeriveValueLimit).
  bool max_value_bytes_explicit = false;
};

// The one size grammar of every size setting, flag and YAML alike: decimal digits followed
// directly (no space) by an optional unit, B, KiB, MiB, GiB or TiB (powers of 1024) or KB, MB, GB
// or TB (powers of 1000), case as written; no unit means bytes. "64MiB", "1GiB", "1000000",
// "2GB". Anything else ("64 MiB", "64M", "64mib", "-1", "1.5GiB") is kInvalidArgument and a value
// past 2^64-1 kOutOfRange; messages quote the text and state the grammar.
Result<std::uint64_t> ParseSize(std::string_view text);

// The largest config file read (a bigger one is refused, not allocated).
inline constexpr std::uint64_t kMaxConfigFileBytes = 1 << 20;

// Applies a YAML file on top of `config`. The file must be a regular file (a symlink to one is
// fine) of at most kMaxConfigFileBytes: a directory, FIFO or device is refused without being
// opened for reading (a FIFO would block). Unknown keys are errors (a typo must not be ignored).
// Errors start with "--config PATH: " (file-system errors, with the cause from errno) or
// "PATH:LINE: " (YAML and value errors).
Status ApplyConfigFile(const std::string& path, Config& config);

// Everything kvdepotd (start and SIGHUP alike) and the fuzz target load a configuration with:
// `config` is reset to the defaults, then `config_file` (when not empty) is applied, then `flags`
// (--KEY VALUE or --KEY=VALUE, --config/--check-config already taken out), then ValidateConfig.
Status LoadConfig(const std::string& config_file, const std::vector<std::string_view>& flags,
                  Config& config);

// Applies one flag (`name` without the leading dashes, e.g. "host-capacity") on top of `config`.
Status ApplyConfigFlag(std::string_view name, std::string_view value, Config& config);

// Unless limits.max_value_bytes was set explicitly, lowers it to the largest value the host tier
// (host.capacity, less a value's overhead) and an SSD segment can hold, so that a small
// --host-capacity starts without setting the value limit too. Called by LoadConfig.
void DeriveValueLimit(Config& config);

// Cross-field checks (e.g. at least one listener). Call after all sources are applied.
Status ValidateConfig(const Config& config);

// The effective value of every key, in ConfigKeys() order, as text that ApplyConfigFlag accepts
// (sizes in bytes; one entry "host.quotas.NSID" per quota). For the start-up log line and for
// telling which keys a reload changed.
std::vector<std::pair<std::string, std::string>> ConfigEntries(const Config& config);

// Keys whose values differ between `a` and `b` (per ConfigEntries; a quota present in only one of
// them counts as changed).
std::vector<std::string> ChangedKeys(const Config& a, const Config& b);

// The flag of a key: "host.capacity" -> "--host-capacity".
std::string FlagOf(std::string_view key);

// A start-up error line's text for setting `key` holding `value` that failed because of `cause`:
// "KEY VALUE: CAUSE; change KEY or --FLAG" (docs/operations.md).
std::string SettingError(std::string_view key, std::string_view value, std::string_view cause);

// OK when `path` is a regular file (or a symlink to one) that this process can open for reading;
// otherwise the cause, without the path: "No such file or directory (errno 2)", "is a directory,
// not a file", "is a FIFO, not a regular file", "Permission denied (errno 13)". Never blocks
// (a FIFO is not opened).
Status CheckReadableFile(const std::string& path);

// Every key with its flag and one-line help, for `kvdepotd --help`.
struct ConfigKeyHelp {
  std::string key;
  std::string flag;
  std::string help;
};
std::vector<ConfigKeyHelp> ConfigKeys();

}  // namespace kvdepot::daemon
