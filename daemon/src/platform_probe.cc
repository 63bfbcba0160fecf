#include "kvdepot/daemon/platform_probe.h"

#include <liburing.h>
#include <rocksdb/version.h>
#include <sys/utsname.h>

#include <boost/version.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {
namespace {

// Creates a small ring and round-trips one NOP through it.
void ProbeIoUring(PlatformReport& report) {
  io_uring ring{};
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    report.io_uring_detail = StatusFromErrno(-rc, "io_uring_queue_init").message();
    return;
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (sqe == nullptr) {
    report.io_uring_detail = "io_uring_get_sqe returned no entry";
    io_uring_queue_exit(&ring);
    return;
  }
  io_uring_prep_nop(sqe);
  io_uring_cqe* cqe = nullptr;
  int wait_rc = io_uring_submit(&ring);
  if (wait_rc >= 0) wait_rc = io_uring_wait_cqe(&ring, &cqe);
  if (wait_rc < 0) {
    report.io_uring_detail = StatusFromErrno(-wait_rc, "io_uring NOP").message();
  } else if (cqe->res < 0) {
    report.io_uring_detail = StatusFromErrno(-cqe->res, "io_uring NOP completion").message();
  } else {
    report.io_uring_available = true;
    report.io_uring_detail = "ok";
  }
  if (cqe != nullptr) io_uring_cqe_seen(&ring, cqe);
  io_uring_queue_exit(&ring);
}

}  // namespace

PlatformReport ProbePlatform() {
  PlatformReport report;
  ProbeIoUring(report);
  report.liburing_version = KVDEPOT_LIBURING_VERSION;  // from pkg-config at build time
  report.rocksdb_version = std::to_string(ROCKSDB_MAJOR) + "." + std::to_string(ROCKSDB_MINOR) +
                           "." + std::to_string(ROCKSDB_PATCH);
  report.boost_version = std::to_string(BOOST_VERSION / 100000) + "." +
                         std::to_string(BOOST_VERSION / 100 % 1000) + "." +
                         std::to_string(BOOST_VERSION % 100);
  utsname uts{};
  if (uname(&uts) == 0) report.kernel_release = uts.release;
  report.systemd_notify = std::getenv("NOTIFY_SOCKET") != nullptr;
  return report;
}

std::string FormatPlatformReport(const PlatformReport& r) {
  std::string out;
  out += "io_uring: " + std::string(r.io_uring_available ? "available" : "unavailable") + " (" +
         r.io_uring_detail + ")\n";
  out += "liburing: " + r.liburing_version + "\n";
  out += "rocksdb: " + r.rocksdb_version + "\n";
  out += "boost: " + r.boost_version + "\n";
  out += "kernel: " + r.kernel_release + "\n";
  out += "systemd notify: " + std::string(r.systemd_notify ? "yes" : "no") + "\n";
  return out;
}

}  // namespace kvdepot::daemon
