#include "kvdepot/daemon/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "kvdepot/base/file_io.h"
#include "kvdepot/base/hex.h"
#include "kvdepot/cluster/etcd_client.h"
#include "kvdepot/daemon/log.h"
#include "listen_address.h"

namespace kvdepot::daemon {
namespace {

// The longest Unix socket path: sockaddr_un's sun_path holds it and a terminating NUL.
constexpr std::size_t kMaxUnixPathBytes = sizeof(sockaddr_un::sun_path) - 1;

// An empty address (the listener is off) or one the listeners accept (ParseListenAddress: an IP
// literal and a port), so that a bad address stops the daemon before anything starts.
Status CheckListenAddress(std::string_view v) {
  if (v.empty()) return Status::Ok();
  auto endpoint = ParseListenAddress("address", std::string(v));
  if (!endpoint.ok()) {
    return InvalidArgument(endpoint.status().message() +
                           " (e.g. 127.0.0.1:7600, [::1]:7600, 0.0.0.0:7600)");
  }
  return Status::Ok();
}

// cluster.advertise: empty, or HOST:PORT that other hosts can connect to — HOST an IP literal
// ([v6] in brackets) or a DNS name, never an unspecified address (0.0.0.0, ::), PORT 1-65535.
Status CheckAdvertiseAddress(std::string_view v) {
  if (v.empty()) return Status::Ok();
  const std::size_t colon = v.rfind(':');
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("'" + std::string(v) + "' " + why +
                           ": write the HOST:PORT other nodes and clients reach the native "
                           "listener at (e.g. 10.0.0.5:7600, node1.example:7600)");
  };
  if (colon == std::string_view::npos || colon == 0) return bad("is not HOST:PORT");
  std::string_view host = v.substr(0, colon);
  const std::string_view port = v.substr(colon + 1);
  std::uint32_t port_number = 0;
  const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (ec != std::errc() || p != port.data() + port.size() || port_number == 0 ||
      port_number > 65535) {
    return bad("has no port 1-65535");
  }
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return bad("has an unclosed '['");
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code parse_error;
  const auto address = boost::asio::ip::make_address(std::string(host), parse_error);
  if (!parse_error && address.is_unspecified()) {
    return bad("is an unspecified address (it names no host other nodes could reach)");
  }
  if (parse_error && host.find_first_of(" /[]") != std::string_view::npos) {
    return bad("has a host that is neither an IP address nor a DNS name");
  }
  return Status::Ok();
}

// cluster.name: 1-64 of [A-Za-z0-9._-] (it is a segment of the etcd keys).
Status CheckClusterName(std::string_view v) {
  if (v.empty() || v.size() > 64 ||
      v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string_view::npos) {
    return InvalidArgument("'" + std::string(v) +
                           "' must be 1-64 characters of letters, digits, '.', '_' and '-'");
  }
  return Status::Ok();
}

// An empty endpoint (off) or a ZeroMQ endpoint kvdepotd can bind: tcp://HOST:PORT (PORT may be
// *, a free port) or ipc://PATH.
Status CheckEventsEndpoint(std::string_view v) {
  if (v.empty() ||
      ((v.rfind("tcp://", 0) == 0 && v.find(':', 6) != std::string_view::npos && v.back() != ':') ||
       (v.rfind("ipc://", 0) == 0 && v.size() > 6))) {
    return Status::Ok();
  }
  return InvalidArgument("'" + std::string(v) +
                         "' is not a ZeroMQ endpoint to bind: tcp://HOST:PORT (e.g. "
                         "tcp://127.0.0.1:5557, tcp://*:5557) or ipc://PATH");
}

// One configuration key: its dotted path, help and a setter from text. A setter that fails
// leaves the configuration as it was.
struct KeySpec {
  const char* key;
  const char* help;
  std::function<Status(std::string_view, Config&)> set;
};

Result<std::uint64_t> ParseUint(std::string_view text, std::uint64_t min, std::uint64_t max) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    return InvalidArgument("'" + std::string(text) + "' is not a non-negative integer");
  }
  if (v < min || v > max) {
    return OutOfRange(std::to_string(v) + " is out of range [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
  }
  return v;
}

Result<std::uint64_t> ParseSizeIn(std::string_view text, std::uint64_t min, std::uint64_t max) {
  KVD_ASSIGN_OR_RETURN(std::uint64_t v, ParseSize(text));
  if (v < min || v > max) {
    return OutOfRange(std::string(text) + " is out of range [" + std::to_string(min) + ", " +
                      std::to_string(max) + "] bytes");
  }
  return v;
}

