// The SSD tier on its own and behind the Store: round trips on both I/O paths, restart,
// capacity, corruption, ENOSPC and read errors (through the fault hook), erase ordering,
// demotion and promotion.
#include "kvdepot/daemon/ssd_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "../common/wait.h"
#include "kvdepot/daemon/store.h"
#include "ssd/io_engine.h"
#include "ssd/record.h"

namespace kvdepot::daemon {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kvdepot-ssd-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// Values are allocated from a host tier (they must be Value objects) but never inserted there.
class SsdTierTest : public ::testing::TestWithParam<SsdIoPath> {
 protected:
  SsdTierOptions Options(SsdDurability d = SsdDurability::kSync) const {
    SsdTierOptions o;
    o.dir = dir_.str();
    o.capacity_bytes = 8 << 20;
    o.segment_bytes = 2 << 20;
    o.durability = d;
    o.io_path = GetParam();
    o.queue_depth = 16;
    return o;
  }
  std::unique_ptr<SsdTier> Open(const SsdTierOptions& o) {
    auto t = SsdTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  ValueRef MakeValue(std::size_t n, std::uint64_t seed) {
    auto v = host_.Allocate("v", n);
    EXPECT_TRUE(v.ok());
    std::mt19937_64 rng(seed);
    for (auto& b : (*v)->mutable_bytes()) b = static_cast<std::byte>(rng());
    return std::move(*v);
  }
  static Status WriteAndWait(SsdTier& t, const std::string& key, ValueRef v) {
    std::promise<Status> p;
    t.Write(key, std::move(v), [&p](Status s) { p.set_value(s); });
    return p.get_future().get();
  }
  Result<ValueRef> ReadAndWait(SsdTier& t, const std::string& key) {
    std::promise<Result<ValueRef>> p;
    t.Read(
        key, [this](std::size_t n) { return host_.Allocate("r", n); },
        [&p](Result<ValueRef> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }
  static bool Same(const ValueRef& a, const ValueRef& b) {
    return a->bytes().size() == b->bytes().size() &&
           std::memcmp(a->bytes().data(), b->bytes().data(), a->bytes().size()) == 0;
  }

  TempDir dir_;
  HostTier host_{HostTierOptions::With(256ull << 20)};
};

TEST_P(SsdTierTest, RoundTripsEverySizeByteExact) {
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().io_path, GetParam() == SsdIoPath::kPread ? "pread" : "io_uring");
  const std::vector<std::size_t> sizes = {0, 1, 100, 4095, 4096, 4097, 65536 + 3, 1 << 20};
  std::vector<ValueRef> values;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(MakeValue(sizes[i], i));
    ASSERT_TRUE(WriteAndWait(*tier, "key" + std::to_string(i), values.back()).ok());
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(tier->Contains("key" + std::to_string(i)));
    auto got = ReadAndWait(*tier, "key" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(Same(*got, values[i])) << "size " << sizes[i];
    EXPECT_NE((*got)->ssd_checksum(), 0u);
  }
  auto miss = ReadAndWait(*tier, "absent");
  EXPECT_EQ(miss.status().code(), StatusCode::kNotFound);
  const SsdTierStats st = tier->stats();
  EXPECT_EQ(st.chunks, sizes.size());
  EXPECT_EQ(st.hits, sizes.size());
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.checksum_failures, 0u);
}

TEST_P(SsdTierTest, ARestartedTierServesWhatItHad) {
  std::vector<ValueRef> values;
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 12; ++i) {
      values.push_back(MakeValue(300000 + i, 100 + i));
      ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(i), values.back()).ok());
    }
    ASSERT_TRUE(tier->Erase("k3"));
  }
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().recovered_chunks, 11u);
  for (int i = 0; i < 12; ++i) {
    auto got = ReadAndWait(*tier, "k" + std::to_string(i));
    if (i == 3) {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_TRUE(Same(*got, values[i]));
  }
}

TEST_P(SsdTierTest, CapacityHoldsByDroppingTheOldestSegment) {
  auto tier = Open(Options(SsdDurability::kAsync));
  ASSERT_NE(tier, nullptr);
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(i), MakeValue(300000, i)).ok());
    ASSERT_LE(tier->stats().bytes, 8u << 20);
  }
  const SsdTierStats st = tier->stats();
  EXPECT_GT(st.segments_evicted, 0u);
  EXPECT_GT(st.evictions, 0u);
  EXPECT_FALSE(tier->Contains("k0"));
  EXPECT_TRUE(tier->Contains("k59"));
  auto got = ReadAndWait(*tier, "k59");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(Same(*got, MakeValue(300000, 59)));
  // Files on disk agree with the accounting.
  std::uint64_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(fs::path(dir_.str()) / "segments")) {
    on_disk += fs::file_size(f.path());
  }
  EXPECT_LE(on_disk, 8u << 20);
}

