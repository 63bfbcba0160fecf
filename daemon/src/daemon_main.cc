#include "kvdepot/daemon/daemon_main.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dir_lock.h"

#include "kvdepot/cluster/etcd_membership.h"
#include "kvdepot/cluster/topology_source.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/metrics.h"
#include "kvdepot/daemon/metrics_http.h"
#include "kvdepot/daemon/platform_probe.h"
#include "kvdepot/daemon/reload.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/service_notify.h"
#include "kvdepot/daemon/shutdown_flush.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/daemon/transcoder.h"
#include "kvdepot/protocol/lm_value.h"
#include "listen_address.h"
#include "net/tls_context.h"
#if defined(KVDEPOT_WITH_CUDA)
#include "gpu_device_tier.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"
#endif

namespace kvdepot::daemon {
namespace {

constexpr const char* kVersion = KVDEPOT_VERSION;  // the CMake project's version

void PrintHelp() {
  std::printf(
      "usage: kvdepotd [--config FILE] [--check-config FILE] [--KEY VALUE ...]\n"
      "\n"
      "Starts the kvdepot cache server. Settings come from the embedded defaults, then --config\n"
      "FILE (YAML, see config/kvdepot.yaml), then flags. --check-config FILE validates FILE and\n"
      "exits. Keys and their flags:\n\n");
  for (const ConfigKeyHelp& k : ConfigKeys()) {
    std::printf("  %-28s %-26s %s\n", k.flag.c_str(), k.key.c_str(), k.help.c_str());
  }
  std::printf(
      "\nSizes: digits followed directly by B, KiB, MiB, GiB, TiB or KB, MB, GB, TB (10^n), or\n"
      "digits alone (bytes): 64MiB. Durations: 30s, 500ms, 10m, 1h.\n"
      "Exit status: 0 after a clean stop; 2 for a wrong command line or configuration; 1 when a\n"
      "valid configuration cannot start here (busy port, missing file, ...).\n"
      "\nSIGTERM or SIGINT: stop accepting, finish in-flight requests, write the host tier's\n"
      "values the SSD tier lacks (ssd.flush_on_shutdown, ssd.flush_budget), exit 0.\n"
      "SIGHUP: re-read --config FILE (flags still override it) and apply what can change at run\n"
      "time (log_level, host.capacity, existing namespace quotas, limits.request_timeout,\n"
      "limits.idle_timeout, ssd.flush_on_shutdown, ssd.flush_budget); other changes are logged.\n");
}

// The one error line of a failed start (docs/operations.md): "kvdepotd: error: ...", exit `code`
// (2: the command line or config file is wrong; 1: the environment refuses a valid one).
int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "kvdepotd: error: %s\n", message.c_str());
  return code;
}

// Makes `path`, the value of directory setting `key`, an existing directory this process can
// write to, creating it (and its parents) when missing.
Status PrepareDirectory(std::string_view key, const std::string& path) {
  const auto fail = [&](const std::string& cause) {
    return Status(StatusCode::kIOError, SettingError(key, path, cause));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return fail("exists and is not a directory");
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return fail("cannot create the directory: " + ec.message());
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    return fail("the directory is not writable: " + std::system_category().message(errno));
  }
  return Status::Ok();
}

// The file a file setting names (`key`, e.g. tls.cert_file) is a regular file we can read.
Status CheckFileSetting(std::string_view key, const std::string& path) {
  if (Status s = CheckReadableFile(path); !s.ok()) {
    return Status(s.code(), SettingError(key, path, s.message()));
  }
  return Status::Ok();
}

// What keeps a Unix socket from being created at `path`, or empty when nothing obvious does.
std::string UnixListenCause(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return errno == ENOENT ? "directory " + dir + " does not exist"
                           : "directory " + dir + ": " + std::system_category().message(errno);
  }
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return "a file that is not a socket is in the way (only a stale socket is replaced)";
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "directory " + dir + " is not writable: " + std::system_category().message(errno);
  }
  return "";
}

// The error line for a TCP listener (`key`: listen, lm.listen or resp.listen) that failed to start
// with `status`: the cause a probe bind finds, else the listener's own message.
std::string ListenError(std::string_view key, const std::string& listen, const Status& status) {
  auto endpoint = ParseListenAddress(key, listen);
  std::string cause = endpoint.ok() ? ListenFailureCause(*endpoint) : "";
  return SettingError(key, listen, cause.empty() ? status.message() : cause);
}

