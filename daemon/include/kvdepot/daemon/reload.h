// Applying a re-read configuration to a running daemon (SIGHUP).
//
// What changes at run time: log_level, host.capacity (the host tier evicts down to a lowered
// capacity) and the quotas of namespaces that already have one. Everything else (listen
// addresses, threads, data_dir, limits, the eviction policy, adding or removing a quota) needs a
// restart: the running value is kept and the key is reported.
//
// Thread-safety: call from the controlling thread only (one reload at a time); the host tier's
// setters it uses are thread-safe against the I/O threads.
#pragma once

#include <string>
#include <vector>

#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"

namespace kvdepot::daemon {

struct ReloadResult {
  std::vector<std::string> applied;         // keys now in effect
  std::vector<std::string> restart_needed;  // keys that changed but keep their running value
};

// Applies what can change of `next` (a validated configuration) and updates `running` to what is
// now in effect. Logs one line per applied change (capacity changes with the entries evicted)
// and one warning per key that needs a restart.
ReloadResult ApplyReload(const Config& next, Config& running, HostTier& host);

}  // namespace kvdepot::daemon
