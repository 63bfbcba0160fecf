// kvdepot_shm_bench: host-tier shared-memory GET (MAP + LEASE_GET, read in place, RELEASE) against
// memcpy of the same bytes (the ceiling) and against GET over the Unix socket and TCP, through an
// in-process kvdepotd Server. Each variant copies every value into one destination buffer (what
// an engine does with fetched bytes). docs/benchmarks.md records the results.
//
//   kvdepot_shm_bench [--value-size BYTES] [--values N] [--batch K] [--seconds S]
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"

using namespace kvdepot;

namespace {

double Run(double seconds, std::uint64_t bytes_per_iter, const std::function<bool()>& iter) {
  for (int i = 0; i < 3; ++i) iter();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t bytes = 0;
  double elapsed = 0;
  do {
    if (!iter()) {
      std::fprintf(stderr, "error\n");
      std::exit(1);
    }
    bytes += bytes_per_iter;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  return static_cast<double>(bytes) / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t value_size = 1 << 20;
  std::uint32_t values = 64, batch = 16;
  double seconds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--value-size")
      value_size = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--values")
      values = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else if (a == "--batch")
      batch = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--value-size B] [--values N] [--batch K] [--seconds S]\n",
                   argv[0]);
      return 64;
    }
  }
  const std::string sock = (std::filesystem::temp_directory_path() /
                            ("kvdepot-shm-bench-" + std::to_string(::getpid()) + ".sock"))
                               .string();
  daemon::HostTier host(daemon::HostTierOptions::With(
      values * daemon::HostTier::ChargeFor(16, value_size) * 2, daemon::EvictionPolicy::kLru));
  if (!host.EnableSharedArena().ok()) return 1;
  daemon::Store store(host, nullptr);
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.unix_path = sock;
  o.io_threads = 1;
  o.max_lease_bytes = 1ull << 40;
  daemon::Server server(o, store);
  if (!server.Start().ok()) return 1;

  client::ClientOptions uo;
  uo.address = "unix:" + sock;
  client::ClientOptions to;
  to.address = "127.0.0.1:" + std::to_string(server.tcp_port());
  auto unix_r = client::Connection::Connect(uo);
  auto tcp_r = client::Connection::Connect(to);
  if (!unix_r.ok() || !tcp_r.ok()) return 1;
  std::unique_ptr<client::Connection> unix_conn = std::move(*unix_r);
  std::unique_ptr<client::Connection> tcp_conn = std::move(*tcp_r);
  std::vector<std::string> keys;
  std::vector<std::byte> value(value_size);
  for (std::uint32_t i = 0; i < values; ++i) {
    keys.push_back("bench-key-" + std::to_string(i));
    std::memset(value.data(), static_cast<int>(i), value.size());
    if (!unix_conn->Put(keys.back(), value).ok()) return 1;
  }
  auto arena_r = client::SharedArena::Map(*unix_conn);
  if (!arena_r.ok()) return 1;
  std::unique_ptr<client::SharedArena> arena = std::move(*arena_r);
  std::vector<std::byte> dest(value_size * batch);
  std::vector<std::byte> src(value_size * values);
  std::memset(src.data(), 1, src.size());
  const std::uint64_t per_iter = value_size * batch;
  std::uint32_t cursor = 0;
  auto next_batch = [&] {
    std::vector<std::string> b;
    for (std::uint32_t i = 0; i < batch; ++i) b.push_back(keys[(cursor + i) % values]);
    cursor = (cursor + batch) % values;
    return b;
  };

  const double memcpy_gbs = Run(seconds, per_iter, [&] {
    for (std::uint32_t i = 0; i < batch; ++i) {
      std::memcpy(dest.data() + i * value_size, src.data() + ((cursor + i) % values) * value_size,
                  value_size);
    }
    cursor = (cursor + batch) % values;
    return true;
  });
  const double shm_gbs = Run(seconds, per_iter, [&] {
    auto leases = unix_conn->LeaseGet(next_batch());
    if (!leases.ok()) return false;
    std::vector<std::uint64_t> ids;
    for (std::size_t i = 0; i < leases->size(); ++i) {
      auto view = arena->View((*leases)[i]);
      if (!view.ok()) return false;
      std::memcpy(dest.data() + i * value_size, view->data(), view->size());
      ids.push_back((*leases)[i].lease_id);
    }
    return unix_conn->Release(ids).ok();
  });
  auto socket_get = [&](client::Connection& c) {
    return [&] {
      std::size_t i = 0;
      return c
          .Get(next_batch(),
               [&](const client::GetItem& item) {
                 std::memcpy(dest.data() + (i++) * value_size, item.value.data(),
                             item.value.size());
               })
          .ok();
    };
  };
  const double unix_gbs = Run(seconds, per_iter, socket_get(*unix_conn));
  const double tcp_gbs = Run(seconds, per_iter, socket_get(*tcp_conn));
  server.Stop();
  std::printf("value %llu B, batch %u keys, %u values (%llu MiB working set)\n",
              static_cast<unsigned long long>(value_size), batch, values,
              static_cast<unsigned long long>(value_size * values >> 20));
  std::printf("%-28s %8s %10s\n", "variant", "GB/s", "of memcpy");
  auto row = [&](const char* name, double g) {
    std::printf("%-28s %8.2f %9.0f%%\n", name, g, 100 * g / memcpy_gbs);
  };
  row("memcpy (ceiling)", memcpy_gbs);
  row("shm lease+copy+release", shm_gbs);
  row("GET over Unix socket", unix_gbs);
  row("GET over TCP loopback", tcp_gbs);
  return 0;
}