// "30s", "500ms", "10m", "1h" or "0" (off; a bare number is milliseconds), at most a day.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::uint64_t n = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + digits, n);
  if (digits == 0 || ec != std::errc()) {
    return InvalidArgument("'" + std::string(text) + "' is not a duration (e.g. 30s, 500ms, 10m)");
  }
  const std::string_view unit = text.substr(digits);
  std::uint64_t ms_per = 0;
  if (unit.empty() || unit == "ms")
    ms_per = 1;
  else if (unit == "s")
    ms_per = 1000;
  else if (unit == "m")
    ms_per = 60 * 1000;
  else if (unit == "h")
    ms_per = 3600 * 1000;
  else
    return InvalidArgument("'" + std::string(text) + "': unknown duration unit (ms, s, m, h)");
  constexpr std::uint64_t kMaxMs = 24ull * 3600 * 1000;
  if (n > kMaxMs / ms_per) return OutOfRange("'" + std::string(text) + "' is longer than 24h");
  return std::chrono::milliseconds(n * ms_per);
}

// Permission bits as ApplyConfigFlag reads them: "0660".
std::string OctalMode(std::uint32_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode));
  return text;
}

std::string DurationText(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + "ms";
}

const std::vector<KeySpec>& Specs() {
  static const std::vector<KeySpec> specs = {
      {"listen", "TCP listen address HOST:PORT (empty: no TCP)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckListenAddress(v));
         c.server.listen = std::string(v);
         return Status::Ok();
       }},
      {"unix", "Unix domain socket path (empty: none)",
       [](std::string_view v, Config& c) -> Status {
         if (v.size() > kMaxUnixPathBytes) {
           return InvalidArgument("'" + std::string(v) + "' is " + std::to_string(v.size()) +
                                  " bytes; a Unix socket path is at most " +
                                  std::to_string(kMaxUnixPathBytes) +
                                  " (sun_path): use a shorter one, e.g. under /run");
         }
         c.server.unix_path = std::string(v);
         return Status::Ok();
       }},
      {"unix_mode", "Unix socket permission bits, octal (e.g. 0660; connecting needs write)",
       [](std::string_view v, Config& c) -> Status {
         std::uint32_t mode = 0;
         const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), mode, 8);
         if (v.empty() || ec != std::errc() || p != v.data() + v.size() || mode > 0777) {
           return InvalidArgument("'" + std::string(v) +
                                  "' is not octal permission bits 0-0777 "
                                  "(e.g. 0660: owner and group may connect)");
         }
         c.server.unix_mode = mode;
         return Status::Ok();
       }},
      {"unix_group", "group of the Unix socket (empty: kvdepotd's own; must be one of its groups)",
       [](std::string_view v, Config& c) -> Status {
         c.server.unix_group = std::string(v);
         return Status::Ok();
       }},
      {"io_threads", "network I/O threads (1-256)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 256));
         c.server.io_threads = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"data_dir", "directory for the daemon's state",
       [](std::string_view v, Config& c) -> Status {
         if (v.empty()) return InvalidArgument("must not be empty");
         c.data_dir = std::string(v);
         return Status::Ok();
       }},
      {"log_level", "debug, info, warn or error",
       [](std::string_view v, Config& c) -> Status {
         if (v == "debug")
           c.log_level = LogLevel::kDebug;
         else if (v == "info")
           c.log_level = LogLevel::kInfo;
         else if (v == "warn")
           c.log_level = LogLevel::kWarn;
         else if (v == "error")
           c.log_level = LogLevel::kError;
         else
           return InvalidArgument("'" + std::string(v) + "' is not debug, info, warn or error");
         return Status::Ok();
       }},
      {"host.capacity", "host-memory tier capacity, e.g. 64MiB, 8GiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.host.capacity_bytes, ParseSizeIn(v, 1 << 20, 1ull << 50));
         return Status::Ok();
       }},
      {"host.eviction", "host-tier eviction policy: sieve or lru",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.host.policy, ParseEvictionPolicy(v));
         return Status::Ok();
       }},
      {"host.shards", "index shards (1-1024)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 1024));
         c.host.shards = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"host.shared_memory", "true: values live in a memfd arena same-host clients map read-only",
       [](std::string_view v, Config& c) -> Status {
         if (v == "true")
           c.host.shared_memory = true;
         else if (v == "false")
           c.host.shared_memory = false;
         else
           return InvalidArgument("'" + std::string(v) + "' is not true or false");
         return Status::Ok();
       }},
      {"gpu.capacity", "GPU tier device-memory pool, e.g. 8GiB (0: no GPU tier)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(const std::uint64_t bytes, ParseSizeIn(v, 0, 1ull << 50));
         if (bytes != 0 && bytes < (2u << 20)) {
           return OutOfRange(std::string(v) + " is below the minimum of 2 MiB (or 0: off)");
         }
         c.gpu_capacity = bytes;
         return Status::Ok();
       }},
      {"gpu.device", "CUDA device ordinal of the GPU tier (0-63)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 0, 63));
         c.gpu_device = static_cast<std::int32_t>(n);
         return Status::Ok();
       }},
      {"ssd.dir", "SSD tier directory, relative to data_dir unless absolute (empty: none)",
       [](std::string_view v, Config& c) {
         c.ssd.dir = std::string(v);
         return Status::Ok();
       }},
      {"ssd.capacity", "SSD tier capacity (segment files in all), e.g. 500GiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.capacity_bytes, ParseSizeIn(v, 2 << 20, 1ull << 56));
         return Status::Ok();
       }},
      {"ssd.durability", "none, async or sync (docs/durability.md)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.durability, ParseSsdDurability(v));
         return Status::Ok();
       }},
      {"ssd.write_policy", "write-back (demote on eviction) or write-through",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.write_policy, ParseSsdWritePolicy(v));
         return Status::Ok();
       }},
      {"ssd.promotion", "SSD hits copied into the host tier: always, never or second-hit",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.promotion, ParseSsdPromotion(v));
         return Status::Ok();
       }},
      {"ssd.io", "SSD I/O path: auto, io_uring or pread",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.io_path, ParseSsdIoPath(v));
         return Status::Ok();
       }},
      {"ssd.segment_size", "SSD segment file size, e.g. 256MiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(const std::uint64_t bytes, ParseSizeIn(v, 1 << 20, 1ull << 40));
         if (bytes % 4096 != 0) {
           return InvalidArgument(std::string(v) + " is not a multiple of 4096");
         }
         c.ssd.segment_bytes = bytes;
         return Status::Ok();
       }},
      {"ssd.write_buffer", "memory for evicted values waiting for their SSD write, e.g. 256MiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.write_buffer_bytes, ParseSizeIn(v, 1 << 20, 1ull << 40));
         return Status::Ok();
       }},
      {"ssd.queue_depth", "io_uring queue depth (4-4096)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 4, 4096));
         c.ssd.queue_depth = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"ssd.flush_on_shutdown",
       "true: at shutdown, write the host tier's values the SSD lacks (warm restart)",
       [](std::string_view v, Config& c) -> Status {
         if (v == "true")
           c.ssd.flush_on_shutdown = true;
         else if (v == "false")
           c.ssd.flush_on_shutdown = false;
         else
           return InvalidArgument("'" + std::string(v) + "' is not true or false");
         return Status::Ok();
       }},
      {"ssd.flush_budget", "longest shutdown flush, e.g. 20s (0: write nothing)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.ssd.flush_budget, ParseDuration(v));
         return Status::Ok();
       }},
      {"ssd.sync_interval_ms", "durability async: sync period in ms (1-60000)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 60000));
         c.ssd.sync_interval_ms = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"lm.listen", "lm:// listener (LMCache's remote-server protocol) HOST:PORT (empty: off)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckListenAddress(v));
         c.lm.listen = std::string(v);
         return Status::Ok();
       }},
      {"lm.namespace", "namespace name of chunks stored through LMCache front ends",
       [](std::string_view v, Config& c) -> Status {
         if (v.empty() || v.size() > 256) return InvalidArgument("must be 1-256 bytes");
         c.lm.namespace_name = std::string(v);
         return Status::Ok();
       }},
      {"lm.io_threads", "I/O threads of the lm:// listener (1-64)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 64));
         c.lm.io_threads = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"lm.max_value_bytes",
       "largest lm:// PUT payload stored; a larger one is read and dropped (at most 2GiB-1)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.lm.max_value_bytes, ParseSizeIn(v, 1, 0x7fffffffull));
         return Status::Ok();
       }},
      {"lm.wire", "LMCache wire layouts served: auto (both), current (186-byte requests), legacy",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.lm.wire, ParseLmWireMode(v));
         return Status::Ok();
       }},
      {"resp.listen", "resp:// listener (the Redis protocol, docs/resp.md) HOST:PORT (empty: off)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckListenAddress(v));
         c.resp.listen = std::string(v);
         return Status::Ok();
       }},
      {"resp.io_threads", "I/O threads of the resp:// listener (1-64)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 64));
         c.resp.io_threads = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"events.publish", "KV events (docs/events.md): ZeroMQ PUB endpoint to bind (empty: off)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckEventsEndpoint(v));
         c.events.publish = std::string(v);
         return Status::Ok();
       }},
      {"events.replay", "KV events replay ROUTER endpoint to bind (empty: no replay)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckEventsEndpoint(v));
         c.events.replay = std::string(v);
         return Status::Ok();
       }},
      {"events.topic", "first part of every KV-event topic (TOPIC@INSTANCE@MODEL); no '@'",
       [](std::string_view v, Config& c) -> Status {
         if (v.size() > 256 || v.find('@') != std::string_view::npos) {
           return InvalidArgument("'" + std::string(v) + "' must be 0-256 bytes without '@'");
         }
         c.events.topic = std::string(v);
         return Status::Ok();
       }},
      {"events.queue_size", "KV events queued for the publisher; beyond it they are dropped",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 10000000));
         c.events.queue_events = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"events.replay_buffer", "KV-event batches kept for replay (0-1000000)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 0, 1000000));
         c.events.replay_batches = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"events.block_size", "tokens per chunk reported in BlockStored events (1-65536)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 65536));
         c.events.block_size = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"cluster.etcd",
       "cluster (docs/cluster.md): etcd endpoints, comma-separated http://HOST:PORT "
       "(empty: no cluster, a single daemon)",
       [](std::string_view v, Config& c) -> Status {
         if (!v.empty()) {
           auto client = cluster::EtcdClient::Create(v, std::chrono::milliseconds(1000));
           if (!client.ok()) return client.status();
         }
         c.cluster.etcd = std::string(v);
         return Status::Ok();
       }},
      {"cluster.name", "cluster name: nodes with the same name and etcd form one cluster",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckClusterName(v));
         c.cluster.name = std::string(v);
         return Status::Ok();
       }},
      {"cluster.advertise",
       "HOST:PORT of the native listener as other nodes and clients reach it (required with "
       "cluster.etcd; not 0.0.0.0)",
       [](std::string_view v, Config& c) -> Status {
         KVD_RETURN_IF_ERROR(CheckAdvertiseAddress(v));
         c.cluster.advertise = std::string(v);
         return Status::Ok();
       }},
      {"cluster.replicas", "copies of each key in the cluster (1-16; the same on every node)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 16));
         c.cluster.replicas = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"cluster.group_chunks",
       "consecutive chunks of a prefix placed on one node (1-4096; the same on every node)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 4096));
         c.cluster.group_chunks = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"cluster.lease_ttl",
       "etcd lease of this node's membership (2s-5m): a node silent this long leaves the "
       "cluster and fences itself",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto d, ParseDuration(v));
         if (d < std::chrono::seconds(2) || d > std::chrono::minutes(5)) {
           return OutOfRange("'" + std::string(v) + "' must be between 2s and 5m");
         }
         c.cluster.lease_ttl = d;
         return Status::Ok();
       }},
      {"cluster.handoff_grace",
       "after a membership change, how long a miss at a key's new owner also asks the previous "
       "owner (0-1h)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto d, ParseDuration(v));
         if (d > std::chrono::hours(1)) {
           return OutOfRange("'" + std::string(v) + "' is longer than 1h");
         }
         c.cluster.handoff_grace = d;
         return Status::Ok();
       }},
      {"cluster.tls_ca_file",
       "with tls.cert_file: PEM CA that signed the other members' certificates, checked when "
       "this node forwards to them (empty: tls.client_ca_file)",
       [](std::string_view v, Config& c) -> Status {
         c.cluster.tls_ca_file = std::string(v);
         return Status::Ok();
       }},
      {"limits.max_key_bytes", "longest key accepted (1-1024)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 1024));
         c.server.limits.max_key_bytes = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"limits.max_value_bytes", "largest value accepted, e.g. 64MiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.limits.max_value_bytes, ParseSizeIn(v, 1, 1ull << 31));
         c.max_value_bytes_explicit = true;
         return Status::Ok();
       }},
      {"limits.max_batch", "most keys in one request (1-65536)",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(auto n, ParseUint(v, 1, 65536));
         c.server.limits.max_batch = static_cast<std::uint32_t>(n);
         return Status::Ok();
       }},
      {"limits.max_body_bytes", "largest request body (a whole multi-item PUT), e.g. 256MiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.limits.max_body_bytes, ParseSizeIn(v, 1024, 0xffffffffull));
         return Status::Ok();
       }},
      {"limits.max_lease_bytes",
       "most bytes one connection may hold leased (LEASE_GET), e.g. 256MiB",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.max_lease_bytes, ParseSizeIn(v, 0, 1ull << 50));
         return Status::Ok();
       }},
      {"metrics.listen", "HTTP address of /metrics and /healthz, HOST:PORT (empty: none)",
       [](std::string_view v, Config& c) -> Status {
         const auto colon = v.rfind(':');
         if (!v.empty() &&
             (colon == std::string_view::npos || colon == 0 ||
              ParseUint(v.substr(colon + 1), 0, 65535).status().code() != StatusCode::kOk)) {
           return InvalidArgument("'" + std::string(v) + "' is not HOST:PORT");
         }
         c.metrics_listen = std::string(v);
         return Status::Ok();
       }},
      {"auth.token_file", "token file (docs/security.md); set: every client must AUTH first",
       [](std::string_view v, Config& c) {
         c.auth_token_file = std::string(v);
         return Status::Ok();
       }},
      {"tls.cert_file", "PEM certificate chain; set: the TCP listener speaks TLS",
       [](std::string_view v, Config& c) {
         c.server.tls.cert_file = std::string(v);
         return Status::Ok();
       }},
      {"tls.key_file", "PEM private key of tls.cert_file",
       [](std::string_view v, Config& c) {
         c.server.tls.key_file = std::string(v);
         return Status::Ok();
       }},
      {"tls.client_ca_file", "PEM CA; set: TLS clients must present a certificate it signed",
       [](std::string_view v, Config& c) {
         c.server.tls.client_ca_file = std::string(v);
         return Status::Ok();
       }},
      {"lm.allow_unauthenticated", "serve lm:// (no auth in LMCache's protocol) with auth on",
       [](std::string_view v, Config& c) -> Status {
         if (v == "true")
           c.lm_allow_unauthenticated = true;
         else if (v == "false")
           c.lm_allow_unauthenticated = false;
         else
           return InvalidArgument("'" + std::string(v) + "' is not true or false");
         return Status::Ok();
       }},
      {"limits.request_timeout",
       "a request not fully received this long after its first byte closes its connection "
       "(native, lm:// and resp://), e.g. 30s; 0 = no limit",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.request_timeout, ParseDuration(v));
         c.lm.request_timeout = c.resp.request_timeout = c.server.request_timeout;
         return Status::Ok();
       }},
      {"limits.idle_timeout",
       "a connection moving no byte either way this long is closed (native, lm://, resp://), "
       "e.g. 10m; 0 = no limit",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.idle_timeout, ParseDuration(v));
         c.lm.idle_timeout = c.resp.idle_timeout = c.server.idle_timeout;
         return Status::Ok();
       }},
      {"limits.max_output_bytes", "queued response bytes per connection before reading pauses",
       [](std::string_view v, Config& c) -> Status {
         KVD_ASSIGN_OR_RETURN(c.server.max_output_bytes, ParseSizeIn(v, 4096, 1ull << 40));
         return Status::Ok();
       }},
  };
  return specs;
}

