// Applying a re-read configuration to a running daemon (SIGHUP).
//
// What changes at run time: log_level, host.capacity (the host tier evicts down to a lowered
// capacity), the quotas of namespaces that already have one, and limits.request_timeout and
// limits.idle_timeout (every listener, new and open connections, within a watchdog tick).
// Everything else (listen addresses, threads, data_dir, the other limits, the eviction policy,
// adding or removing a quota) needs a restart: the running value is kept and the key is
// reported.
//
// Thread-safety: call from the controlling thread only (one reload at a time); the host tier's
// and the listeners' setters it uses are thread-safe against the I/O threads.
#pragma once

#include <string>
#include <vector>

#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"

namespace kvdepot::daemon {

struct ReloadResult {
  std::vector<std::string> applied;         // keys now in effect
  std::vector<std::string> restart_needed;  // keys that changed but keep their running value
};

// The running listeners a reload applies connection timeouts to (null: none of that kind; a
// listener that was never started may be given too).
struct ReloadTargets {
  Server* server = nullptr;
  LmServer* lm = nullptr;
  RespServer* resp = nullptr;
};

// Applies what can change of `next` (a validated configuration) and updates `running` to what is
// now in effect. Logs one line per applied change (capacity changes with the entries evicted,
// timeout changes with the listeners they reached) and one warning per key that needs a restart.
ReloadResult ApplyReload(const Config& next, Config& running, HostTier& host,
                         const ReloadTargets& listeners = {});

}  // namespace kvdepot::daemon
