// SSD-tier throughput and SSD-hit latency, in process (no network), for comparison with fio on
// the same file system (scripts/bench-ssd.sh runs both; docs/benchmarks.md records them).
//
//   kvdepot_ssd_bench DIR [--chunk-mib 4] [--total-mib 2048] [--io auto|io_uring|pread]
//                         [--durability none|async|sync] [--reads-in-flight 8] [--write-only 1]
//
// write: --total-mib of chunks queued to the tier as fast as it takes them (its writer keeps a
//   window of up to 64 records / 64 MiB in flight), timed until all are indexed;
// read: every chunk read back through Store::Get (host miss -> SSD read -> checksum verify), with
//   --reads-in-flight reads outstanding, without promotion (buffers are recycled);
// latency: single SSD-hit GETs one at a time (p50/p99), i.e. what a GET adds when it misses the
//   host tier.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: kvdepot_ssd_bench DIR [--chunk-mib N] [--total-mib N] [--io P] "
                 "[--durability D] [--reads-in-flight N] [--write-only 1]\n");
    return 2;
  }
  SsdTierOptions o;
  o.dir = std::string(argv[1]) + "/kvdepot-ssd-bench";
  std::uint64_t chunk_mib = 4, total_mib = 2048, in_flight = 8, write_only = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--chunk-mib") {
      chunk_mib = std::stoull(value);
    } else if (flag == "--total-mib") {
      total_mib = std::stoull(value);
    } else if (flag == "--reads-in-flight") {
      in_flight = std::stoull(value);
    } else if (flag == "--write-only") {
      write_only = std::stoull(value);
    } else if (flag == "--io" && ParseSsdIoPath(value).ok()) {
      o.io_path = *ParseSsdIoPath(value);
    } else if (flag == "--durability" && ParseSsdDurability(value).ok()) {
      o.durability = *ParseSsdDurability(value);
    } else {
      std::fprintf(stderr, "unknown flag or value: %s %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  std::filesystem::remove_all(o.dir);
  const std::size_t chunk = chunk_mib << 20;
  const std::size_t count = std::max<std::uint64_t>(total_mib / chunk_mib, 1);
  o.capacity_bytes = (total_mib + 2 * 256) << 20;
  // Reads do not promote: their buffers go back to the heap and are reused, as in a daemon whose
  // host tier is full (fio, too, reads into buffers it reuses). Promoting every read into a
  // growing host tier would time first-touch page faults (~0.5 ms per MiB here), not the tier.
  o.promotion = SsdPromotion::kNever;
  o.segment_bytes = 256ull << 20;
  auto opened = SsdTier::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  SsdTier& ssd = **opened;
  // Enough host memory for the values being written plus the reads in flight.
  HostTier host(HostTierOptions::With((count + in_flight + 4) * (chunk + (1 << 20))));
  Store store(host, &ssd);

  std::vector<std::shared_ptr<Value>> values;
  std::mt19937_64 rng(1);
  for (std::size_t i = 0; i < count; ++i) {
    auto v = host.Allocate("chunk" + std::to_string(i), chunk);
    if (!v.ok()) return 1;
    auto bytes = (*v)->mutable_bytes();
    for (std::size_t j = 0; j + 8 <= bytes.size(); j += 8) {
      const std::uint64_t w = rng();
      std::memcpy(bytes.data() + j, &w, 8);
    }
    values.push_back(std::move(*v));
  }

  // Write.
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0, failed = 0;
  const auto w0 = Clock::now();
  for (std::size_t i = 0; i < count; ++i) {
    ssd.Write("chunk" + std::to_string(i), values[i], [&](Status s) {
      std::lock_guard lock(mu);
      ++done;
      failed += !s.ok();
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == count; });
  }
  const double write_s = Seconds(w0, Clock::now());
  values.clear();
  if (failed) std::fprintf(stderr, "%zu writes failed\n", failed);
  const double mb = static_cast<double>(count * chunk) / 1e6;
  const SsdTierStats st = ssd.stats();
  std::printf("ssd tier (%s, durability %s, O_DIRECT %s): %zu chunks of %llu MiB\n",
              st.io_path.c_str(), std::string(SsdDurabilityName(o.durability)).c_str(),
              st.direct_io ? "on" : "off", count, static_cast<unsigned long long>(chunk_mib));
  std::printf("  write  %8.0f MB/s\n", mb / write_s);
  std::fflush(stdout);
  if (write_only != 0) {
    ssd.Close();
    std::filesystem::remove_all(o.dir);
    return failed == 0 ? 0 : 1;
  }

  // Read through the Store (host misses: nothing was inserted there), `in_flight` at a time.
  std::size_t issued = 0, completed = 0, bad = 0;
  const auto r0 = Clock::now();
  std::function<void()> issue = [&] {
    const std::size_t i = issued++;
    store.Get("chunk" + std::to_string(i), [&](Result<Found> r) {
      std::lock_guard lock(mu);
      bad += !r.ok() || r->tier != protocol::Tier::kSsd || r->value->bytes().size() != chunk;
      ++completed;
      cv.notify_all();
    });
  };
  {
    std::unique_lock lock(mu);
    while (completed < count) {
      while (issued < count && issued - completed < in_flight) {
        lock.unlock();
        issue();
        lock.lock();
      }
      cv.wait(lock, [&] {
        return completed == count || (issued < count && issued - completed < in_flight);
      });
    }
  }
  const double read_s = Seconds(r0, Clock::now());

  // Latency: one GET at a time.
  std::vector<double> lat_us;
  for (std::size_t i = 0; i < std::min<std::size_t>(count, 200); ++i) {
    const std::string key = "chunk" + std::to_string(i);
    const auto t0 = Clock::now();
    std::promise<void> p;
    store.Get(key, [&](Result<Found>) { p.set_value(); });
    p.get_future().get();
    lat_us.push_back(Seconds(t0, Clock::now()) * 1e6);
  }
  std::sort(lat_us.begin(), lat_us.end());
  std::printf("  read   %8.0f MB/s (%llu in flight, checksum verified, %zu bad)\n", mb / read_s,
              static_cast<unsigned long long>(in_flight), bad);
  std::printf("  SSD-hit GET latency: p50 %.0f us, p99 %.0f us (%zu GETs)\n",
              lat_us[lat_us.size() / 2], lat_us[lat_us.size() * 99 / 100], lat_us.size());
  ssd.Close();
  std::filesystem::remove_all(o.dir);
  return bad == 0 && failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvdepot::daemon

int main(int argc, char** argv) {
  return kvdepot::daemon::Main(argc, argv);
}