// The error line for a failed Server::Start: its TLS messages start with the tls.* key they
// concern; otherwise the TCP listener failed when it has no port yet, else the Unix one.
std::string ServerStartError(const Config& config, const Server& server, const Status& status) {
  const std::string& message = status.message();
  if (message.rfind("tls.", 0) == 0 || message.rfind("unix_group ", 0) == 0 ||
      message.rfind("unix_mode", 0) == 0) {
    const std::string key = message.substr(0, message.find_first_of(" :"));
    return message + "; change " + key + " or " + FlagOf(key);
  }
  if (!config.server.listen.empty() && server.tcp_port() == 0) {
    return ListenError("listen", config.server.listen, status);
  }
  const std::string cause = UnixListenCause(config.server.unix_path);
  return SettingError("unix", config.server.unix_path, cause.empty() ? message : cause);
}

// With a TLS listener, the members of a cluster reach each other over TLS (docs/cluster.md, "TLS
// between members"): the client context of this node's peer connections, trusting
// cluster.tls_ca_file (else tls.client_ca_file). Sets nothing for a plain listener or no cluster.
// Errors name the setting and end with what to change.
Status SetUpPeerTls(const Config& config, ClusterRouterOptions& router) {
  if (config.cluster.etcd.empty() || !config.server.tls.enabled()) return Status::Ok();
  const bool own = !config.cluster.tls_ca_file.empty();
  const std::string setting = own ? "cluster.tls_ca_file" : "tls.client_ca_file";
  const std::string& ca = own ? config.cluster.tls_ca_file : config.server.tls.client_ca_file;
  auto made = MakeTlsContext(TlsRole::kPeerClient, config.server.tls, ca, setting);
  if (!made.ok()) {
    const std::string message(made.status().message());
    const std::string key = message.substr(0, message.find(' '));
    return InvalidArgument(message + "; change " + key + " or " + FlagOf(key));
  }
  router.peer_tls = *std::move(made);
  router.peer_tls_trust = setting + " " + ca;
  return Status::Ok();
}

// Raises the soft open-file limit to the hard limit (each connection is a descriptor; the default
// soft limit of 1024 would refuse connections long before memory runs out) and logs both.
void RaiseFileLimit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t before = lim.rlim_cur;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = before;
  }
  Log(LogLevel::kInfo, "open file limit",
      {{"soft_before", std::to_string(before)},
       {"soft", std::to_string(lim.rlim_cur)},
       {"hard", std::to_string(lim.rlim_max)}});
}

// The lm:// and resp:// listeners' counters as STATS sections (docs/protocol.md).
std::string LmStatsJson(const LmServerStats& s) {
  return nlohmann::ordered_json{{"connections_open", s.connections_open},
                                {"connections_total", s.connections_total},
                                {"puts", s.puts},
                                {"puts_dropped", s.puts_dropped},
                                {"puts_oversized", s.puts_oversized},
                                {"gets", s.gets},
                                {"get_hits", s.get_hits},
                                {"exists", s.exists},
                                {"exist_hits", s.exist_hits},
                                {"legacy_connections", s.legacy_connections},
                                {"wire_refused", s.wire_refused},
                                {"protocol_errors", s.protocol_errors},
                                {"request_timeouts", s.request_timeouts},
                                {"idle_timeouts", s.idle_timeouts},
                                {"bytes_in", s.bytes_in},
                                {"bytes_out", s.bytes_out}}
      .dump();
}

std::string RespStatsJson(const RespServerStats& s) {
  return nlohmann::ordered_json{{"connections_open", s.connections_open},
                                {"connections_total", s.connections_total},
                                {"commands", s.commands},
                                {"command_errors", s.command_errors},
                                {"gets", s.gets},
                                {"get_hits", s.get_hits},
                                {"sets", s.sets},
                                {"values_oversized", s.values_oversized},
                                {"auth_failures", s.auth_failures},
                                {"protocol_errors", s.protocol_errors},
                                {"request_timeouts", s.request_timeouts},
                                {"idle_timeouts", s.idle_timeouts},
                                {"bytes_in", s.bytes_in},
                                {"bytes_out", s.bytes_out}}
      .dump();
}

// The membership's log lines, in the daemon's log.
void LogMembership(cluster::MembershipLogLevel level, std::string_view message,
                   const cluster::MembershipLogFields& fields) {
  std::vector<LogField> out;
  out.reserve(fields.size());
  for (const auto& [key, value] : fields) out.push_back({key, value});
  const LogLevel mapped = level == cluster::MembershipLogLevel::kDebug  ? LogLevel::kDebug
                          : level == cluster::MembershipLogLevel::kInfo ? LogLevel::kInfo
                          : level == cluster::MembershipLogLevel::kWarn ? LogLevel::kWarn
                                                                        : LogLevel::kError;
  Log(mapped, message, out);
}

