#include "kvdepot/daemon/daemon_main.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/metrics.h"
#include "kvdepot/daemon/metrics_http.h"
#include "kvdepot/daemon/platform_probe.h"
#include "kvdepot/daemon/reload.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/service_notify.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/daemon/transcoder.h"
#if defined(KVDEPOT_WITH_CUDA)
#include "gpu_device_tier.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"
#endif

namespace kvdepot::daemon {
namespace {

constexpr const char* kVersion = "0.1.0";

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
      "\nSIGTERM or SIGINT: stop accepting, finish in-flight requests, exit 0.\n"
      "SIGHUP: re-read --config FILE (flags still override it) and apply what can change at run\n"
      "time (log_level, host.capacity, existing namespace quotas, limits.request_timeout,\n"
      "limits.idle_timeout); other changes are logged.\n");
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "kvdepotd: error: %s\n", message.c_str());
  return code;
}

// Defaults, then `config_file` (when given), then `flags` (--KEY VALUE or --KEY=VALUE pairs,
// --config/--check-config already taken out), then the cross-field checks.
Status LoadConfig(const std::string& config_file, const std::vector<std::string_view>& flags,
                  Config& config) {
  config = Config{};
  if (!config_file.empty()) KVD_RETURN_IF_ERROR(ApplyConfigFile(config_file, config));
  for (std::size_t i = 0; i < flags.size(); ++i) {
    std::string_view a = flags[i];
    if (a.substr(0, 2) != "--") {
      return InvalidArgument("unexpected argument '" + std::string(a) + "'");
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
  if (Status s = ValidateConfig(config); !s.ok()) {
    return Status(s.code(), (config_file.empty() ? "" : config_file + ": ") + s.message());
  }
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
      {{"soft_before", std::to_string(before)}, {"soft", std::to_string(lim.rlim_cur)},
       {"hard", std::to_string(lim.rlim_max)}});
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
    Log(LogLevel::kWarn, "listening on a non-loopback address without authentication: any host "
        "that can reach it can read and write every key (set auth.token_file, docs/security.md)",
        {{"listen", config.server.listen}});
  }
  if (!config.server.listen.empty() && !IsLoopback(config.server.listen) &&
      !config.server.tls.enabled()) {
    Log(LogLevel::kWarn, "listening on a non-loopback address without TLS: tokens and values "
        "cross the network in clear (set tls.cert_file, docs/security.md)",
        {{"listen", config.server.listen}});
  }
  if (!config.lm.listen.empty() && !IsLoopback(config.lm.listen)) {
    Log(LogLevel::kWarn, "lm:// listens on a non-loopback address; LMCache's protocol has no "
        "authentication: any host that can reach it can read and write the LMCache namespace",
        {{"lm_listen", config.lm.listen}});
  } else if (!config.lm.listen.empty() && auth) {
    Log(LogLevel::kWarn, "lm:// serves without authentication (lm.allow_unauthenticated)",
        {{"lm_listen", config.lm.listen}});
  }
  if (!config.resp.listen.empty() && !IsLoopback(config.resp.listen) && !auth) {
    Log(LogLevel::kWarn, "resp:// listens on a non-loopback address without authentication: any "
        "host that can reach it can read and write every key (set auth.token_file)",
        {{"resp_listen", config.resp.listen}});
  }
  if (!config.metrics_listen.empty() && !IsLoopback(config.metrics_listen)) {
    Log(LogLevel::kWarn, "metrics listen on a non-loopback address; /metrics has no "
        "authentication (it shows counters and namespace ids, never keys or values)",
        {{"metrics_listen", config.metrics_listen}});
  }
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "none" : out;
}

// SIGHUP: re-reads the configuration and applies what can change at run time.
void Reload(const std::string& config_file, const std::vector<std::string_view>& flags,
            Config& running, HostTier& host, const ReloadTargets& listeners, Metrics& metrics) {
  NotifyReloading();
  Config next;
  if (Status s = LoadConfig(config_file, flags, next); !s.ok()) {
    Log(LogLevel::kError, "config reload failed; keeping the running configuration",
        {{"file", config_file}, {"error", s.message()}});
    metrics.OnReload(false);
  } else {
    const ReloadResult r = ApplyReload(next, running, host, listeners);
    Log(LogLevel::kInfo, "config reloaded",
        {{"file", config_file.empty() ? "(none: flags only)" : config_file},
         {"applied", Join(r.applied)},
         {"restart_needed", Join(r.restart_needed)}});
    metrics.OnReload(true);
  }
  NotifyReady("serving");
}

}  // namespace