std::string FlagName(std::string_view key) {
  std::string flag(key);
  for (char& ch : flag) {
    if (ch == '.' || ch == '_') ch = '-';
  }
  return flag;
}

const KeySpec* FindKey(std::string_view key) {
  for (const KeySpec& s : Specs()) {
    if (key == s.key) return &s;
  }
  return nullptr;
}

// host.quotas.<NSID>: SIZE — a namespace id is 32 hex digits (the first 16 bytes of its keys).
Status SetQuota(std::string_view nsid, std::string_view size, Config& c) {
  std::optional<std::string> id = HexDecode(nsid);
  if (nsid.size() != 32 || !id) {
    return InvalidArgument("namespace id '" + std::string(nsid) + "' is not 32 hex digits");
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t bytes, ParseSizeIn(size, 1 << 20, 1ull << 50));
  c.host.namespace_quotas[*id] = bytes;
  return Status::Ok();
}

constexpr std::string_view kQuotaPrefix = "host.quotas.";

Status ApplyNode(const std::string& path, const std::string& prefix, const YAML::Node& node,
                 Config& config) {
  for (const auto& kv : node) {
    const std::string name = kv.first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const bool quota = key.rfind(kQuotaPrefix, 0) == 0;
    const KeySpec* spec = FindKey(key);
    // "FILE:LINE: key 'KEY'", and the key's flag when it has one.
    std::string where =
        path + ":" + std::to_string(kv.first.Mark().line + 1) + ": key '" + key + "'";
    if (quota || spec != nullptr) where += " (" + (quota ? "--host-quota" : FlagOf(key)) + ")";
    if (kv.second.IsMap()) {
      KVD_RETURN_IF_ERROR(ApplyNode(path, key, kv.second, config));
      continue;
    }
    if (!quota && spec == nullptr) return InvalidArgument(where + ": unknown key");
    if (!kv.second.IsScalar() && !kv.second.IsNull()) {
      return InvalidArgument(where + ": expected a single value");
    }
    const std::string value = kv.second.IsNull() ? "" : kv.second.as<std::string>();
    const Status s =
        quota ? SetQuota(std::string_view(key).substr(kQuotaPrefix.size()), value, config)
              : spec->set(value, config);
    if (!s.ok()) return Status(s.code(), where + ": " + s.message());
  }
  return Status::Ok();
}

}  // namespace