// "HOST:PORT" with the host of cluster.advertise and `port` (0: "", the listener is off).
std::string AdvertisedAt(const std::string& advertise, std::uint16_t port) {
  if (port == 0) return "";
  return advertise.substr(0, advertise.rfind(':')) + ":" + std::to_string(port);
}

// Whether HOST:PORT's host is a loopback address (127.0.0.0/8, ::1, localhost).
bool IsLoopback(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// A warning per listener reachable from other hosts without credentials.
void WarnExposedListeners(const Config& config) {
  const bool auth = config.server.auth != nullptr;
  if (!config.server.listen.empty() && !IsLoopback(config.server.listen) && !auth) {
    Log(LogLevel::kWarn,
        "listening on a non-loopback address without authentication: any host "
        "that can reach it can read and write every key (set auth.token_file, docs/security.md)",
        {{"listen", config.server.listen}});
  }
  if (!config.server.listen.empty() && !IsLoopback(config.server.listen) &&
      !config.server.tls.enabled()) {
    Log(LogLevel::kWarn,
        "listening on a non-loopback address without TLS: tokens and values "
        "cross the network in clear (set tls.cert_file, docs/security.md)",
        {{"listen", config.server.listen}});
  }
  if (!config.lm.listen.empty() && !IsLoopback(config.lm.listen)) {
    Log(LogLevel::kWarn,
        "lm:// listens on a non-loopback address; LMCache's protocol has no "
        "authentication: any host that can reach it can read and write the LMCache namespace",
        {{"lm_listen", config.lm.listen}});
  } else if (!config.lm.listen.empty() && auth) {
    Log(LogLevel::kWarn, "lm:// serves without authentication (lm.allow_unauthenticated)",
        {{"lm_listen", config.lm.listen}});
  }
  if (!config.resp.listen.empty() && !IsLoopback(config.resp.listen) && !auth) {
    Log(LogLevel::kWarn,
        "resp:// listens on a non-loopback address without authentication: any "
        "host that can reach it can read and write every key (set auth.token_file)",
        {{"resp_listen", config.resp.listen}});
  }
  if (!config.metrics_listen.empty() && !IsLoopback(config.metrics_listen)) {
    Log(LogLevel::kWarn,
        "metrics listen on a non-loopback address; /metrics has no "
        "authentication (it shows counters and namespace ids, never keys or values)",
        {{"metrics_listen", config.metrics_listen}});
  }
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "none" : out;
}

// SIGHUP: re-reads the configuration and applies what can change at run time. A file that
// cannot be read, parsed or validated changes nothing: the running configuration stays and the
// reason is logged. Never throws (an exception, a bug, is logged the same way).
void Reload(const std::string& config_file, const std::vector<std::string_view>& flags,
            Config& running, HostTier& host, const ReloadTargets& listeners, Metrics& metrics) {
  NotifyReloading();
  const auto failed = [&](const std::string& why) {
    Log(LogLevel::kError, "config reload failed; keeping the running configuration",
        {{"file", config_file}, {"error", why}});
    metrics.OnReload(false);
  };
  try {
    Config next;
    if (Status s = LoadConfig(config_file, flags, next); !s.ok()) {
      failed(s.message());
    } else {
      const ReloadResult r = ApplyReload(next, running, host, listeners);
      Log(LogLevel::kInfo, "config reloaded",
          {{"file", config_file.empty() ? "(none: flags only)" : config_file},
           {"applied", Join(r.applied)},
           {"restart_needed", Join(r.restart_needed)}});
      metrics.OnReload(true);
    }
  } catch (const std::exception& e) {
    failed(std::string("unexpected exception: ") + e.what());
  }
  NotifyReady("serving");
}

// Warm restart: writes the host tier's values the SSD tier lacks (ssd.flush_on_shutdown,
// ssd.flush_budget) and logs what was written and what was left.
void FlushHostTier(const SsdTierOptions& options, const HostTier& host, SsdTier& ssd) {
  if (!options.flush_on_shutdown) {
    Log(LogLevel::kInfo,
        "shutdown flush off (ssd.flush_on_shutdown false): the host tier's "
        "values not on the SSD are dropped",
        {{"host_chunks", std::to_string(host.stats().chunks)}});
    return;
  }
  // Leave the service manager room for the flush on top of TimeoutStopSec (plus the close).
  NotifyStatus("writing the host tier to the SSD tier (ssd.flush_budget " +
                   std::to_string(options.flush_budget.count()) + "ms)",
               std::chrono::microseconds(options.flush_budget) + std::chrono::seconds(10));
  const FlushReport r = FlushHostToSsd(host, ssd, options.flush_budget);
  std::string left_why = "none";
  if (r.budget_exhausted) left_why = "ssd.flush_budget ran out";
  if (r.capacity_reached) left_why = "ssd.capacity (less one segment) reached";
  Log(r.left_chunks == 0 && r.failed_chunks == 0 ? LogLevel::kInfo : LogLevel::kWarn,
      "shutdown flush: wrote " + std::to_string(r.written_chunks) + " host-tier chunks to the SSD",
      {{"host_chunks", std::to_string(r.host_chunks)},
       {"already_on_ssd", std::to_string(r.already_on_ssd)},
       {"written_chunks", std::to_string(r.written_chunks)},
       {"written_bytes", std::to_string(r.written_bytes)},
       {"failed_chunks", std::to_string(r.failed_chunks)},
       {"left_chunks", std::to_string(r.left_chunks)},
       {"left_bytes", std::to_string(r.left_bytes)},
       {"left_because", left_why},
       {"elapsed_ms", std::to_string(r.elapsed.count())},
       {"budget_ms", std::to_string(options.flush_budget.count())}});
}

// Starts the KV-event publisher of config.events, announces AllBlocksCleared and routes the SSD
// tier's index changes to it (config.ssd.on_index_change). The error names the setting whose
// endpoint failed.
Result<std::unique_ptr<KvEventPublisher>> StartEvents(Config& config) {
  KvEventsOptions options = config.events;
  KVD_ASSIGN_OR_RETURN(options.lm_namespace_id, lm::NamespaceId(config.lm.namespace_name));
  auto started = KvEventPublisher::Start(options);
  if (!started.ok()) {
    const std::string why = started.status().message();
    const bool replay = !options.replay.empty() && why.find(options.replay) != std::string::npos &&
                        why.find(options.publish) == std::string::npos;
    return Status(started.status().code(),
                  replay ? SettingError("events.replay", options.replay, why)
                         : SettingError("events.publish", options.publish, why));
  }
  KvEventPublisher* events = started->get();
  events->Cleared();  // a new process: nothing announced before holds (sequence number 0)
  config.ssd.on_index_change = [events](std::string_view key, bool readable) {
    if (readable) {
      events->Stored(key, EventMedium::kDisk);
    } else {
      events->Removed(key, EventMedium::kDisk);
    }
  };
  std::vector<LogField> fields = {{"publish", events->endpoint()}, {"topic", options.topic}};
  if (!options.replay.empty()) fields.push_back({"replay", events->replay_endpoint()});
  Log(LogLevel::kInfo, "kv events on " + events->endpoint(), fields);
  return started;
}

// After StartEvents' AllBlocksCleared: every chunk the SSD tier recovered (waiting for queue room:
// nothing is served yet).
void AnnounceRecovered(KvEventPublisher& events, SsdTier* ssd) {
  if (ssd == nullptr) return;
  std::string cursor;
  std::uint64_t announced = 0;
  do {
    protocol::ScanResult page = ssd->Scan("", cursor, 4096);
    for (const protocol::ScanEntry& e : page.entries) {
      events.StoredWait(e.key, EventMedium::kDisk);
      ++announced;
    }
    cursor = std::move(page.next_cursor);
  } while (!cursor.empty());
  Log(LogLevel::kInfo, "kv events: announced the SSD tier's recovered chunks",
      {{"chunks", std::to_string(announced)}});
}

// kvdepotd itself (DaemonMain without its last-resort exception handler).
int Run(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::string config_file;
  bool check_only = false;
  std::vector<std::string_view> flags;
  // The config file applies before any flag, wherever it stands on the command line.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      PrintHelp();
      return 0;
    }
    if (args[i] == "--version") {
      std::printf("kvdepotd %s\n", kVersion);
      return 0;
    }
    if (args[i] == "--config" || args[i] == "--check-config") {
      if (i + 1 >= args.size()) return Fail(2, std::string(args[i]) + " needs a FILE");
      check_only = check_only || args[i] == "--check-config";
      config_file = std::string(args[++i]);
      continue;
    }
    flags.push_back(args[i]);
  }
  Config config;
  if (Status s = LoadConfig(config_file, flags, config); !s.ok()) return Fail(2, s.message());
  if (check_only) {
    std::printf("%s: ok\n", config_file.c_str());
    return 0;
  }

  SetLogLevel(config.log_level);
  // Stored values live in the host tier's own arena (host_tier.h), never returned to the kernel.
  // What still comes from the heap — values placed there when the arena has no free range, and
  // the daemon's other large buffers — is served from it rather than from fresh mmaps, and freed
  // memory is kept instead of trimmed: faulting pages back in costs ~0.5 ms per MiB on the dev VM
  // (docs/benchmarks.md).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD,
          static_cast<int>(std::min<std::uint64_t>(config.host.capacity_bytes, 1u << 30)));
  if (Status s = PrepareDirectory("data_dir", config.data_dir); !s.ok()) {
    return Fail(1, s.message());
  }
  if (!config.ssd.dir.empty()) {
    if (Status s = PrepareDirectory("ssd.dir", config.ssd.dir); !s.ok()) {
      return Fail(1, s.message());
    }
  }
  // One daemon per directory: data_dir, and ssd.dir when it is not the same directory.
  std::vector<std::unique_ptr<DirectoryLock>> directory_locks;
  for (const auto& [key, dir] :
       {std::pair<const char*, const std::string&>{"data_dir", config.data_dir},
        {"ssd.dir", config.ssd.dir}}) {
    std::error_code ec;
    if (dir.empty() ||
        (directory_locks.size() == 1 && std::filesystem::equivalent(dir, config.data_dir, ec))) {
      continue;
    }
    auto lock = DirectoryLock::Acquire(dir);
    if (!lock.ok()) return Fail(1, SettingError(key, dir, lock.status().message()));
    directory_locks.push_back(std::move(*lock));
  }
  // Files named by settings, checked before anything starts so that a missing or unreadable one
  // is reported as such (OpenSSL's own errors for a missing file say little).
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"auth.token_file", config.auth_token_file},
        {"tls.cert_file", config.server.tls.cert_file},
        {"tls.key_file", config.server.tls.key_file},
        {"tls.client_ca_file", config.server.tls.client_ca_file},
        {"cluster.tls_ca_file", config.cluster.tls_ca_file}}) {
    if (path.empty()) continue;
    if (Status s = CheckFileSetting(key, path); !s.ok()) return Fail(1, s.message());
  }

  // Block the control signals in every thread (before any is started); the main thread waits for
  // them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const PlatformReport platform = ProbePlatform();
  Log(LogLevel::kInfo, "kvdepotd starting",
      {{"version", kVersion},
       {"io_uring", platform.io_uring_available ? "available" : platform.io_uring_detail},
       {"rocksdb", platform.rocksdb_version},
       {"config_file", config_file.empty() ? "(none)" : config_file}});
  {
    std::vector<LogField> fields;
    const auto entries = ConfigEntries(config);
    for (const auto& [key, value] : entries) fields.push_back({key, value});
    Log(LogLevel::kInfo, "effective configuration", fields);
  }

  RaiseFileLimit();
  if (!config.auth_token_file.empty()) {
    auto auth = Authenticator::LoadFile(config.auth_token_file);
    if (!auth.ok()) {
      return Fail(1,
                  SettingError("auth.token_file", config.auth_token_file, auth.status().message()));
    }
    config.server.auth = std::move(*auth);
    Log(LogLevel::kInfo, "authentication on",
        {{"token_file", config.auth_token_file},
         {"tokens", std::to_string(config.server.auth->size())}});
  }
  WarnExposedListeners(config);
  Metrics metrics(kVersion);
  // KV events (docs/events.md): started before the tiers so that the SSD tier's changes reach it.
  std::unique_ptr<KvEventPublisher> events;
  if (!config.events.publish.empty()) {
    auto started = StartEvents(config);
    if (!started.ok()) return Fail(1, started.status().message());
    events = std::move(*started);
  }
  HostTier host(config.host);
  std::unique_ptr<SsdTier> ssd;
  if (!config.ssd.dir.empty()) {
    auto opened = SsdTier::Open(config.ssd);
    if (!opened.ok())
      return Fail(1, SettingError("ssd.dir", config.ssd.dir, opened.status().message()));
    ssd = std::move(*opened);
  }
  if (events) AnnounceRecovered(*events, ssd.get());
  if (config.host.shared_memory) {
    // Under write-back, evicted values keep their arena ranges until the SSD has them.
    const std::uint64_t headroom =
        ssd != nullptr && config.ssd.write_policy == SsdWritePolicy::kWriteBack
            ? config.ssd.write_buffer_bytes
            : 0;
    if (Status s = host.EnableSharedArena(headroom); !s.ok()) {
      return Fail(1, SettingError("host.shared_memory", "true", s.message()));
    }
  }
  Store store(host, ssd.get());
  store.SetEvents(events.get());
  // The GPU tier: only when asked for; asking without CUDA or without a GPU is an error.
  [[maybe_unused]] const char* tiers = ssd ? "host + SSD tiers" : "the host tier only (no ssd.dir)";
  std::unique_ptr<DeviceTier> gpu;
  TranscoderHooks hooks;
  hooks.observe = [&metrics](const TranscodeTimings& t, CodecId target, std::string_view device) {
    if (t.decode_seconds > 0) {
      metrics.ObserveCodec(CodecOp::kDecode, CodecName(t.from), device, t.decode_seconds,
                           t.raw_bytes, t.input_bytes);
    }
    if (t.encode_seconds > 0) {
      metrics.ObserveCodec(CodecOp::kEncode, CodecName(target), device, t.encode_seconds,
                           t.raw_bytes, t.output_bytes);
    }
  };
