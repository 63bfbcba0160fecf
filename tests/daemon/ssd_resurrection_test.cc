// No resurrection after a crash (issue 19 §3), for every ssd.durability: a kvdepotd child holds
// values on its SSD tier (write-through), some of them are overwritten and some deleted, and the
// daemon is SIGKILLed right after the last acknowledgement. After the restart a deleted key must
// be absent and an overwritten key must read back its new bytes or nothing, never the old ones.
// Before the fix, under `none` the deletes and overwrites lived only in RocksDB's memtable and
// all of them were undone by the kill.
//
// Then what each setting promises for what had reached the tier (docs/durability.md): keys left
// alone read back; under `sync` the acknowledged overwrites do too; and writes that reached the
// SSD tier (its `writes` counter) survive a kill under every setting.
#include <gtest/gtest.h>

#include "kvdepotd_child.h"

namespace kvdepot {
namespace {
using namespace std::chrono_literals;
using test::KvdepotdChild;
using test::SsdStat;
using test::ValueFor;

constexpr std::size_t kValueBytes = 96 * 1024;
constexpr std::uint32_t kOld = 1, kNew = 2, kLatest = 3;

std::string Key(int i) {
  return "key" + std::to_string(i);
}

// Keys 0-19 and 40-49 are overwritten, 20-29 and 50-59 deleted, 30-39 and 60-69 left alone.
// Keys 0-39 were flushed by a clean shutdown before; 40-69 reached the SSD tier in the last run
// only (RocksDB's log, not its tables).
bool Overwritten(int i) {
  return i < 20 || (i >= 40 && i < 50);
}
bool Deleted(int i) {
  return (i >= 20 && i < 30) || (i >= 50 && i < 60);
}
constexpr int kKeys = 70;

class SsdResurrectionTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> Args() const {
    return {"--ssd-dir",
            (dir_.path() / "ssd").string(),
            "--ssd-durability",
            GetParam(),
            "--ssd-write-policy",
            "write-through",
            "--ssd-capacity",
            "256MiB",
            "--ssd-segment-size",
            "32MiB",
            "--host-capacity",
            "64MiB",
            "--limits-max-value-bytes",
            "1MiB",
            "--io-threads",
            "1"};
  }
  std::unique_ptr<KvdepotdChild> Start() {
    auto d = std::make_unique<KvdepotdChild>(dir_.path(), socket_, Args());
    EXPECT_TRUE(d->WaitReady()) << "kvdepotd did not start; see " << (dir_.path() / "daemon.log");
    return d;
  }
  // Waits (at most 10 s) until the SSD tier has written `n` values since it started.
  static bool WaitForSsdWrites(client::Connection& c, std::uint64_t n) {
    for (int i = 0; i < 1000; ++i) {
      auto stats = c.Stats();
      if (stats.ok() && SsdStat(*stats, "writes") >= n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  static void PutAll(client::Connection& c, int from, int to, std::uint32_t version) {
    for (int i = from; i < to; ++i) {
      ASSERT_TRUE(c.Put(Key(i), ValueFor(Key(i), kValueBytes, version)).ok()) << Key(i);
    }
  }
  // The version `key` reads back as: 0 when absent, -1 when the bytes are no version at all.
  static int VersionOf(client::Connection& c, int i) {
    auto got = c.Get(Key(i));
    EXPECT_TRUE(got.ok()) << Key(i) << ": " << got.status().ToString();
    if (!got.ok() || !got->has_value()) return 0;
    for (std::uint32_t v : {kOld, kNew, kLatest}) {
      if (**got == ValueFor(Key(i), kValueBytes, v)) return static_cast<int>(v);
    }
    return -1;
  }

  test::TempTestDir dir_{"kvdepot-resurrect"};
  std::string socket_ = (dir_.path() / "kvdepot.sock").string();
};

TEST_P(SsdResurrectionTest, DeletesAndOverwritesAreNeverUndoneByAKill) {
  {
    auto d = Start();
    auto c = client::Connection::Connect(d->Options());
    ASSERT_TRUE(c.ok());
    PutAll(**c, 0, 40, kOld);
    ASSERT_TRUE(WaitForSsdWrites(**c, 40));
    ASSERT_TRUE(d->Stop());
  }
  auto d = Start();
  {
    auto c = client::Connection::Connect(d->Options());
    ASSERT_TRUE(c.ok());
    PutAll(**c, 40, kKeys, kOld);
    ASSERT_TRUE(WaitForSsdWrites(**c, 30)) << "keys 40-69 must be on the SSD tier first";
    for (int i = 0; i < kKeys; ++i) {
      if (Overwritten(i)) {
        ASSERT_TRUE((*c)->Put(Key(i), ValueFor(Key(i), kValueBytes, kNew)).ok()) << Key(i);
      }
    }
    std::vector<std::string> doomed;
    for (int i = 0; i < kKeys; ++i) {
      if (Deleted(i)) doomed.push_back(Key(i));
    }
    auto deleted = (*c)->Delete(doomed);
    ASSERT_TRUE(deleted.ok());
    for (StatusCode code : *deleted) ASSERT_EQ(code, StatusCode::kOk);
  }
  d->Kill();  // right after the last acknowledgement

  d = Start();
  auto c = client::Connection::Connect(d->Options());
  ASSERT_TRUE(c.ok());
  int overwritten_new = 0;
  for (int i = 0; i < kKeys; ++i) {
    const int v = VersionOf(**c, i);
    ASSERT_NE(v, -1) << Key(i) << " reads back bytes that were never put";
    if (Deleted(i)) {
      EXPECT_EQ(v, 0) << Key(i) << ": deleted before the kill, back after it";
    } else if (Overwritten(i)) {
      EXPECT_NE(v, static_cast<int>(kOld)) << Key(i)
                                           << ": overwritten before the kill, its old "
                                              "bytes are back after it";
      overwritten_new += v == static_cast<int>(kNew);
      if (GetParam() == "sync") {
        EXPECT_EQ(v, static_cast<int>(kNew)) << Key(i) << ": an acknowledged sync overwrite lost";
      }
    } else {
      EXPECT_EQ(v, static_cast<int>(kOld)) << Key(i) << ": left alone, lost by the kill";
    }
  }
  std::printf("durability %s: %d of 30 acknowledged overwrites survived the immediate kill\n",
              GetParam().c_str(), overwritten_new);

  // Writes that reached the SSD tier survive a kill under every setting.
  PutAll(**c, 0, 10, kLatest);
  ASSERT_TRUE(WaitForSsdWrites(**c, 10));
  d->Kill();
  d = Start();
  c = client::Connection::Connect(d->Options());
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(VersionOf(**c, i), static_cast<int>(kLatest)) << Key(i);
}

INSTANTIATE_TEST_SUITE_P(Durability, SsdResurrectionTest,
                         ::testing::Values("none", "async", "sync"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace kvdepot
