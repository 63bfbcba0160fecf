// Start-up probes of what the host and the linked libraries provide. kvdepotd logs the report at
// start and exports it as metrics; the SSD tier picks io_uring or pread/pwrite from it.
//
// Thread-safety: ProbePlatform may be called from any thread; it creates and destroys its own
// resources (an io_uring ring of 4 entries) and touches no shared state.
#pragma once

#include <string>

namespace kvdepot::daemon {

struct PlatformReport {
  // io_uring: a ring could be created and a NOP submitted and completed.
  bool io_uring_available = false;
  std::string io_uring_detail;  // why not, or "ok"
  std::string liburing_version;
  std::string rocksdb_version;
  std::string boost_version;
  std::string kernel_release;
  // True when started by systemd with Type=notify (NOTIFY_SOCKET is set).
  bool systemd_notify = false;
};

PlatformReport ProbePlatform();

// One line per field, "key: value", for logs and `kvdepotd --version`.
std::string FormatPlatformReport(const PlatformReport& report);

}  // namespace kvdepot::daemon