Result<std::uint64_t> ParseSize(std::string_view text) {
  static constexpr const char* kGrammar =
      "a size is digits followed directly by B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, "
      "GB, TB (powers of 1000), or digits alone for bytes: e.g. 64MiB, 8GiB";
  const std::string quoted = "'" + std::string(text) + "'";
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return InvalidArgument(quoted + " is not a size: " + kGrammar);
  std::uint64_t n = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + digits, n);
  if (ec != std::errc()) return OutOfRange(quoted + " is too large (at most 2^64-1 bytes)");
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KiB", 1ull << 10},
      {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},
      {"TiB", 1ull << 40},
      {"KB", 1000},
      {"MB", 1000ull * 1000},
      {"GB", 1000ull * 1000 * 1000},
      {"TB", 1000ull * 1000 * 1000 * 1000},
  };
  const std::string_view unit = text.substr(digits);
  const auto* found = std::find_if(std::begin(kUnits), std::end(kUnits),
                                   [unit](const auto& u) { return u.first == unit; });
  if (found == std::end(kUnits)) {
    return InvalidArgument(quoted + " is not a size (unit '" + std::string(unit) +
                           "'): " + kGrammar);
  }
  if (n > UINT64_MAX / found->second) {
    return OutOfRange(quoted + " is too large (at most 2^64-1 bytes)");
  }
  return n * found->second;
}

