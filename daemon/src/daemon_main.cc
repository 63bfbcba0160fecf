#include "kvdepot/daemon/daemon_main.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/platform_probe.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

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
  std::printf("\nSIGTERM or SIGINT: stop accepting, finish in-flight requests, exit 0.\n");
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "kvdepotd: error: %s\n", message.c_str());
  return code;
}

}  // namespace

int DaemonMain(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  Config config;
  std::string config_file;
  bool check_only = false;
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
    }
  }
  if (!config_file.empty()) {
    if (Status s = ApplyConfigFile(config_file, config); !s.ok()) return Fail(2, s.message());
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--config" || a == "--check-config") {
      ++i;
      continue;
    }
    if (a.substr(0, 2) != "--") return Fail(2, "unexpected argument '" + std::string(a) + "'");
    a.remove_prefix(2);
    std::string_view value;
    if (const auto eq = a.find('='); eq != std::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Fail(2, "flag --" + std::string(a) + " needs a value");
    }
    if (Status s = ApplyConfigFlag(a, value, config); !s.ok()) return Fail(2, s.message());
  }
  if (Status s = ValidateConfig(config); !s.ok()) {
    return Fail(2, (config_file.empty() ? "" : config_file + ": ") + s.message());
  }
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

  // Block the stop signals in every thread; the main thread waits for them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const PlatformReport platform = ProbePlatform();
  Log(LogLevel::kInfo, std::string("kvdepotd ") + kVersion + " starting; io_uring " +
                           (platform.io_uring_available ? "available" : "unavailable (" +
                                                                         platform.io_uring_detail +
                                                                         ")") +
                           ", rocksdb " + platform.rocksdb_version);
  HostTier host(config.host);
  Store store(host, nullptr);
  Server server(config.server, store);
  if (Status s = server.Start(); !s.ok()) return Fail(1, s.message());
  LmServer lm_server(config.lm, store);  // LMCache's lm:// protocol (docs/lmcache.md)
  if (!config.lm.listen.empty()) {
    if (Status s = lm_server.Start(); !s.ok()) return Fail(1, s.message());
  }
  std::string where;
  if (!config.server.listen.empty()) {
    const auto colon = config.server.listen.rfind(':');
    where = config.server.listen.substr(0, colon) + ":" + std::to_string(server.tcp_port());
  }
  if (!config.server.unix_path.empty()) {
    where += (where.empty() ? "unix:" : " and unix:") + config.server.unix_path;
  }
  Log(LogLevel::kInfo, "listening on " + where + "; host tier " +
                           std::to_string(config.host.capacity_bytes >> 20) + " MiB (" +
                           std::string(EvictionPolicyName(config.host.policy)) + "), " +
                           std::to_string(config.server.io_threads) + " I/O threads");
  if (!config.lm.listen.empty()) {
    Log(LogLevel::kInfo, "lm:// (LMCache protocol) on " +
                             config.lm.listen.substr(0, config.lm.listen.rfind(':')) + ":" +
                             std::to_string(lm_server.port()));
  }
  int signo = 0;
  sigwait(&stop_signals, &signo);
  Log(LogLevel::kInfo, std::string("received ") + (signo == SIGTERM ? "SIGTERM" : "SIGINT") +
                           ": draining in-flight requests");
  lm_server.Stop();
  server.Stop();
  const ServerStats st = server.stats();
  Log(LogLevel::kInfo, "stopped after " + std::to_string(st.requests) + " requests");
  return 0;
}

}  // namespace kvdepot::daemon