TEST_P(SsdTierTest, CorruptedBytesAreAMissNeverWrongData) {
  ValueRef v = MakeValue(100000, 7);
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(WriteAndWait(*tier, "victim", v).ok());
    ASSERT_TRUE(WriteAndWait(*tier, "bystander", MakeValue(5000, 8)).ok());
  }
  // Flip one byte inside the first record's value (after its 4 KiB header block).
  fs::path seg;
  for (const auto& f : fs::directory_iterator(fs::path(dir_.str()) / "segments")) seg = f.path();
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(ssd::kBlock + 5000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(ssd::kBlock + 5000);
    f.write(&c, 1);
  }
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  auto got = ReadAndWait(*tier, "victim");
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << "a corrupt copy must never be served";
  EXPECT_EQ(tier->stats().checksum_failures, 1u);
  EXPECT_FALSE(tier->Contains("victim")) << "the corrupt copy is removed";
  EXPECT_TRUE(ReadAndWait(*tier, "bystander").ok());
  tier.reset();
  auto again = Open(Options());
  EXPECT_FALSE(again->Contains("victim")) << "its index entry is gone for good";
}

TEST_P(SsdTierTest, NoSpaceIsAClearErrorAndWhatWasStoredStillReads) {
  std::atomic<int> allocations{0};
  SsdTierOptions o = Options();
  o.fault = [&allocations](const ssd::IoRequest& r) {
    if (r.kind != ssd::IoKind::kAllocate) return 0;
    return ++allocations > 1 ? -ENOSPC : 0;  // the first segment fits, nothing after it
  };
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  ValueRef first = MakeValue(1 << 20, 1);
  ASSERT_TRUE(WriteAndWait(*tier, "first", first).ok());
  Status s = WriteAndWait(*tier, "second", MakeValue(1 << 20, 2));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("seg-"), std::string::npos) << s.message();
  auto got = ReadAndWait(*tier, "first");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(Same(*got, first));
  EXPECT_GT(tier->stats().write_errors, 0u);
}

TEST_P(SsdTierTest, ReadErrorsAreReportedNotServed) {
  SsdTierOptions o = Options();
  std::atomic<bool> fail_reads{false};
  o.fault = [&fail_reads](const ssd::IoRequest& r) {
    return r.kind == ssd::IoKind::kRead && fail_reads ? -EIO : 0;
  };
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(WriteAndWait(*tier, "k", MakeValue(10000, 3)).ok());
  fail_reads = true;
  EXPECT_EQ(ReadAndWait(*tier, "k").status().code(), StatusCode::kIOError);
  EXPECT_EQ(tier->stats().read_errors, 1u);
  fail_reads = false;
  EXPECT_TRUE(ReadAndWait(*tier, "k").ok()) << "a transient error does not drop the chunk";
}

TEST_P(SsdTierTest, AnEraseVoidsWritesQueuedBeforeIt) {
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    for (int round = 0; round < 20; ++round) {
      const std::string key = "k" + std::to_string(round);
      tier->Write(key, MakeValue(200000, round), [](Status) {});
      tier->Erase(key);
    }
    for (int round = 0; round < 20; ++round)
      EXPECT_FALSE(tier->Contains("k" + std::to_string(round)));
  }
  auto tier = Open(Options());
  EXPECT_EQ(tier->stats().chunks, 0u);
}

TEST_P(SsdTierTest, IndexEntriesOfAMissingSegmentAreDroppedAtStart) {
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(i), MakeValue(300000, i)).ok());
    }
  }
  std::vector<fs::path> segs;
  for (const auto& f : fs::directory_iterator(fs::path(dir_.str()) / "segments")) {
    segs.push_back(f.path());
  }
  std::sort(segs.begin(), segs.end());
  ASSERT_GE(segs.size(), 2u);
  fs::remove(segs.front());
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_GT(tier->stats().recovery_dropped, 0u);
  EXPECT_FALSE(tier->Contains("k0"));
  EXPECT_EQ(ReadAndWait(*tier, "k0").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ReadAndWait(*tier, "k11").ok());
}

