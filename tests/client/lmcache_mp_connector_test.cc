// The engine of the LMCache MP connector (client/python/src/lmcache_mp_connector.h) in C++,
// against an in-process server: built without Python, so it also runs under the sanitizers
// (tests/lmcache/test_lmcache_mp.py drives the Python object against a kvdepotd process).
#include "lmcache_mp_connector.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::python::lmcache_mp {
namespace {

class LmcacheMpConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon::ServerOptions o;
    o.listen = "127.0.0.1:0";
    server_ = std::make_unique<daemon::Server>(o, store_);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<Connector> Make(std::size_t workers) {
    ConnectorOptions o;
    o.client.address = "127.0.0.1:" + std::to_string(server_->tcp_port());
    o.client.timeout = std::chrono::milliseconds(5000);
    o.workers = workers;
    auto c = Connector::Create(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Polls the eventfd and drains until every id has completed (each exactly once), bounded.
  static std::map<std::uint64_t, Completion> WaitAll(Connector& c,
                                                     const std::vector<std::uint64_t>& ids) {
    std::map<std::uint64_t, Completion> done;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (done.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
      pollfd p{c.event_fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      for (Completion& x : c.DrainCompletions()) {
        EXPECT_EQ(done.count(x.future_id), 0u) << "future " << x.future_id << " completed twice";
        done[x.future_id] = std::move(x);
      }
    }
    EXPECT_EQ(done.size(), ids.size()) << "not every batch completed within 10 s";
    return done;
  }

  daemon::HostTier tier_{daemon::HostTierOptions::With(256ull << 20, daemon::EvictionPolicy::kLru)};
  daemon::Store store_{tier_, nullptr};
  std::unique_ptr<daemon::Server> server_;
};

std::vector<std::byte> Filled(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

TEST_F(LmcacheMpConnectorTest, SetGetExistsDeleteWithPerKeyResults) {
  auto c = Make(3);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  std::vector<std::span<const std::byte>> sources;
  for (int i = 0; i < 7; ++i) {
    keys.push_back("m@00000000@0@" + std::to_string(i));
    values.push_back(Filled(100'000 + i, i));
  }
  for (auto& v : values) sources.emplace_back(v);
  auto set = c->SubmitSet(keys, sources);
  ASSERT_TRUE(set.ok());
  auto done = WaitAll(*c, {*set});
  EXPECT_TRUE(done[*set].ok) << done[*set].error;
  EXPECT_EQ(done[*set].per_key, std::vector<std::uint8_t>(7, 1));

  std::vector<std::string> get_keys = keys;
  get_keys.push_back("absent");
  std::vector<std::vector<std::byte>> outs;
  for (std::size_t i = 0; i < get_keys.size(); ++i) outs.emplace_back(i < 7 ? 100'000 + i : 10);
  std::vector<std::span<std::byte>> targets(outs.begin(), outs.end());
  auto get = c->SubmitGet(get_keys, targets);
  auto exists = c->SubmitExists(get_keys);
  ASSERT_TRUE(get.ok() && exists.ok());
  done = WaitAll(*c, {*get, *exists});
  std::vector<std::uint8_t> expect(7, 1);
  expect.push_back(0);
  EXPECT_FALSE(done[*get].ok);  // the miss
  EXPECT_NE(done[*get].error.find("1 of 8 keys not found"), std::string::npos);
  EXPECT_EQ(done[*get].per_key, expect);
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(outs[static_cast<std::size_t>(i)], values[static_cast<std::size_t>(i)]);
  EXPECT_TRUE(done[*exists].ok);
  EXPECT_EQ(done[*exists].per_key, expect);

  auto del = c->SubmitDelete(get_keys);
  ASSERT_TRUE(del.ok());
  done = WaitAll(*c, {*del});
  EXPECT_TRUE(done[*del].ok) << done[*del].error;  // an absent key is not an error
  EXPECT_EQ(done[*del].per_key, expect);

  auto empty = c->SubmitExists({});
  ASSERT_TRUE(empty.ok());
  done = WaitAll(*c, {*empty});
  EXPECT_TRUE(done[*empty].ok && done[*empty].per_key.empty());
}

TEST_F(LmcacheMpConnectorTest, CloseCompletesEveryBatchOnce) {
  auto c = Make(2);
  ASSERT_NE(c, nullptr);
  const std::vector<std::byte> value = Filled(1 << 20, 1);
  std::vector<std::uint64_t> ids;
  for (int b = 0; b < 20; ++b) {
    std::vector<std::string> keys;
    std::vector<std::span<const std::byte>> sources;
    for (int i = 0; i < 4; ++i) {
      keys.push_back("close/" + std::to_string(b) + "/" + std::to_string(i));
      sources.emplace_back(value);
    }
    auto id = c->SubmitSet(keys, sources);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  c->Close();
  EXPECT_EQ(c->SubmitExists({"k"}).status().code(), StatusCode::kCancelled);
  auto done = WaitAll(*c, ids);
  for (auto& [id, x] : done) {
    EXPECT_TRUE(x.ok || x.error.find("cancelled") != std::string::npos) << x.error;
  }
}

TEST_F(LmcacheMpConnectorTest, ServerGoneMidBatchFailsWithoutHanging) {
  auto c = Make(2);
  ASSERT_NE(c, nullptr);
  const std::vector<std::byte> value = Filled(4 << 20, 2);
  std::vector<std::string> keys;
  std::vector<std::span<const std::byte>> sources;
  for (int i = 0; i < 32; ++i) {
    keys.push_back("gone/" + std::to_string(i));
    sources.emplace_back(value);
  }
  auto id = c->SubmitSet(keys, sources);
  ASSERT_TRUE(id.ok());
  server_->Stop();
  server_.reset();
  auto done = WaitAll(*c, {*id});
  // Some keys may have been stored before the server went away; whatever was not is reported.
  const Completion& x = done[*id];
  if (!x.ok) {
    EXPECT_FALSE(x.error.empty());
  }
  auto later = c->SubmitExists(keys);
  ASSERT_TRUE(later.ok());
  done = WaitAll(*c, {*later});
  EXPECT_FALSE(done[*later].ok);
  EXPECT_NE(done[*later].error.find("unavailable"), std::string::npos) << done[*later].error;
}

TEST(LmcacheMpConnectorOptions, BadOptionsNameTheParameter) {
  ConnectorOptions o;
  o.workers = 0;
  auto c = Connector::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_workers"), std::string::npos);
  o.workers = 1;
  o.key_prefix = std::string(300, 'p');
  c = Connector::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("key_prefix"), std::string::npos);
}

}  // namespace
}  // namespace kvdepot::python::lmcache_mp
