// Prometheus's standard process metrics
// (https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics), which
// prometheus-cpp does not provide: read from /proc/self at each scrape.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

namespace kvdepot::daemon {

// Appends process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_start_time_seconds, process_open_fds and process_max_fds
// to `out`. A value that cannot be read (no /proc) is left out; never throws.
void CollectProcessMetrics(std::vector<prometheus::MetricFamily>& out);

}  // namespace kvdepot::daemon