// Issue 19 §2: a restart must not cost a segment. Ten open/write/close rounds keep writing into
// the one segment that was being written, and the files on disk stay one segment.
TEST_P(SsdTierTest, ARestartWritesOnInTheSegmentItWasWriting) {
  std::vector<ValueRef> values;
  for (int round = 0; round < 10; ++round) {
    auto tier = Open(Options(round % 2 == 0 ? SsdDurability::kSync : SsdDurability::kNone));
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < round; ++i) {
      auto got = ReadAndWait(*tier, "k" + std::to_string(i));
      ASSERT_TRUE(got.ok()) << "round " << round << ", k" << i << ": " << got.status().ToString();
      EXPECT_TRUE(Same(*got, values[i]));
    }
    values.push_back(MakeValue(60000 + round, 300 + round));
    ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(round), values.back()).ok());
    EXPECT_EQ(tier->stats().segments, 1u) << "round " << round;
    EXPECT_EQ(tier->stats().bytes, 2u << 20) << "round " << round;
  }
  std::uint64_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(fs::path(dir_.str()) / "segments")) {
    on_disk += fs::file_size(f.path());
  }
  EXPECT_EQ(on_disk, 2u << 20);
}

// Bytes past the last indexed record (a write torn or never indexed when the process died) are
// written over, and everything indexed before them still reads back.
TEST_P(SsdTierTest, RecordsPastTheLastIndexedOneAreWrittenOver) {
  std::vector<ValueRef> values;
  std::uint64_t end = 0;
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 3; ++i) {
      values.push_back(MakeValue(50000 * (i + 1), 40 + i));
      ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(i), values.back()).ok());
      end += ssd::RecordBytes(values.back()->bytes().size());
    }
  }
  fs::path seg;
  for (const auto& f : fs::directory_iterator(fs::path(dir_.str()) / "segments")) seg = f.path();
  {
    // A plausible torn record: a valid-looking header block, then garbage.
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    std::array<std::byte, ssd::kBlock> header{};
    ssd::RecordHeader h;
    h.key = "torn";
    h.value_length = 300000;
    ssd::EncodeRecordHeader(h, std::span<std::byte, ssd::kBlock>(header));
    f.seekp(static_cast<std::streamoff>(end));
    f.write(reinterpret_cast<const char*>(header.data()), header.size());
    const std::string garbage(200000, '\x5a');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    EXPECT_FALSE(tier->Contains("torn"));
    for (int i = 3; i < 6; ++i) {
      values.push_back(MakeValue(70000 + i, 40 + i));
      ASSERT_TRUE(WriteAndWait(*tier, "k" + std::to_string(i), values.back()).ok());
    }
    EXPECT_EQ(tier->stats().segments, 1u);
  }
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  for (int i = 0; i < 6; ++i) {
    auto got = ReadAndWait(*tier, "k" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_TRUE(Same(*got, values[i])) << i;
  }
  EXPECT_EQ(tier->stats().checksum_failures, 0u);
}

// Segments that are not written on (here: after ssd.segment_size changed) are cut to their last
// record, so capacity counts their data, not their reservation.
TEST_P(SsdTierTest, SegmentsNotWrittenOnAreCutToTheirData) {
  ValueRef v = MakeValue(100000, 9);
  {
    auto tier = Open(Options());
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(WriteAndWait(*tier, "k", v).ok());
  }
  SsdTierOptions bigger = Options();
  bigger.segment_bytes = 4 << 20;
  bigger.capacity_bytes = 16 << 20;
  auto tier = Open(bigger);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().bytes, ssd::RecordBytes(100000));
  auto got = ReadAndWait(*tier, "k");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(Same(*got, v));
  ASSERT_TRUE(WriteAndWait(*tier, "k2", MakeValue(1000, 10)).ok());
  EXPECT_EQ(tier->stats().bytes, ssd::RecordBytes(100000) + (4u << 20));
}