int DaemonMain(int argc, char** argv) {
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
  // Values are large and churned by eviction. Serve them from the heap instead of fresh mmaps and
  // keep freed memory instead of trimming it: faulting pages back in costs ~0.5 ms per MiB on
  // the dev VM (docs/benchmarks.md), and the host tier's capacity bounds the heap anyway.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<std::uint64_t>(config.host.capacity_bytes,
                                                                    1u << 30)));
  std::error_code fs_ec;
  std::filesystem::create_directories(config.data_dir, fs_ec);
  if (fs_ec) return Fail(1, "data_dir " + config.data_dir + ": " + fs_ec.message());

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
      Log(LogLevel::kError, "cannot start", {{"error", auth.status().message()}});
      return Fail(1, auth.status().message());
    }
    config.server.auth = std::move(*auth);
    Log(LogLevel::kInfo, "authentication on",
        {{"token_file", config.auth_token_file},
         {"tokens", std::to_string(config.server.auth->size())}});
  }
  WarnExposedListeners(config);
  Metrics metrics(kVersion);
  HostTier host(config.host);
  std::unique_ptr<SsdTier> ssd;
  if (!config.ssd.dir.empty()) {
    auto opened = SsdTier::Open(config.ssd);
    if (!opened.ok()) {
      Log(LogLevel::kError, "cannot start", {{"error", opened.status().message()}});
      return Fail(1, opened.status().message());
    }
    ssd = std::move(*opened);
  }
  if (config.host.shared_memory) {
    // Under write-back, evicted values keep their arena ranges until the SSD has them.
    const std::uint64_t headroom =
        ssd != nullptr && config.ssd.write_policy == SsdWritePolicy::kWriteBack
            ? config.ssd.write_buffer_bytes
            : 0;
    if (Status s = host.EnableSharedArena(headroom); !s.ok()) {
      Log(LogLevel::kError, "cannot start", {{"error", s.message()}});
      return Fail(1, "host.shared_memory: " + s.message());
    }
  }
  Store store(host, ssd.get());
  // The GPU tier: only when asked for; asking without CUDA or without a GPU is an error.
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
                              std::to_string(config.gpu_device) + ": " +
                              created.status().message();
      Log(LogLevel::kError, "cannot start", {{"error", why}});
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
    Log(LogLevel::kInfo, "gpu tier on", {{"device", DescribeGpu(device)},
                                         {"gpu_capacity", std::to_string(config.gpu_capacity)}});
  } else {
    // Not probed: touching CUDA would create a context (device memory) for nothing.
    Log(LogLevel::kInfo, "gpu tier off (gpu.capacity 0): serving host + SSD tiers");
  }
#else
  if (config.gpu_capacity > 0) {
    const std::string why = "gpu.capacity is " + std::to_string(config.gpu_capacity) +
                            " but this kvdepotd was built without CUDA (-DKVDEPOT_CUDA=ON)";
    Log(LogLevel::kError, "cannot start", {{"error", why}});
    return Fail(1, why);
  }
  Log(LogLevel::kInfo, "gpu tier off: built without CUDA; serving host + SSD tiers");
#endif
  // Without a metrics endpoint nobody reads the per-request metrics: the server skips them.
  Server server(config.server, store, config.metrics_listen.empty() ? nullptr : &metrics,
                std::move(hooks));
  metrics.AddTier("host", [&host, &ssd] {
    TierStats t = ToTierStats(host.stats());
    if (ssd) {
      const SsdTierStats d = ssd->stats();
      t.demotions = d.demotions;
      t.promotions = d.promotions;
    }
    return t;
  });
  if (gpu) {
    metrics.AddTier("gpu", [&gpu] {
      const DeviceTierStats g = gpu->stats();
      TierStats t;
      t.bytes = g.bytes;
      t.capacity = g.capacity;
      t.chunks = g.chunks;
      t.hits = g.hits;
      t.misses = g.misses;
      t.evictions = g.evictions;
      t.promotions = g.promotions;
      return t;
    });
  }
  if (ssd) {
    metrics.AddTier("ssd", [&ssd] { return ToTierStats(ssd->stats()); });
    metrics.SetSsdSource([&ssd] { return ssd->stats(); });
  }
  metrics.SetServerSource([&server] { return server.stats(); });
  if (Status s = server.Start(); !s.ok()) {
    Log(LogLevel::kError, "cannot start", {{"error", s.message()}});
    return Fail(1, s.message());
  }
  LmServer lm_server(config.lm, store);  // LMCache's lm:// protocol (docs/lmcache.md)
  if (!config.lm.listen.empty()) {
    if (Status s = lm_server.Start(); !s.ok()) {
      Log(LogLevel::kError, "cannot start", {{"error", s.message()}});
      return Fail(1, s.message());
    }
    metrics.SetLmSource([&lm_server] { return lm_server.stats(); });
  }
  // The Redis protocol (docs/resp.md), with the native listener's limits and tokens.
  config.resp.max_value_bytes = config.server.limits.max_value_bytes;
  config.resp.max_key_bytes = config.server.limits.max_key_bytes;
  config.resp.auth = config.server.auth;
  config.resp.version = kVersion;
  RespServer resp_server(config.resp, store);
  if (!config.resp.listen.empty()) {
    if (Status s = resp_server.Start(); !s.ok()) {
      Log(LogLevel::kError, "cannot start", {{"error", s.message()}});
      return Fail(1, s.message());
    }
    metrics.SetRespSource([&resp_server] { return resp_server.stats(); });
  }
  std::unique_ptr<MetricsHttp> http;
  if (!config.metrics_listen.empty()) {
    auto started = MetricsHttp::Start(config.metrics_listen, metrics);
    if (!started.ok()) {
      Log(LogLevel::kError, "cannot start", {{"error", started.status().message()}});
      server.Stop();
      return Fail(1, started.status().message());
    }
    http = std::move(*started);
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
    Log(LogLevel::kInfo, std::string("received ") + (signo == SIGTERM ? "SIGTERM" : "SIGINT") +
                             ": draining in-flight requests");
    resp_server.Stop();
    lm_server.Stop();
    server.Stop();
    if (ssd) ssd->Close();  // completes queued writes; the server has answered every request
  }
  http.reset();  // its sources read the server and the tiers
  const ServerStats st = server.stats();
  Log(LogLevel::kInfo, "stopped after " + std::to_string(st.requests) + " requests",
      {{"requests", std::to_string(st.requests)},
       {"connections", std::to_string(st.connections_total)}});
  return 0;
}

}  // namespace kvdepot::daemon
