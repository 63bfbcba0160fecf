// The shutdown flush (warm restarts): what the host tier holds and the SSD tier lacks is written,
// most recently used first, within the time budget and the SSD tier's capacity less a segment,
// and a reopened SSD tier serves it.
#include "kvdepot/daemon/shutdown_flush.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <string>

#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {
namespace {
namespace fs = std::filesystem;

class ShutdownFlushTest : public ::testing::Test {
 protected:
  ShutdownFlushTest()
      : dir_(fs::temp_directory_path() / ("kvdepot-flush-" + std::to_string(::getpid()))),
        host_(HostTierOptions::With(64 << 20)) {
    fs::remove_all(dir_);
  }
  ~ShutdownFlushTest() override { fs::remove_all(dir_); }

  SsdTierOptions Options(std::uint64_t capacity = 16 << 20) const {
    SsdTierOptions o;
    o.dir = dir_.string();
    o.capacity_bytes = capacity;
    o.segment_bytes = 2 << 20;
    o.io_path = SsdIoPath::kPread;  // the same on every kernel
    return o;
  }
  std::unique_ptr<SsdTier> Open(const SsdTierOptions& o) {
    auto t = SsdTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Inserts `key` with `n` bytes from `seed` into the host tier (a PUT under write-back).
  void Put(const std::string& key, std::size_t n, std::uint64_t seed) {
    auto v = host_.Allocate(key, n);
    ASSERT_TRUE(v.ok());
    std::mt19937_64 rng(seed);
    for (auto& b : (*v)->mutable_bytes()) b = static_cast<std::byte>(rng());
    host_.Insert(key, std::move(*v));
  }
  Result<ValueRef> Read(SsdTier& t, const std::string& key) {
    std::promise<Result<ValueRef>> p;
    t.Read(
        key, [this](std::size_t n) { return host_.Allocate("r", n); },
        [&p](Result<ValueRef> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  fs::path dir_;
  HostTier host_;
};

TEST_F(ShutdownFlushTest, WritesWhatTheSsdLacksAndAReopenedTierServesIt) {
  for (int i = 0; i < 20; ++i) Put("k" + std::to_string(i), 50'000 + i, i);
  {
    auto ssd = Open(Options());
    ASSERT_NE(ssd, nullptr);
    const FlushReport r = FlushHostToSsd(host_, *ssd, std::chrono::seconds(30));
    EXPECT_EQ(r.host_chunks, 20u);
    EXPECT_EQ(r.written_chunks, 20u);
    EXPECT_EQ(r.left_chunks, 0u);
    EXPECT_EQ(r.failed_chunks, 0u);
    EXPECT_FALSE(r.budget_exhausted);
    // A second flush finds everything there already.
    const FlushReport again = FlushHostToSsd(host_, *ssd, std::chrono::seconds(30));
    EXPECT_EQ(again.already_on_ssd, 20u);
    EXPECT_EQ(again.written_chunks, 0u);
    ssd->Close();
  }
  auto reopened = Open(Options());
  ASSERT_NE(reopened, nullptr);
  for (int i = 0; i < 20; ++i) {
    const std::string key = "k" + std::to_string(i);
    auto got = Read(*reopened, key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    const ValueRef want = host_.Get(key);
    ASSERT_EQ((*got)->bytes().size(), want->bytes().size());
    EXPECT_TRUE(std::equal(want->bytes().begin(), want->bytes().end(), (*got)->bytes().begin()));
  }
}

TEST_F(ShutdownFlushTest, AZeroBudgetWritesNothingAndSaysSo) {
  for (int i = 0; i < 5; ++i) Put("k" + std::to_string(i), 10'000, i);
  auto ssd = Open(Options());
  ASSERT_NE(ssd, nullptr);
  const FlushReport r = FlushHostToSsd(host_, *ssd, std::chrono::milliseconds(0));
  EXPECT_EQ(r.written_chunks, 0u);
  EXPECT_EQ(r.left_chunks, 5u);
  EXPECT_EQ(r.left_bytes, 50'000u);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_EQ(ssd->stats().writes, 0u);
}

// With more in memory than the SSD tier's capacity less a segment, the most recently used values
// are the ones written, and none of them is evicted by the flush itself.
TEST_F(ShutdownFlushTest, MostRecentlyUsedFirstWithinTheCapacity) {
  constexpr int kValues = 40;
  for (int i = 0; i < kValues; ++i) Put("k" + std::to_string(i), 200'000, i);
  // Touch the even keys: they are now the most recently used.
  for (int i = 0; i < kValues; i += 2) ASSERT_NE(host_.Get("k" + std::to_string(i)), nullptr);
  auto ssd = Open(Options(4 << 20));  // room for 2 MiB: about 10 values
  ASSERT_NE(ssd, nullptr);
  const FlushReport r = FlushHostToSsd(host_, *ssd, std::chrono::seconds(30));
  EXPECT_TRUE(r.capacity_reached);
  EXPECT_FALSE(r.budget_exhausted);
  EXPECT_GT(r.written_chunks, 5u);
  EXPECT_LE(r.written_chunks, static_cast<std::uint64_t>(kValues / 2));
  EXPECT_EQ(r.written_chunks + r.left_chunks, static_cast<std::uint64_t>(kValues));
  EXPECT_EQ(ssd->stats().segments_evicted, 0u);
  std::set<int> written;
  for (int i = 0; i < kValues; ++i) {
    if (ssd->Contains("k" + std::to_string(i))) written.insert(i);
  }
  EXPECT_EQ(written.size(), r.written_chunks);
  for (const int i : written) EXPECT_EQ(i % 2, 0) << "k" << i << " was not among the most recent";
}

}  // namespace
}  // namespace kvdepot::daemon