// Many writes queued at once while the capacity forces segments out: the writer keeps records in
// flight across segment boundaries, yet an index entry never points to a dropped segment.
TEST_P(SsdTierTest, WritesInFlightAcrossEvictionsIndexOnlyLiveSegments) {
  std::vector<ValueRef> values;
  {
    auto tier = Open(Options(SsdDurability::kAsync));
    ASSERT_NE(tier, nullptr);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0, failed = 0;
    for (int i = 0; i < 100; ++i) {
      values.push_back(MakeValue(250000 + i, 500 + i));
      tier->Write("k" + std::to_string(i), values.back(), [&](Status st) {
        std::lock_guard lock(mu);
        ++done;
        failed += !st.ok();
        cv.notify_all();
      });
    }
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == 100; }));
    EXPECT_EQ(failed, 0);
    lock.unlock();
    const SsdTierStats st = tier->stats();
    EXPECT_LE(st.bytes, 8u << 20);
    EXPECT_GT(st.segments_evicted, 0u);
    EXPECT_TRUE(tier->Contains("k99"));
    for (int i = 0; i < 100; ++i) {
      if (!tier->Contains("k" + std::to_string(i))) continue;
      auto got = ReadAndWait(*tier, "k" + std::to_string(i));
      ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
      EXPECT_TRUE(Same(*got, values[i])) << i;
    }
  }
  auto tier = Open(Options(SsdDurability::kAsync));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().recovery_dropped, 0u) << "no entry may point to a dropped segment";
}

// Issue 19 §3, in process: a copy of the tier's directory taken while it runs is what a killed
// process leaves behind. Under `none`, an erase (as a DELETE, or a PUT replacing the key does)
// must already be in it once Erase has returned.
TEST_P(SsdTierTest, AnEraseIsInTheIndexLogWhenItReturns) {
  ValueRef kept = MakeValue(30000, 1);
  {
    auto tier = Open(Options(SsdDurability::kNone));
    ASSERT_NE(tier, nullptr);
    for (const char* key : {"deleted", "replaced", "kept"}) {
      ASSERT_TRUE(
          WriteAndWait(*tier, key, key == std::string("kept") ? kept : MakeValue(30000, 2)).ok());
    }
  }  // closed: the index is flushed to RocksDB's tables
  ValueRef replacement = MakeValue(30000, 3);
  TempDir snapshot;
  {
    auto tier = Open(Options(SsdDurability::kNone));
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(tier->Erase("deleted"));
    EXPECT_TRUE(tier->Erase("replaced"));  // what Store::Put does under none and async
    ASSERT_TRUE(WriteAndWait(*tier, "replaced", replacement).ok());
    fs::copy(dir_.str(), snapshot.str(), fs::copy_options::recursive);
  }
  SsdTierOptions o = Options(SsdDurability::kNone);
  o.dir = snapshot.str();
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_FALSE(tier->Contains("deleted")) << "an acknowledged erase came back";
  auto got = ReadAndWait(*tier, "replaced");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(Same(*got, replacement)) << "the replaced value's old bytes came back";
  got = ReadAndWait(*tier, "kept");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(Same(*got, kept));
}

INSTANTIATE_TEST_SUITE_P(IoPaths, SsdTierTest,
                         ::testing::Values(SsdIoPath::kIoUring, SsdIoPath::kPread),
                         [](const auto& param_info) {
                           return param_info.param == SsdIoPath::kPread ? "pread" : "io_uring";
                         });

// ---- behind the Store -------------------------------------------------------------------------

Result<Found> GetAndWait(Store& store, const std::string& key) {
  std::promise<Result<Found>> p;
  store.Get(key, [&p](Result<Found> r) { p.set_value(std::move(r)); });
  return p.get_future().get();
}