#if defined(KVDEPOT_WITH_CUDA)
  if (config.gpu_capacity > 0) {
    auto created = CreateGpuDeviceTier({config.gpu_device, config.gpu_capacity}, host);
    if (!created.ok()) {
      const std::string why = "gpu.capacity is " + std::to_string(config.gpu_capacity) +
                              " but the GPU tier cannot start on device " +
                              std::to_string(config.gpu_device) + ": " + created.status().message();
      return Fail(1, why);
    }
    gpu = std::move(*created);
    store.SetDeviceTier(gpu.get());
    const int device = config.gpu_device;
    hooks.device_name = "gpu";
    hooks.device_transcode = [device](std::span<const std::byte> in, CodecId target,
                                      TranscodeTimings* t) -> Result<std::vector<std::byte>> {
      if (cudaSetDevice(device) != cudaSuccess) return Unavailable("cudaSetDevice failed");
      return cuda::TranscodeGpu(in, target, {}, t);
    };
    Log(LogLevel::kInfo, "gpu tier on",
        {{"device", DescribeGpu(device)}, {"gpu_capacity", std::to_string(config.gpu_capacity)}});
  } else {
    // Not probed: touching CUDA would create a context (device memory) for nothing.
    Log(LogLevel::kInfo, std::string("gpu tier off (gpu.capacity 0): serving ") + tiers);
  }
