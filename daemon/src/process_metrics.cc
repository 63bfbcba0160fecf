#include "process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace kvdepot::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

void AddFamily(std::vector<MetricFamily>& out, const char* name, const char* help, MetricType type,
               double value) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  ClientMetric m;
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  out.push_back(std::move(f));
}

// The fields of /proc/self/stat after the command name (field 3, "state", is fields[0]).
std::optional<std::vector<std::string>> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  if (fields.size() < 22) return std::nullopt;
  return fields;
}

// The system's boot time (btime in /proc/stat), in seconds since the epoch.
std::optional<double> BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return std::nullopt;
}

std::optional<double> OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

void CollectProcessMetrics(std::vector<MetricFamily>& out) {
  try {
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (const auto f = StatFields(); f && ticks > 0) {
      // stat(5) numbering: utime 14, stime 15, starttime 22, vsize 23, rss 24; fields[0] is 3.
      const auto field = [&](int n) { return std::stod((*f)[static_cast<std::size_t>(n - 3)]); };
      AddFamily(out, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds",
                MetricType::Counter, (field(14) + field(15)) / ticks);
      AddFamily(out, "process_virtual_memory_bytes", "Virtual memory size in bytes",
                MetricType::Gauge, field(23));
      AddFamily(out, "process_resident_memory_bytes", "Resident memory size in bytes",
                MetricType::Gauge, field(24) * page);
      if (const auto boot = BootTime()) {
        AddFamily(out, "process_start_time_seconds",
                  "Start time of the process since unix epoch in seconds", MetricType::Gauge,
                  *boot + field(22) / ticks);
      }
    }
    if (const auto fds = OpenFds()) {
      AddFamily(out, "process_open_fds", "Number of open file descriptors", MetricType::Gauge,
                *fds);
    }
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
      AddFamily(out, "process_max_fds", "Maximum number of open file descriptors",
                MetricType::Gauge, static_cast<double>(lim.rlim_cur));
    }
  } catch (const std::exception&) {
    // A /proc field that does not parse: those metrics are left out of this scrape.
  }
}

}  // namespace kvdepot::daemon