TEST(StoreWithSsdTest, EvictedChunksAreDemotedThenServedAndPromoted) {
  TempDir dir;
  SsdTierOptions o;
  o.dir = dir.str();
  o.capacity_bytes = 64 << 20;
  o.segment_bytes = 4 << 20;
  o.durability = SsdDurability::kAsync;
  auto ssd = SsdTier::Open(o);
  ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
  HostTier host(HostTierOptions::With(4 << 20));
  Store store(host, ssd->get());
  std::vector<std::vector<std::byte>> expect;
  for (int i = 0; i < 32; ++i) {
    auto v = store.Allocate("key" + std::to_string(i), 500000);
    ASSERT_TRUE(v.ok()) << i << ": " << v.status().ToString();
    std::mt19937_64 rng(i);
    for (auto& b : (*v)->mutable_bytes()) b = static_cast<std::byte>(rng());
    expect.emplace_back((*v)->bytes().begin(), (*v)->bytes().end());
    std::promise<Status> done;
    store.Put("key" + std::to_string(i), std::move(*v), [&](Status s) { done.set_value(s); });
    ASSERT_TRUE(done.get_future().get().ok());
    ASSERT_LE(host.stats().bytes, 4u << 20);
  }
  (*ssd)->Close();  // waits for every queued demotion
  auto reopened = SsdTier::Open(o);
  ASSERT_TRUE(reopened.ok());
  Store store2(host, reopened->get());
  EXPECT_GT((*reopened)->stats().chunks, 20u);
  int from_ssd = 0;
  for (int i = 0; i < 32; ++i) {
    const std::string key = "key" + std::to_string(i);
    EXPECT_NE(store2.Locate(key), protocol::Tier::kNone) << key;
    auto got = GetAndWait(store2, key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    ASSERT_EQ(got->value->bytes().size(), expect[i].size());
    EXPECT_EQ(std::memcmp(got->value->bytes().data(), expect[i].data(), expect[i].size()), 0);
    if (got->tier == protocol::Tier::kSsd) ++from_ssd;
  }
  EXPECT_GT(from_ssd, 20);
  EXPECT_GT((*reopened)->stats().promotions, 0u);
  const auto listing = store2.Scan("key", "", 100, protocol::Tier::kNone);
  EXPECT_EQ(listing.entries.size(), 32u) << "each key listed once";
  EXPECT_TRUE(store2.Erase("key5"));
  EXPECT_EQ(store2.Locate("key5"), protocol::Tier::kNone);
}

// A slow disk (writes held in the fault hook): values waiting for their write are served from
// memory, and once the write buffer is full the host tier refuses to evict more of them, so a PUT
// gets resource_exhausted instead of a value being lost.
TEST(StoreWithSsdTest, QueuedValuesAreServedAndAFullWriteBufferIsBackpressure) {
  TempDir dir;
  std::atomic<bool> hold{true};
  SsdTierOptions o;
  o.dir = dir.str();
  o.capacity_bytes = 64 << 20;
  o.segment_bytes = 4 << 20;
  o.write_buffer_bytes = 1 << 20;
  o.fault = [&hold](const ssd::IoRequest& r) {
    while (r.kind == ssd::IoKind::kWrite && hold)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0;
  };
  auto ssd = SsdTier::Open(o);
  ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
  const std::uint64_t entry = HostTier::ChargeFor(4, 300000);
  HostTier host(HostTierOptions::With(3 * entry, EvictionPolicy::kLru, 1));
  Store store(host, ssd->get());
  auto put = [&](const std::string& key) -> Status {
    auto v = store.Allocate(key, 300000);
    if (!v.ok()) return v.status();
    std::memset((*v)->mutable_bytes().data(), key.back(), 300000);
    std::promise<Status> done;
    store.Put(key, std::move(*v), [&](Status st) { done.set_value(st); });
    return done.get_future().get();
  };
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(put("k" + std::to_string(i)).ok()) << i;
  // k0..k2 were demoted (0.9 MB of the 1 MiB buffer) and wait for their writes.
  EXPECT_GE((*ssd)->stats().demotions, 3u);
  {
    auto got = GetAndWait(store, "k0");
    ASSERT_TRUE(got.ok()) << "a value waiting for its write must not be a miss";
    EXPECT_EQ(got->tier, protocol::Tier::kSsd);
    EXPECT_EQ(got->value->bytes()[0], std::byte{'0'});
  }
  // The buffer cannot take another demotion: the PUT is refused, nothing is lost.
  Status refused = put("k6");
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_GT((*ssd)->stats().demotions_refused, 0u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE(store.Locate("k" + std::to_string(i)), protocol::Tier::kNone) << i;
  }
  hold = false;  // the disk catches up
  Status later = Status::Ok();
  EXPECT_TRUE(test::WaitFor([&] { return (later = put("k6")).ok(); })) << later.ToString();
  EXPECT_TRUE(test::WaitFor([&] { return (*ssd)->stats().write_buffer_bytes == 0; }))
      << "the queued writes land";
  for (int i = 0; i < 7; ++i) {
    auto v = GetAndWait(store, "k" + std::to_string(i));
    ASSERT_TRUE(v.ok()) << i << ": " << v.status().ToString();
    EXPECT_EQ(v->value->bytes()[299999], static_cast<std::byte>('0' + i));
  }
}

}  // namespace
}  // namespace kvdepot::daemon
