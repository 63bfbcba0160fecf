// Same-host zero-copy and transcoding through a real in-process Server (docs/gpu-tier.md): the
// host tier's shared-memory arena (MAP + LEASE_GET + RELEASE over the Unix socket) and GET_AS with
// the CPU references. No GPU needed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "kvdepot/client/client.h"
#include "kvdepot/codec.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/shm_arena.h"
#include "kvdepot/synth.h"
#include "kvdepot/transcode.h"

namespace kvdepot::daemon {
namespace {

using client::Connection;
using client::SharedArena;

std::vector<std::byte> Bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

class ZeroCopyTest : public ::testing::Test {
 protected:
  void Start(bool shared, std::uint64_t capacity = 32ull << 20,
             std::uint64_t max_lease = 256ull << 20) {
    socket_path_ = (std::filesystem::temp_directory_path() /
                    ("kvdepot-zc-" + std::to_string(::getpid()) + ".sock"))
                       .string();
    HostTierOptions h = HostTierOptions::With(capacity, EvictionPolicy::kLru, 4);
    tier_ = std::make_unique<HostTier>(h);
    if (shared) {
      ASSERT_TRUE(tier_->EnableSharedArena().ok());
    }
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.unix_path = socket_path_;
    o.io_threads = 2;
    o.limits.max_value_bytes = 8ull << 20;
    o.limits.max_body_bytes = 16ull << 20;
    o.max_lease_bytes = max_lease;
    store_ = std::make_unique<Store>(*tier_, nullptr);
    TranscoderHooks hooks;
    hooks.observe = [this](const TranscodeTimings&, CodecId, std::string_view device) {
      observed_device_ = std::string(device);
      ++observed_;
    };
    server_ = std::make_unique<Server>(o, *store_, nullptr, std::move(hooks));
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::unique_ptr<Connection> Connect(bool unix_socket = true) {
    client::ClientOptions o;
    o.address = unix_socket ? "unix:" + socket_path_
                            : "127.0.0.1:" + std::to_string(server_->tcp_port());
    o.timeout = std::chrono::milliseconds(10000);
    auto c = Connection::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::string socket_path_;
  std::unique_ptr<HostTier> tier_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
  std::atomic<int> observed_{0};
  std::string observed_device_;
};

TEST_F(ZeroCopyTest, LeasedBytesAreByteExactAndReleaseEndsTheLease) {
  Start(/*shared=*/true);
  auto c = Connect();
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  for (std::size_t i = 0; i < 8; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back(Bytes(i == 0 ? 0 : 1000 * i * i + 17, i));
    ASSERT_TRUE(c->Put(keys.back(), values.back()).ok());
  }
  auto arena = SharedArena::Map(*c);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_EQ((*arena)->size(), tier_->arena()->size());
  keys.push_back("absent");
  auto leases = c->LeaseGet(keys);
  ASSERT_TRUE(leases.ok()) << leases.status().ToString();
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const protocol::Lease& l = (*leases)[i];
    ASSERT_EQ(l.status, StatusCode::kOk) << i;
    EXPECT_EQ(l.tier, protocol::Tier::kHost);
    EXPECT_EQ(l.offset % 4096, 0u);
    auto view = (*arena)->View(l);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_TRUE(std::equal(view->begin(), view->end(), values[i].begin(), values[i].end())) << i;
    ids.push_back(l.lease_id);
  }
  EXPECT_EQ(leases->back().status, StatusCode::kNotFound);
  ids.push_back(12345);
  auto released = c->Release(ids);
  ASSERT_TRUE(released.ok());
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ((*released)[i], StatusCode::kOk);
  EXPECT_EQ(released->back(), StatusCode::kNotFound);
  // A mapping is read-only: the client cannot write the daemon's values.
  auto l = c->LeaseGet(std::span(keys).first(2));
  ASSERT_TRUE(l.ok());
  auto second = (*arena)->View((*l)[1]);
  ASSERT_TRUE(second.ok());
  const std::byte* p = second->data();
  // Dies: by SIGSEGV, or with AddressSanitizer's non-zero exit after it catches the fault.
  EXPECT_DEATH({ *const_cast<std::byte*>(p) = std::byte{1}; std::exit(0); }, "");
}

TEST_F(ZeroCopyTest, ALeasedValueIsNeverFreedOrReused) {
  Start(/*shared=*/true, 16ull << 20);
  auto c = Connect();
  const auto v = Bytes(1 << 20, 99);
  ASSERT_TRUE(c->Put("held", v).ok());
  auto arena = SharedArena::Map(*c);
  ASSERT_TRUE(arena.ok());
  const std::string key[] = {"held"};
  auto lease = c->LeaseGet(key);
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ((*lease)[0].status, StatusCode::kOk);
  // Delete and overwrite it, then churn 24 MiB through the 16 MiB tier.
  ASSERT_TRUE(c->Delete(key).ok());
  auto other = Connect();
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(other->Put("churn" + std::to_string(i), Bytes(1 << 20, 1000 + i)).ok());
  }
  ASSERT_TRUE(other->Put("held", Bytes(1 << 20, 7)).ok());
  auto view = (*arena)->View((*lease)[0]);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(std::equal(view->begin(), view->end(), v.begin(), v.end()));
  EXPECT_LE(tier_->stats().bytes, tier_->capacity());
  const std::uint64_t id[] = {(*lease)[0].lease_id};
  ASSERT_TRUE(c->Release(id).ok());
}

TEST_F(ZeroCopyTest, AKilledClientsLeasesAreReleased) {
  Start(/*shared=*/true, 16ull << 20);
  {
    auto c = Connect();
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(c->Put("v" + std::to_string(i), Bytes(1 << 20, i)).ok());
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child maps the arena, leases everything and reads it until it is killed.
    ::close(ready[0]);
    client::ClientOptions o;
    o.address = "unix:" + socket_path_;
    auto c = Connection::Connect(o);
    if (!c.ok()) ::_exit(2);
    auto arena = SharedArena::Map(**c);
    if (!arena.ok()) ::_exit(3);
    std::vector<std::string> keys;
    for (int i = 0; i < 8; ++i) keys.push_back("v" + std::to_string(i));
    auto leases = (*c)->LeaseGet(keys);
    if (!leases.ok()) ::_exit(4);
    for (const auto& l : *leases) {
      if (l.status != StatusCode::kOk) ::_exit(5);
    }
    std::vector<std::span<const std::byte>> views;
    for (const auto& l : *leases) {
      auto v = (*arena)->View(l);
      if (!v.ok()) ::_exit(6);
      views.push_back(*v);
    }
    (void)!::write(ready[1], "r", 1);
    volatile std::uint64_t sum = 0;
    while (true) {
      for (const auto& v : views) {
        for (std::byte b : v) sum = sum + static_cast<std::uint64_t>(b);
      }
    }
  }
  ::close(ready[1]);
  char r = 0;
  ASSERT_EQ(::read(ready[0], &r, 1), 1) << "the child failed before leasing";
  ::close(ready[0]);
  // With every value leased, deleting them frees nothing.
  auto c = Connect();
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("v" + std::to_string(i));
  ASSERT_TRUE(c->Delete(keys).ok());
  const std::uint64_t per_value = HostTier::ChargeFor(2, 1 << 20);
  EXPECT_GE(tier_->stats().bytes, 8 * per_value);
  EXPECT_GE(tier_->arena()->stats().used, 8u << 20);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // The daemon notices the closed connection and drops its leases.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tier_->stats().bytes != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(tier_->stats().bytes, 0u);
  EXPECT_EQ(tier_->arena()->stats().used, 0u);
}

TEST_F(ZeroCopyTest, SharedMemoryNeedsTheUnixSocketAndAnArena) {
  Start(/*shared=*/false);
  auto c = Connect();
  ASSERT_TRUE(c->Put("k", Bytes(100, 1)).ok());
  EXPECT_EQ(c->Map().status().code(), StatusCode::kUnavailable);
  const std::string key[] = {"k"};
  auto leases = c->LeaseGet(key);  // in private memory: use GET
  ASSERT_TRUE(leases.ok());
  EXPECT_EQ((*leases)[0].status, StatusCode::kUnavailable);
  auto tcp = Connect(/*unix_socket=*/false);
  EXPECT_EQ(tcp->Map().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(tcp->LeaseGet(key).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(tcp->Ping().ok());  // the connection stays usable
}

TEST_F(ZeroCopyTest, LeasesAreBoundedPerConnection) {
  Start(/*shared=*/true, 32ull << 20, /*max_lease=*/3ull << 20);
  auto c = Connect();
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back("b" + std::to_string(i));
    ASSERT_TRUE(c->Put(keys.back(), Bytes(1 << 20, i)).ok());
  }
  auto leases = c->LeaseGet(keys);
  ASSERT_TRUE(leases.ok());
  EXPECT_EQ((*leases)[2].status, StatusCode::kOk);
  EXPECT_EQ((*leases)[3].status, StatusCode::kResourceExhausted);
}

TEST_F(ZeroCopyTest, GetAsTranscodesWithTheCpuReference) {
  Start(/*shared=*/false);
  auto c = Connect();
  const KvTensor t = *SynthesizeKv(SynthOptions{KvShape{2, 256, 2, 64}, 3, DType::kFloat16});
  EncodeOptions o;
  o.codec = CodecId::kCacheGen;
  const auto stored = *EncodeChunk(t.view(), o);
  ASSERT_TRUE(c->Put("cg", stored).ok());
  ASSERT_TRUE(c->Put("junk", Bytes(300, 5)).ok());
  const std::vector<std::string> keys = {"cg", "absent", "junk", "cg"};
  for (CodecId target : {CodecId::kRaw, CodecId::kHackInt2, CodecId::kCacheGen}) {
    std::vector<std::pair<StatusCode, std::vector<std::byte>>> got;
    ASSERT_TRUE(c->GetAs(keys, target, [&](const client::GetItem& item) {
                   got.emplace_back(item.status.code(),
                                    std::vector<std::byte>(item.value.begin(), item.value.end()));
                 }).ok());
    ASSERT_EQ(got.size(), 4u);
    const auto want = *TranscodeChunk(stored, target);
    EXPECT_EQ(got[0].first, StatusCode::kOk);
    EXPECT_EQ(got[0].second, want) << CodecName(target);
    EXPECT_EQ(got[1].first, StatusCode::kNotFound);
    EXPECT_EQ(got[2].first, StatusCode::kCorruption);
    EXPECT_EQ(got[3].second, want);
  }
  EXPECT_GE(observed_.load(), 4);
  EXPECT_EQ(observed_device_, "cpu");
  EXPECT_TRUE(c->Ping().ok());
}

}  // namespace
}  // namespace kvdepot::daemon
