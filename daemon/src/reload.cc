#include "kvdepot/daemon/reload.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kvdepot/base/hex.h"
#include "kvdepot/daemon/log.h"

namespace kvdepot::daemon {
namespace {

constexpr std::string_view kQuotaPrefix = "host.quotas.";

std::map<std::string, std::string> Entries(const Config& c) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : ConfigEntries(c)) out.emplace(std::move(k), std::move(v));
  return out;
}

}  // namespace

ReloadResult ApplyReload(const Config& next, Config& running, HostTier& host,
                         const ReloadTargets& listeners) {
  ReloadResult result;
  const auto before = Entries(running);
  const auto after = Entries(next);
  const auto value = [](const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("(none)") : it->second;
  };
  for (const std::string& key : ChangedKeys(running, next)) {
    const std::string from = value(before, key);
    const std::string to = value(after, key);
    if (key == "log_level") {
      SetLogLevel(next.log_level);
      running.log_level = next.log_level;
      Log(LogLevel::kInfo, "log level changed", {{"from", from}, {"to", to}});
      result.applied.push_back(key);
      continue;
    }
    if (key == "host.capacity") {
      auto evicted = host.SetCapacity(next.host.capacity_bytes);
      if (evicted.ok()) {
        running.host.capacity_bytes = next.host.capacity_bytes;
        Log(LogLevel::kInfo, "host tier capacity changed",
            {{"tier", "host"}, {"from", from}, {"to", to}, {"evicted", std::to_string(*evicted)}});
        result.applied.push_back(key);
        continue;
      }
    }
    if (key == "limits.request_timeout" || key == "limits.idle_timeout") {
      // One key for every listener (config.cc sets server, lm and resp alike); each listener's
      // watchdogs read the pair at their next tick.
      running.server.request_timeout = running.lm.request_timeout = next.server.request_timeout;
      running.server.idle_timeout = running.lm.idle_timeout = next.server.idle_timeout;
      std::string reached;
      if (listeners.server != nullptr) {
        listeners.server->SetTimeouts(running.server.request_timeout, running.server.idle_timeout);
        reached = "native";
      }
      if (listeners.lm != nullptr) {
        listeners.lm->SetTimeouts(running.lm.request_timeout, running.lm.idle_timeout);
        reached += reached.empty() ? "lm" : ",lm";
      }
      running.resp.request_timeout = next.server.request_timeout;
      running.resp.idle_timeout = next.server.idle_timeout;
      if (listeners.resp != nullptr) {
        listeners.resp->SetTimeouts(running.resp.request_timeout, running.resp.idle_timeout);
        reached += reached.empty() ? "resp" : ",resp";
      }
      Log(LogLevel::kInfo, "connection timeout changed",
          {{"key", key},
           {"from", from},
           {"to", to},
           {"listeners", reached.empty() ? "none" : reached},
           {"connections", "new and open"}});
      result.applied.push_back(key);
      continue;
    }
    if (key == "ssd.flush_on_shutdown" || key == "ssd.flush_budget") {
      // Read only at shutdown, so the next stop uses them (e.g. a longer budget before a restart).
      running.ssd.flush_on_shutdown = next.ssd.flush_on_shutdown;
      running.ssd.flush_budget = next.ssd.flush_budget;
      Log(LogLevel::kInfo, "shutdown flush setting changed",
          {{"key", key}, {"from", from}, {"to", to}});
      result.applied.push_back(key);
      continue;
    }
    if (key.rfind(kQuotaPrefix, 0) == 0 && before.count(key) != 0 && after.count(key) != 0) {
      // ConfigEntries wrote the quota key's namespace id with HexLower.
      const std::string id =
          HexDecode(std::string_view(key).substr(kQuotaPrefix.size())).value_or(std::string());
      const std::uint64_t bytes = next.host.namespace_quotas.at(id);
      auto evicted = host.SetNamespaceQuota(id, bytes);
      if (evicted.ok()) {
        running.host.namespace_quotas[id] = bytes;
        Log(LogLevel::kInfo, "namespace quota changed",
            {{"tier", "host"},
             {"key", key},
             {"from", from},
             {"to", to},
             {"evicted", std::to_string(*evicted)}});
        result.applied.push_back(key);
        continue;
      }
    }
    Log(LogLevel::kWarn, "config change needs a restart; keeping the running value",
        {{"key", key}, {"running", from}, {"configured", to}});
    result.restart_needed.push_back(key);
  }
  return result;
}

}  // namespace kvdepot::daemon