Status CheckReadableFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return StatusFromErrno(errno, "cannot open");
  if (S_ISDIR(st.st_mode)) return InvalidArgument("is a directory, not a file");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return InvalidArgument(std::string("is ") + kind + ", not a regular file");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, "cannot open");
  ::close(fd);
  return Status::Ok();
}

Status ApplyConfigFile(const std::string& path, Config& config) {
  const auto file_error = [&path](const Status& s) {
    return Status(s.code(), "--config " + path + ": " + s.message());
  };
  // Checked before ReadFile opens it: opening a FIFO for reading would wait for a writer.
  if (Status s = CheckReadableFile(path); !s.ok()) return file_error(s);
  auto bytes = ReadFile(path, kMaxConfigFileBytes);
  if (!bytes.ok()) {
    // ReadFile's messages start with the path; the cause follows it.
    std::string cause = bytes.status().message();
    if (cause.rfind(path + ": ", 0) == 0) cause.erase(0, path.size() + 2);
    return file_error(Status(bytes.status().code(), cause));
  }
  try {
    const YAML::Node root =
        YAML::Load(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (root.IsNull()) return Status::Ok();  // an empty file: defaults
    if (!root.IsMap()) return InvalidArgument(path + ": the top level must be a mapping of keys");
    return ApplyNode(path, "", root, config);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  } catch (const std::exception& e) {  // std::bad_alloc and the like from yaml-cpp
    return Internal(path + ": cannot be parsed: " + e.what());
  }
}

void DeriveValueLimit(Config& config) {
  if (config.max_value_bytes_explicit) return;
  const auto& limits = config.server.limits;
  // The largest value whose charge (HostTier::ChargeFor) fits the host tier's capacity.
  const std::uint64_t overhead = HostTier::ChargeFor(limits.max_key_bytes, 0);
  std::uint64_t fits =
      config.host.capacity_bytes > overhead
          ? (config.host.capacity_bytes - overhead) / Value::kAlignment * Value::kAlignment
          : 1;
  if (!config.ssd.dir.empty() && config.ssd.segment_bytes > 4096) {
    fits = std::min(fits, config.ssd.segment_bytes - 4096);  // a value fits one segment
  }
  config.server.limits.max_value_bytes =
      std::max<std::uint64_t>(1, std::min(config.server.limits.max_value_bytes, fits));
}

Status LoadConfig(const std::string& config_file, const std::vector<std::string_view>& flags,
                  Config& config) {
  config = Config{};
  if (!config_file.empty()) KVD_RETURN_IF_ERROR(ApplyConfigFile(config_file, config));
  for (std::size_t i = 0; i < flags.size(); ++i) {
    std::string_view a = flags[i];
    if (a.substr(0, 2) != "--") {
      return InvalidArgument("unexpected argument '" + std::string(a) +
                             "' (flags are --KEY VALUE)");
    }
    a.remove_prefix(2);
    std::string_view value;
    if (const auto eq = a.find('='); eq != std::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < flags.size()) {
      value = flags[++i];
    } else {
      return InvalidArgument("flag --" + std::string(a) + " needs a value");
    }
    KVD_RETURN_IF_ERROR(ApplyConfigFlag(a, value, config));
  }
  // A relative ssd.dir lies under data_dir (e.g. /var/lib/kvdepot/ssd under the systemd unit).
  if (!config.ssd.dir.empty() && config.ssd.dir.front() != '/') {
    config.ssd.dir =
        (std::filesystem::path(config.data_dir) / config.ssd.dir).lexically_normal().string();
  }
  DeriveValueLimit(config);
  if (Status s = ValidateConfig(config); !s.ok()) {
    return Status(s.code(), (config_file.empty() ? "" : config_file + ": ") + s.message());
  }
  return Status::Ok();
}

Status ApplyConfigFlag(std::string_view name, std::string_view value, Config& config) {
  if (name == "host-quota") {  // --host-quota NSID=SIZE, repeatable
    const auto eq = value.find('=');
    Status s = eq == std::string_view::npos
                   ? InvalidArgument("expected NSID=SIZE, got '" + std::string(value) + "'")
                   : SetQuota(value.substr(0, eq), value.substr(eq + 1), config);
    if (!s.ok()) return Status(s.code(), "flag --host-quota (host.quotas.NSID): " + s.message());
    return Status::Ok();
  }
  for (const KeySpec& s : Specs()) {
    if (FlagName(s.key) == name) {
      if (Status st = s.set(value, config); !st.ok()) {
        return Status(st.code(),
                      "flag --" + std::string(name) + " (" + s.key + "): " + st.message());
      }
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown flag --" + std::string(name) + " (kvdepotd --help lists them)");
}

Status ValidateConfig(const Config& config) {
  if (config.server.listen.empty() && config.server.unix_path.empty()) {
    return InvalidArgument("no listener: set listen (HOST:PORT) or unix (a socket path)");
  }
  if (config.server.limits.max_value_bytes + config.server.limits.max_key_bytes + 16 >
      config.server.limits.max_body_bytes) {
    return InvalidArgument("limits.max_body_bytes (" +
                           std::to_string(config.server.limits.max_body_bytes) +
                           ") must exceed limits.max_value_bytes (" +
                           std::to_string(config.server.limits.max_value_bytes) +
                           ") plus limits.max_key_bytes: raise limits.max_body_bytes "
                           "(--limits-max-body-bytes) or lower limits.max_value_bytes");
  }
  if (config.server.limits.max_value_bytes > config.host.capacity_bytes) {
    return InvalidArgument(
        "limits.max_value_bytes (" + std::to_string(config.server.limits.max_value_bytes) +
        ", set explicitly) exceeds host.capacity (" + std::to_string(config.host.capacity_bytes) +
        "): such values could never be stored; lower limits.max_value_bytes "
        "(--limits-max-value-bytes) or raise host.capacity (--host-capacity), or leave "
        "limits.max_value_bytes unset to derive it from host.capacity");
  }
  if (config.server.tls.enabled() != !config.server.tls.key_file.empty()) {
    return InvalidArgument("tls.cert_file and tls.key_file go together");
  }
  if (!config.server.tls.client_ca_file.empty() && !config.server.tls.enabled()) {
    return InvalidArgument("tls.client_ca_file needs tls.cert_file and tls.key_file");
  }
  if (config.server.tls.enabled() && config.server.listen.empty()) {
    return InvalidArgument("tls.cert_file is set but there is no TCP listener (listen)");
  }
  if (!config.auth_token_file.empty() && !config.lm.listen.empty() &&
      !config.lm_allow_unauthenticated) {
    return InvalidArgument(
        "lm.listen is set with auth.token_file, but LMCache's protocol has no "
        "authentication: set lm.allow_unauthenticated: true to serve lm:// "
        "unauthenticated anyway (docs/security.md)");
  }
  if (!config.events.replay.empty() && config.events.publish.empty()) {
    return InvalidArgument("events.replay is set without events.publish: set both, or neither");
  }
  if (!config.cluster.etcd.empty() && config.cluster.advertise.empty()) {
    return InvalidArgument(
        "cluster.etcd is set but cluster.advertise is not: set cluster.advertise "
        "(--cluster-advertise) to the HOST:PORT other nodes and clients reach this daemon's "
        "native listener at");
  }
  if (!config.cluster.tls_ca_file.empty() &&
      (config.cluster.etcd.empty() || !config.server.tls.enabled())) {
    return InvalidArgument(
        "cluster.tls_ca_file is set but members speak TLS only in a cluster (cluster.etcd) whose "
        "listener speaks TLS (tls.cert_file): set both, or unset cluster.tls_ca_file "
        "(--cluster-tls-ca-file)");
  }
  if (!config.cluster.etcd.empty() && config.server.tls.enabled() &&
      config.cluster.tls_ca_file.empty() && config.server.tls.client_ca_file.empty()) {
    return InvalidArgument(
        "cluster.etcd is set with a TLS listener (tls.cert_file), so members forward to each "
        "other over TLS, but nothing verifies their certificates: set cluster.tls_ca_file "
        "(--cluster-tls-ca-file) to the PEM CA that signed the members' certificates (or "
        "tls.client_ca_file, used when cluster.tls_ca_file is empty)");
  }
  if (!config.cluster.etcd.empty() && config.server.listen.empty()) {
    return InvalidArgument(
        "cluster.etcd is set but there is no TCP listener (listen): other nodes reach a "
        "member over TCP; set listen (--listen)");
  }
  if (!config.ssd.dir.empty()) {
    if (config.ssd.capacity_bytes < 2 * config.ssd.segment_bytes) {
      return InvalidArgument("ssd.capacity must hold at least two segments of ssd.segment_size");
    }
    if (config.server.limits.max_value_bytes + 4096 > config.ssd.segment_bytes) {
      return InvalidArgument(
          "ssd.segment_size (" + std::to_string(config.ssd.segment_bytes) +
          ") must exceed limits.max_value_bytes (" +
          std::to_string(config.server.limits.max_value_bytes) +
          ", set explicitly) by 4 KiB: every value must fit one segment; raise "
          "ssd.segment_size (--ssd-segment-size) or lower limits.max_value_bytes");
    }
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> ConfigEntries(const Config& c) {
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  std::vector<std::pair<std::string, std::string>> out = {
      {"listen", c.server.listen},
      {"unix", c.server.unix_path},
      {"unix_mode", OctalMode(c.server.unix_mode)},
      {"unix_group", c.server.unix_group},
      {"io_threads", n(c.server.io_threads)},
      {"data_dir", c.data_dir},
      {"log_level", std::string(LogLevelName(c.log_level))},
      {"host.capacity", n(c.host.capacity_bytes)},
      {"host.eviction", std::string(EvictionPolicyName(c.host.policy))},
      {"host.shards", n(c.host.shards)},
      {"host.shared_memory", c.host.shared_memory ? "true" : "false"},
      {"gpu.capacity", n(c.gpu_capacity)},
      {"gpu.device", n(static_cast<std::uint64_t>(c.gpu_device))},
      {"limits.max_key_bytes", n(c.server.limits.max_key_bytes)},
      {"limits.max_value_bytes", n(c.server.limits.max_value_bytes)},
      {"limits.max_lease_bytes", n(c.server.max_lease_bytes)},
      {"limits.max_batch", n(c.server.limits.max_batch)},
      {"limits.max_body_bytes", n(c.server.limits.max_body_bytes)},
      {"metrics.listen", c.metrics_listen},
      {"ssd.dir", c.ssd.dir},
      {"ssd.capacity", n(c.ssd.capacity_bytes)},
      {"ssd.durability", std::string(SsdDurabilityName(c.ssd.durability))},
      {"ssd.write_policy", std::string(SsdWritePolicyName(c.ssd.write_policy))},
      {"ssd.promotion", std::string(SsdPromotionName(c.ssd.promotion))},
      {"ssd.io", std::string(SsdIoPathName(c.ssd.io_path))},
      {"ssd.segment_size", n(c.ssd.segment_bytes)},
      {"ssd.write_buffer", n(c.ssd.write_buffer_bytes)},
      {"ssd.queue_depth", n(c.ssd.queue_depth)},
      {"ssd.sync_interval_ms", n(c.ssd.sync_interval_ms)},
      {"ssd.flush_on_shutdown", c.ssd.flush_on_shutdown ? "true" : "false"},
      {"ssd.flush_budget", DurationText(c.ssd.flush_budget)},
      {"lm.listen", c.lm.listen},
      {"lm.namespace", c.lm.namespace_name},
      {"lm.io_threads", n(c.lm.io_threads)},
      {"lm.max_value_bytes", n(c.lm.max_value_bytes)},
      {"lm.wire", std::string(LmWireModeName(c.lm.wire))},
      {"resp.listen", c.resp.listen},
      {"resp.io_threads", n(c.resp.io_threads)},
      {"events.publish", c.events.publish},
      {"events.replay", c.events.replay},
      {"events.topic", c.events.topic},
      {"events.queue_size", n(c.events.queue_events)},
      {"events.replay_buffer", n(c.events.replay_batches)},
      {"events.block_size", n(c.events.block_size)},
      {"limits.max_output_bytes", n(c.server.max_output_bytes)},
      {"auth.token_file", c.auth_token_file},
      {"tls.cert_file", c.server.tls.cert_file},
      {"tls.key_file", c.server.tls.key_file},
      {"tls.client_ca_file", c.server.tls.client_ca_file},
      {"lm.allow_unauthenticated", c.lm_allow_unauthenticated ? "true" : "false"},
      {"limits.request_timeout", DurationText(c.server.request_timeout)},
      {"limits.idle_timeout", DurationText(c.server.idle_timeout)},
      {"cluster.etcd", c.cluster.etcd},
      {"cluster.name", c.cluster.name},
      {"cluster.advertise", c.cluster.advertise},
      {"cluster.replicas", n(c.cluster.replicas)},
      {"cluster.group_chunks", n(c.cluster.group_chunks)},
      {"cluster.lease_ttl", DurationText(c.cluster.lease_ttl)},
      {"cluster.handoff_grace", DurationText(c.cluster.handoff_grace)},
      {"cluster.tls_ca_file", c.cluster.tls_ca_file},
  };
  for (const auto& [id, bytes] : c.host.namespace_quotas) {
    out.emplace_back(std::string(kQuotaPrefix) + HexLower(id), n(bytes));
  }
  return out;
}

std::vector<std::string> ChangedKeys(const Config& a, const Config& b) {
  std::map<std::string, std::string> before;
  for (auto& [k, v] : ConfigEntries(a)) before.emplace(k, v);
  std::vector<std::string> changed;
  for (auto& [k, v] : ConfigEntries(b)) {
    const auto it = before.find(k);
    if (it == before.end() || it->second != v) changed.push_back(k);
    if (it != before.end()) before.erase(it);
  }
  for (auto& [k, v] : before) changed.push_back(k);
  return changed;
}

std::string FlagOf(std::string_view key) {
  return "--" + FlagName(key);
}

std::string SettingError(std::string_view key, std::string_view value, std::string_view cause) {
  return std::string(key) + " " + std::string(value) + ": " + std::string(cause) + "; change " +
         std::string(key) + " or " + FlagOf(key);
}

std::vector<ConfigKeyHelp> ConfigKeys() {
  std::vector<ConfigKeyHelp> out;
  for (const KeySpec& s : Specs()) out.push_back({s.key, FlagOf(s.key), s.help});
  out.push_back({"host.quotas.NSID", "--host-quota NSID=SIZE",
                 "byte quota of a namespace (NSID: 32 hex digits); repeatable"});
  return out;
}

}  // namespace kvdepot::daemon