#else
  if (config.gpu_capacity > 0) {
    const std::string why = "gpu.capacity is " + std::to_string(config.gpu_capacity) +
                            " but this kvdepotd was built without CUDA (-DKVDEPOT_CUDA=ON)";
    return Fail(1, why);
  }
  Log(LogLevel::kInfo, std::string("gpu tier off: built without CUDA; serving ") + tiers);
#endif
  // Without a metrics endpoint nobody reads the per-request metrics: the server skips them.
  Server server(config.server, store, config.metrics_listen.empty() ? nullptr : &metrics,
                std::move(hooks));
  for (const Tier tier : store.Tiers()) {
    metrics.AddTier(std::string(protocol::TierName(tier)),
                    [&store, tier] { return store.TierStatsOf(tier); });
  }
  if (ssd) {
    metrics.SetSsdSource([&ssd] { return ssd->stats(); });
  }
  metrics.SetServerSource([&server] { return server.stats(); });
  if (events) metrics.SetEventsSource([&events] { return events->stats(); });
  if (Status s = server.Start(); !s.ok()) return Fail(1, ServerStartError(config, server, s));
  // Checked before the cluster is joined: a CA that does not load fails the start.
  ClusterRouterOptions router_options;
  if (Status s = SetUpPeerTls(config, router_options); !s.ok()) {
    server.Stop();
    return Fail(1, s.message());
  }
  LmServer lm_server(config.lm, store);  // LMCache's lm:// protocol (docs/lmcache.md)
  if (!config.lm.listen.empty()) {
    if (Status s = lm_server.Start(); !s.ok()) {
      server.Stop();
      return Fail(1, ListenError("lm.listen", config.lm.listen, s));
    }
    metrics.SetLmSource([&lm_server] { return lm_server.stats(); });
    server.AddStatsSection("lm", [&lm_server] { return LmStatsJson(lm_server.stats()); });
  }
  // The Redis protocol (docs/resp.md), with the native listener's limits and tokens.
  config.resp.max_value_bytes = config.server.limits.max_value_bytes;
  config.resp.max_key_bytes = config.server.limits.max_key_bytes;
  config.resp.auth = config.server.auth;
  config.resp.version = kVersion;
  RespServer resp_server(config.resp, store);
  if (!config.resp.listen.empty()) {
    if (Status s = resp_server.Start(); !s.ok()) {
      lm_server.Stop();
      server.Stop();
      return Fail(1, ListenError("resp.listen", config.resp.listen, s));
    }
    metrics.SetRespSource([&resp_server] { return resp_server.stats(); });
    server.AddStatsSection("resp", [&resp_server] { return RespStatsJson(resp_server.stats()); });
  }
  std::unique_ptr<MetricsHttp> http;
  if (!config.metrics_listen.empty()) {
    auto started = MetricsHttp::Start(config.metrics_listen, metrics);
    if (!started.ok()) {
      lm_server.Stop();
      server.Stop();
      return Fail(
          1, SettingError("metrics.listen", config.metrics_listen, started.status().message()));
    }
    http = std::move(*started);
  }

  // The cluster (docs/cluster.md): joined once every listener is bound, so that the address
  // advertised answers; without cluster.etcd the daemon is a single node, as before.
  std::unique_ptr<cluster::EtcdMembership> membership;
  if (!config.cluster.etcd.empty()) {
    cluster::MembershipOptions o;
    o.etcd = config.cluster.etcd;
    o.cluster_name = config.cluster.name;
    o.data_dir = config.data_dir;
    o.self.native_addr = config.cluster.advertise;
    o.self.lm_addr =
        config.lm.listen.empty() ? "" : AdvertisedAt(config.cluster.advertise, lm_server.port());
    o.self.metrics_addr = http ? AdvertisedAt(config.cluster.advertise, http->port()) : "";
    o.self.capacity_bytes = config.host.capacity_bytes + (ssd ? config.ssd.capacity_bytes : 0);
    o.version = kVersion;
    o.placement = {config.cluster.replicas, config.cluster.group_chunks};
    o.lease_ttl = config.cluster.lease_ttl;
    o.handoff_grace = config.cluster.handoff_grace;
    o.used_bytes = [&host, &ssd] { return host.stats().bytes + (ssd ? ssd->stats().bytes : 0); };
    o.log = LogMembership;
    auto joined = cluster::EtcdMembership::Start(std::move(o));
    if (!joined.ok()) {
      resp_server.Stop();
      lm_server.Stop();
      server.Stop();
      // A node-id clash or an unreadable identity in data_dir (an unreachable etcd is no error).
      return Fail(
          1, "cannot join cluster '" + config.cluster.name + "': " + joined.status().message());
    }
    membership = std::move(*joined);
    metrics.SetClusterSource([&membership] { return membership->stats(); });
    if (http) http->SetHealthDetail([&membership] { return membership->HealthDetail(); });
    Log(LogLevel::kInfo, "cluster member",
        {{"cluster", config.cluster.name},
         {"id", membership->SelfId()},
         {"incarnation", std::to_string(membership->incarnation())},
         {"advertise", config.cluster.advertise},
         {"etcd", config.cluster.etcd}});
  }
  // Requests for keys this node does not own go to their owners (docs/cluster.md, "Requests"):
  // the router reads the membership's view; every front end reaches it through the store.
  std::unique_ptr<ClusterRouter> router;
  if (membership) {
    router_options.limits = config.server.limits;
    if (config.server.auth != nullptr) {
      auto token = LoadPeerToken(config.auth_token_file);
      if (!token.ok()) {
        membership->Leave();
        resp_server.Stop();
        lm_server.Stop();
        server.Stop();
        return Fail(1, token.status().message());
      }
      router_options.peer_token = *std::move(token);
    }
    router = std::make_unique<ClusterRouter>(store, *membership, std::move(router_options));
    store.SetRouter(router.get());
    metrics.SetClusterRouterSource([r = router.get()] { return r->stats(); });
  }

  std::string where;
  std::vector<LogField> fields;
  if (!config.server.listen.empty()) {
    const auto colon = config.server.listen.rfind(':');
    where = config.server.listen.substr(0, colon) + ":" + std::to_string(server.tcp_port());
    fields.push_back({"tcp", where});
  }
  if (!config.server.unix_path.empty()) {
    where += (where.empty() ? "unix:" : " and unix:") + config.server.unix_path;
    fields.push_back({"unix", config.server.unix_path});
  }
  if (http) {
    const auto colon = config.metrics_listen.rfind(':');
    fields.push_back({"metrics", "http://" + config.metrics_listen.substr(0, colon) + ":" +
                                     std::to_string(http->port()) + "/metrics"});
  }
  fields.push_back({"host_capacity", std::to_string(config.host.capacity_bytes)});
  fields.push_back({"host_shared_memory", config.host.shared_memory ? "on" : "off"});
  fields.push_back({"gpu", gpu ? "on" : "off"});
  if (ssd) {
    fields.push_back({"ssd_dir", config.ssd.dir});
    fields.push_back({"ssd_capacity", std::to_string(config.ssd.capacity_bytes)});
    fields.push_back({"ssd_io", ssd->stats().io_path});
    fields.push_back({"ssd_durability", std::string(SsdDurabilityName(config.ssd.durability))});
  } else {
    fields.push_back({"ssd", "off"});
  }
  fields.push_back({"io_threads", std::to_string(config.server.io_threads)});

  Log(LogLevel::kInfo, "listening on " + where, fields);
  if (!config.lm.listen.empty()) {
    const std::string lm_where = config.lm.listen.substr(0, config.lm.listen.rfind(':')) + ":" +
                                 std::to_string(lm_server.port());
    Log(LogLevel::kInfo, "lm:// (LMCache protocol) on " + lm_where, {{"lm", lm_where}});
  }
  if (!config.resp.listen.empty()) {
    const std::string resp_where = config.resp.listen.substr(0, config.resp.listen.rfind(':')) +
                                   ":" + std::to_string(resp_server.port());
    Log(LogLevel::kInfo, "resp:// (Redis protocol) on " + resp_where, {{"resp", resp_where}});
  }
  if (http) http->SetHealth(Health::kServing);
  NotifyReady("serving on " + where);

  int signo = 0;
  {
    Watchdog watchdog([&server](std::function<void()> done) { server.Probe(std::move(done)); });
    if (watchdog.enabled()) {
      Log(LogLevel::kInfo, "systemd watchdog enabled",
          {{"interval_ms", std::to_string(watchdog.interval().count() / 1000)}});
    }
    // resp:// takes timeout changes only when it runs (the log names the listeners reached).
    const ReloadTargets reload_targets{&server, &lm_server,
                                       config.resp.listen.empty() ? nullptr : &resp_server};
    while (true) {
      sigwait(&signals, &signo);
      if (signo != SIGHUP) break;
      Log(LogLevel::kInfo, "received SIGHUP: reloading the configuration");
      Reload(config_file, flags, config, host, reload_targets, metrics);
    }
    if (http) http->SetHealth(Health::kDraining);
    NotifyStopping();
    // Graceful leave: the record goes at once, so other nodes stop routing here while this one
    // drains (they need not wait for the lease to expire).
    if (membership) membership->Leave();
    Log(LogLevel::kInfo, std::string("received ") + (signo == SIGTERM ? "SIGTERM" : "SIGINT") +
                             ": draining in-flight requests");
    resp_server.Stop();
    lm_server.Stop();
    server.Stop();
  }
  // After the watchdog (it probes the stopped server's I/O loops) and once every front end has
  // answered its last request: nothing writes to the tiers any more.
  if (ssd) {
    FlushHostTier(config.ssd, host, *ssd);
    ssd->Close();  // completes queued writes
  }
  if (events) events->Stop();  // publishes what the tiers announced until now (the flush too)
  http.reset();                // its sources read the server, the tiers and the membership
  // The listeners are stopped: no request reaches the router any more. It goes before the
  // membership it reads and before the store it was set on.
  store.SetRouter(nullptr);
  router.reset();
  membership.reset();
  const ServerStats st = server.stats();
  Log(LogLevel::kInfo, "stopped after " + std::to_string(st.requests) + " requests",
      {{"requests", std::to_string(st.requests)},
       {"connections", std::to_string(st.connections_total)}});
  return 0;
}

}  // namespace

int DaemonMain(int argc, char** argv) {
  // Every expected failure is a Status with its own message; an exception reaching here (a bug,
  // or the system refusing a thread or memory) is reported as one error line and exit 1 instead
  // of std::terminate's abort.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(1, std::string("unexpected exception: ") + e.what() + " (please report it)");
  } catch (...) {
    return Fail(1, "unexpected exception of unknown type (please report it)");
  }
}

}  // namespace kvdepot::daemon
