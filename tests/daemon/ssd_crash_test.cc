// Crash safety of the SSD tier, end to end: kvdepotd runs as a child process with
// `ssd.durability: sync` under a mixed PUT/GET load and is SIGKILLed at a random moment, then
// restarted, many times. Every PUT the daemon acknowledged must read back byte-exact after the
// restart, and no GET — during the load or after — may ever return bytes other than the ones put.
//
// Values are a pure function of their key, so any served value can be checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <set>

#include "kvdepotd_child.h"

namespace kvdepot {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::size_t kMaxValueBytes = 4096 + 192 * 1024;

std::vector<std::byte> ValueFor(const std::string& key) {
  return test::ValueFor(key, kMaxValueBytes);
}

class Daemon : public test::KvdepotdChild {
 public:
  Daemon(const fs::path& dir, const std::string& socket)
      : KvdepotdChild(dir, socket,
                      {"--ssd-dir", (dir / "ssd").string(), "--ssd-durability", "sync",
                       "--ssd-capacity", "1GiB", "--ssd-segment-size", "8MiB", "--host-capacity",
                       "4MiB", "--limits-max-value-bytes", "1MiB", "--io-threads", "2"}) {}
};

TEST(SsdCrashTest, AcknowledgedSyncPutsSurviveSigkillAndNothingCorruptIsServed) {
  const fs::path dir = fs::temp_directory_path() / ("kvdepot-crash-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string socket = (dir / "kvdepot.sock").string();
  std::mt19937_64 rng(20261130);
  std::set<std::string> acknowledged;  // every key whose PUT was acknowledged, in any cycle
  std::vector<std::string> last_cycle;
  std::atomic<int> corrupt{0};
  constexpr int kCycles = 20;
  std::uint64_t acked_total = 0;
  std::atomic<std::uint64_t> gets_checked{0};

  for (int cycle = 0; cycle < kCycles; ++cycle) {
    Daemon daemon(dir, socket);
    ASSERT_TRUE(daemon.WaitReady())
        << "cycle " << cycle << ": kvdepotd did not start; see " << (dir / "daemon.log");
    // After the restart: what the last cycle acknowledged, and a sample of older keys, read back
    // exactly (every key is checked after the last cycle).
    {
      std::vector<std::string> check = last_cycle;
      std::sample(acknowledged.begin(), acknowledged.end(), std::back_inserter(check), 100, rng);
      client::ClientOptions o;
      o.address = "unix:" + socket;
      o.timeout = 10000ms;
      auto c = client::Connection::Connect(o);
      ASSERT_TRUE(c.ok());
      for (const std::string& key : check) {
        auto got = (*c)->Get(key);
        ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
        ASSERT_TRUE(got->has_value())
            << "cycle " << cycle << ": acknowledged key " << key << " lost across SIGKILL";
        ASSERT_TRUE(**got == ValueFor(key))
            << "cycle " << cycle << ": key " << key << " reads back different bytes";
      }
    }
    // Load: writers PUT fresh and old keys, readers GET random ones, until the kill.
    std::mutex mu;
    std::vector<std::string> acked_now;
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    const std::vector<std::string> old(acknowledged.begin(), acknowledged.end());
    for (int w = 0; w < 4; ++w) {
      workers.emplace_back([&, w] {
        client::ClientOptions o;
        o.address = "unix:" + socket;
        o.timeout = 5000ms;
        auto c = client::Connection::Connect(o);
        if (!c.ok()) return;
        std::mt19937_64 local(cycle * 100 + w);
        for (int i = 0; !stop; ++i) {
          if (w < 2) {
            // Mostly fresh keys; every fourth PUT overwrites an older acknowledged key (same
            // bytes): a crash before that PUT is acknowledged must keep the older copy.
            std::string key =
                "c" + std::to_string(cycle) + "w" + std::to_string(w) + "i" + std::to_string(i);
            const bool fresh = i % 4 != 3 || old.empty();
            if (!fresh) key = old[local() % old.size()];
            if (!(*c)->Put(key, ValueFor(key)).ok()) return;  // the daemon died
            if (!fresh) continue;                             // already in `acknowledged`
            std::lock_guard lock(mu);
            acked_now.push_back(key);
          } else {
            std::string key;
            {
              std::lock_guard lock(mu);
              if (!acked_now.empty() && (local() & 1)) {
                key = acked_now[local() % acked_now.size()];
              } else if (!old.empty()) {
                key = old[local() % old.size()];
              }
            }
            if (key.empty()) continue;
            auto got = (*c)->Get(key);
            if (!got.ok()) return;
            if (got->has_value() && **got != ValueFor(key)) ++corrupt;
            ++gets_checked;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 350));
    daemon.Kill();
    stop = true;
    for (auto& t : workers) t.join();
    ASSERT_EQ(corrupt.load(), 0) << "a GET returned bytes that were never put";
    acknowledged.insert(acked_now.begin(), acked_now.end());
    last_cycle = acked_now;
    acked_total += acked_now.size();
  }
  // A last restart checks the final cycle's acknowledgements.
  Daemon daemon(dir, socket);
  ASSERT_TRUE(daemon.WaitReady());
  client::ClientOptions o;
  o.address = "unix:" + socket;
  auto c = client::Connection::Connect(o);
  ASSERT_TRUE(c.ok());
  for (const std::string& key : acknowledged) {
    auto got = (*c)->Get(key);
    ASSERT_TRUE(got.ok() && got->has_value() && **got == ValueFor(key)) << key;
  }
  std::printf(
      "%d SIGKILL cycles: %llu acknowledged PUTs all read back; %llu GETs during load "
      "checked\n",
      kCycles, static_cast<unsigned long long>(acked_total),
      static_cast<unsigned long long>(gets_checked.load()));
  EXPECT_GT(acked_total, 100u) << "too little load to mean anything";
  daemon.Kill();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvdepot
