// The server end to end, in-process: a real Server on an ephemeral TCP port and a Unix socket,
// driven by the real client library and by raw sockets for malformed input.
#include "kvdepot/daemon/server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "../common/random_bytes.h"
#include "in_process_server.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/client/client.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using ::kvdepot::test_socket::ConnectLoopback;

using client::ClientOptions;
using client::Connection;

using test::RandomBytes;

class ServerTest : public InProcessServerTest {
 protected:
  void StartServer(std::uint64_t capacity = 64ull << 20,
                   EvictionPolicy policy = EvictionPolicy::kSieve,
                   std::uint64_t max_output = 64ull << 20,
                   std::chrono::milliseconds drain_timeout = std::chrono::seconds(10)) {
    socket_path_ = (std::filesystem::temp_directory_path() /
                    ("kvdepot-test-" + std::to_string(::getpid()) + ".sock"))
                       .string();
    ServerOptions o;
    o.unix_path = socket_path_;
    o.io_threads = 2;
    o.limits.max_value_bytes = 16ull << 20;
    o.limits.max_body_bytes = 32ull << 20;
    o.max_output_bytes = max_output;
    o.drain_timeout = drain_timeout;
    StartServerWith(HostTierOptions::With(capacity, policy, 8), o);
  }
  ClientOptions Tcp() const { return TcpOptions(); }
  ClientOptions Unix() const {
    ClientOptions o = Tcp();
    o.address = "unix:" + socket_path_;
    return o;
  }
  std::unique_ptr<Connection> Connect(const ClientOptions& o) { return ConnectOrFail(o); }
  std::string socket_path_;
};

// Reads until EOF (or timeout); returns the bytes read.
std::vector<std::byte> ReadToEof(int fd) {
  std::vector<std::byte> out;
  std::byte buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

TEST_F(ServerTest, RoundTripsAreByteExactOverTcpAndUnix) {
  StartServer();
  for (const ClientOptions& o : {Tcp(), Unix()}) {
    auto c = Connect(o);
    ASSERT_TRUE(c->Ping().ok());
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4097},
                             std::size_t{1} << 20, std::size_t{8} << 20}) {
      const std::string key = o.address + "/" + std::to_string(size);
      const auto value = RandomBytes(size, size);
      ASSERT_TRUE(c->Put(key, value).ok());
      auto got = c->Get(key);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(got->has_value());
      EXPECT_TRUE(**got == value) << size;
    }
    auto miss = c->Get("absent");
    ASSERT_TRUE(miss.ok());
    EXPECT_FALSE(miss->has_value());
  }
}

TEST_F(ServerTest, MultiKeyOperations) {
  StartServer();
  auto c = Connect(Tcp());
  const auto v1 = RandomBytes(100, 1), v2 = RandomBytes(200, 2);
  const protocol::PutItemView items[] = {{"a", v1}, {"b", v2}};
  auto put = c->Put(items);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(*put, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOk}));
  const std::vector<std::string> keys = {"a", "b", "zz", "a"};
  std::vector<std::uint32_t> order;
  ASSERT_TRUE(c->Get(keys, [&](const client::GetItem& item) {
                 order.push_back(item.index);
                 if (item.index == 2) {
                   EXPECT_EQ(item.status.code(), StatusCode::kNotFound);
                 } else {
                   EXPECT_TRUE(item.status.ok());
                   EXPECT_EQ(item.tier, protocol::Tier::kHost);
                   EXPECT_EQ(item.value.size(), item.index == 1 ? 200u : 100u);
                 }
               }).ok());
  EXPECT_EQ(order, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  auto look = c->Lookup(std::vector<std::string>{"a", "b", "zz", "a"});
  ASSERT_TRUE(look.ok());
  EXPECT_EQ(look->prefix_length, 2u);
  EXPECT_EQ(look->tiers[2], protocol::Tier::kNone);
  EXPECT_EQ(look->tiers[3], protocol::Tier::kHost);
  auto del = c->Delete(std::vector<std::string>{"a", "zz"});
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(*del, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kNotFound}));
  protocol::ScanRequest q;
  q.limit = 10;
  auto scan = c->Scan(q);
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->entries.size(), 1u);
  EXPECT_EQ(scan->entries[0].key, "b");
  auto stats = c->Stats();
  ASSERT_TRUE(stats.ok());
  for (const char* field : {"\"bytes\":", "\"capacity\":", "\"chunks\":1",
                            "\"hits\":", "\"misses\":", "\"evictions\":"}) {
    EXPECT_NE(stats->find(field), std::string::npos) << field << " in " << *stats;
  }
}

TEST_F(ServerTest, PrefixLookupAndAsyncCalls) {
  StartServer();
  client::Client cl(Unix());
  Namespace ns;
  ns.model = "test-model";
  std::vector<std::uint32_t> tokens(256 * 3 + 10);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i);
  auto before = cl.LookupPrefix(ns, tokens);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->keys.size(), 3u) << "full chunks only";
  EXPECT_EQ(before->prefix_length, 0u);
  std::vector<std::future<Status>> puts;
  for (int i = 0; i < 2; ++i) {
    const ChunkKey& k = before->keys[static_cast<std::size_t>(i)];
    puts.push_back(cl.PutAsync(std::string(reinterpret_cast<const char*>(k.bytes.data()), 48),
                               RandomBytes(1000, static_cast<std::uint64_t>(i))));
  }
  for (auto& f : puts) EXPECT_TRUE(f.get().ok());
  auto after = cl.LookupPrefix(ns, tokens);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->prefix_length, 2u);
  std::vector<std::string> keys;
  for (const ChunkKey& k : after->keys) {
    keys.emplace_back(reinterpret_cast<const char*>(k.bytes.data()), 48);
  }
  int hits = 0;
  auto got = cl.GetAsync(keys, [&](const client::GetItem& item) { hits += item.status.ok(); });
  EXPECT_TRUE(got.get().ok());
  EXPECT_EQ(hits, 2);
}

TEST_F(ServerTest, PipelinedRequestsAllComplete) {
  StartServer();
  auto c = Connect(Tcp());
  const auto value = RandomBytes(3000, 3);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 200; ++i) {
    auto id = c->SendPut("p" + std::to_string(i), value);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::vector<std::byte> body;
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 200; ++i) {
    auto h = c->ReadResponse(body);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->status, 0);
    seen.insert(h->request_id);
  }
  EXPECT_EQ(seen, std::set<std::uint64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(host_->stats().chunks, 200u);
}

TEST_F(ServerTest, ConcurrentClients) {
  StartServer();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      client::Client cl(t % 2 ? Unix() : Tcp());
      for (int i = 0; i < 100; ++i) {
        const std::string key = "c" + std::to_string(t) + "/" + std::to_string(i);
        const auto v = RandomBytes(1000 + i, t * 1000 + i);
        if (!cl.Put(key, v).ok()) ++failures;
        auto got = cl.Get(key);
        if (!got.ok() || !got->has_value() || **got != v) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(ServerTest, CapacityHoldsAndEvictionFollowsThePolicy) {
  StartServer(4ull << 20, EvictionPolicy::kLru);
  auto c = Connect(Tcp());
  const auto value = RandomBytes(100 * 1024, 5);
  for (int i = 0; i < 3 * 40; ++i) {  // 3x capacity
    ASSERT_TRUE(c->Put("e" + std::to_string(i), value).ok());
    ASSERT_LE(host_->stats().bytes, 4ull << 20);
  }
  EXPECT_GT(host_->stats().evictions, 0u);
  // LRU: reading an old key protects it from the next eviction.
  const std::string newest = "e119";
  ASSERT_TRUE(c->Get(newest).ok());
  ASSERT_TRUE(c->Put("extra", value).ok());
  EXPECT_TRUE(*c->Lookup(std::vector<std::string>{newest}).value().tiers.data() ==
              protocol::Tier::kHost);
  // A value larger than the capacity is refused per item, and the connection stays usable.
  const auto huge = RandomBytes(6 << 20, 6);
  EXPECT_EQ(c->Put("huge", huge).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(c->Ping().ok());
  // In a multi-item PUT the refused value is read and dropped; the items around it are stored.
  const auto small = RandomBytes(10, 7);
  const protocol::PutItemView items[] = {{"before", small}, {"huge", huge}, {"after", small}};
  auto codes = c->Put(items);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  EXPECT_EQ(*codes,
            (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOutOfRange, StatusCode::kOk}));
  auto after = c->Get("after");
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_TRUE(**after == small);
}

TEST_F(ServerTest, MalformedFramesCloseOnlyThatConnection) {
  StartServer();
  auto good = Connect(Tcp());
  ASSERT_TRUE(good->Put("keep", RandomBytes(10, 1)).ok());
  auto send_and_expect_close = [&](std::vector<std::byte> bytes, const char* what) {
    const int fd = ConnectLoopback(server_->tcp_port());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    ::shutdown(fd, SHUT_WR);
    const auto reply = ReadToEof(fd);  // returns once the server closes
    ::close(fd);
    SCOPED_TRACE(what);
    if (reply.size() >= protocol::kFrameHeaderBytes) {
      auto h = protocol::DecodeFrameHeader(reply, protocol::Limits{}, true);
      ASSERT_TRUE(h.ok());
      EXPECT_EQ(h->status, static_cast<std::uint16_t>(StatusCode::kCorruption));
    }
    EXPECT_TRUE(good->Ping().ok()) << "other clients keep working";
  };
  send_and_expect_close(RandomBytes(100, 9), "garbage");
  std::vector<std::byte> header(protocol::kFrameHeaderBytes);
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(protocol::Op::kGet);
  h.request_id = 7;
  h.body_length = 10;
  protocol::EncodeFrameHeader(h, header.data());
  send_and_expect_close(std::vector<std::byte>(header.begin(), header.begin() + 10),
                        "truncated header");
  send_and_expect_close(header, "truncated body");
  h.body_length = 0x7fffffff;
  protocol::EncodeFrameHeader(h, header.data());
  send_and_expect_close(header, "oversized length");
  h.body_length = 16u << 20;  // within max_body_bytes, but no GET body can be that long
  protocol::EncodeFrameHeader(h, header.data());
  send_and_expect_close(header, "GET body beyond any valid key list");
  h.body_length = 0;
  protocol::EncodeFrameHeader(h, header.data());
  header[4] = std::byte{9};
  send_and_expect_close(header, "wrong version");
  // A well-formed request over a limit gets an error response, not a close.
  std::vector<std::string> too_many(5000, "k");
  auto look = good->Lookup(too_many);
  EXPECT_EQ(look.status().code(), StatusCode::kOutOfRange) << look.status().ToString();
  EXPECT_TRUE(good->Ping().ok());
  auto v = good->Get("keep");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_GE(server_->stats().protocol_errors, 4u);  // garbage, 2 oversized, version
}

TEST_F(ServerTest, SlowReaderDoesNotGrowTheDaemon) {
  StartServer(64ull << 20, EvictionPolicy::kSieve, /*max_output=*/2ull << 20);
  auto c = Connect(Tcp());
  ASSERT_TRUE(c->Put("big", RandomBytes(1 << 20, 8)).ok());
  const std::string keys[] = {"big"};
  const std::vector<std::byte> body = protocol::EncodeKeyList(keys).value();
  // 300 GETs of 1 MiB each (300 MiB of responses) without reading any of them.
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(c->SendRequest(protocol::Op::kGet, body).ok());
  // Once the socket's buffers are full the server stops reading requests.
  ASSERT_TRUE(test::WaitForSteady([&] { return server_->stats().requests; },
                                  std::chrono::milliseconds(300)));
  const std::uint64_t requests_read = server_->stats().requests;
  EXPECT_LT(requests_read, 300u) << "the server must stop reading a client that does not read";
  // Now read everything: every response arrives, intact.
  std::vector<std::byte> frame;
  for (int i = 0; i < 300; ++i) {
    auto h = c->ReadResponse(frame);
    ASSERT_TRUE(h.ok()) << i << ": " << h.status().ToString();
    ASSERT_EQ(frame.size(), protocol::kGetItemPrefixBytes + (1u << 20));
  }
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(ServerTest, StopClosesAClientThatNeverReadsAfterTheDrainTimeout) {
  StartServer(64ull << 20, EvictionPolicy::kLru, 1ull << 20, std::chrono::milliseconds(500));
  auto c = Connect(Tcp());
  ASSERT_TRUE(c->Put("big", RandomBytes(1 << 20, 8)).ok());
  const std::string keys[] = {"big"};
  const std::vector<std::byte> body = protocol::EncodeKeyList(keys).value();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->SendRequest(protocol::Op::kGet, body).ok());
  // The server has read what it will read and is stuck writing to a client that never reads.
  ASSERT_TRUE(test::WaitFor([&] { return server_->stats().requests > 0; }));
  ASSERT_TRUE(test::WaitForSteady([&] { return server_->stats().requests; },
                                  std::chrono::milliseconds(200)));
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(5)) << "Stop must not wait forever for a stuck client";
  EXPECT_GE(took, std::chrono::milliseconds(400));
}

TEST_F(ServerTest, StopDrainsInFlightRequests) {
  StartServer();
  auto c = Connect(Tcp());
  const auto value = RandomBytes(1 << 20, 4);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(*c->SendPut("d" + std::to_string(i), value));
  std::vector<std::byte> body;
  auto first = c->ReadResponse(body);  // at least one request was read and answered
  ASSERT_TRUE(first.ok());
  std::thread stopper([&] { server_->Stop(); });
  int answered = 1;
  while (true) {
    auto h = c->ReadResponse(body);
    if (!h.ok()) break;
    ++answered;
  }
  stopper.join();
  server_.reset();
  EXPECT_EQ(answered, 20) << "every request sent before the stop is answered";
}

// The server over host + SSD: a GET of many keys, most of them on SSD (answered asynchronously,
// out of order underneath), still streams its frames in key order with the right bytes; LOOKUP
// and STATS report the SSD tier; a sync-durable PUT is acknowledged once on disk.
TEST(ServerSsdTest, GetsFromSsdKeepKeyOrderAndReportTheTier) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvdepot-server-ssd-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  SsdTierOptions so;
  so.dir = dir.string();
  so.capacity_bytes = 64 << 20;
  so.segment_bytes = 4 << 20;
  so.durability = SsdDurability::kSync;
  auto ssd = SsdTier::Open(so);
  ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
  HostTier host(HostTierOptions::With(8 << 20));
  Store store(host, ssd->get());
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.limits.max_value_bytes = 1 << 20;
  Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string(server.tcp_port());
  auto c = Connection::Connect(co);
  ASSERT_TRUE(c.ok());
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("key" + std::to_string(i));
    ASSERT_TRUE((*c)->Put(keys.back(), RandomBytes(100000 + i * 1000, i)).ok());
  }
  EXPECT_EQ((*ssd)->stats().chunks, 40u) << "sync durability writes through";
  for (const std::string& k : keys) host.Erase(k);  // cold: every GET reads the SSD
  int on_ssd = 0;
  std::uint32_t next = 0;
  ASSERT_TRUE((*c)->Get(keys,
                        [&](const client::GetItem& item) {
                          EXPECT_EQ(item.index, next++);
                          ASSERT_TRUE(item.status.ok())
                              << item.index << ": " << item.status.ToString();
                          const auto want = RandomBytes(100000 + item.index * 1000, item.index);
                          EXPECT_TRUE(std::equal(item.value.begin(), item.value.end(), want.begin(),
                                                 want.end()));
                          on_ssd += item.tier == protocol::Tier::kSsd;
                        })
                  .ok());
  EXPECT_EQ(next, 40u);
  EXPECT_EQ(on_ssd, 40);
  EXPECT_EQ((*ssd)->stats().promotions, 40u);
  std::vector<std::string> cold = {"key0", "key1"};
  host.Erase("key0");
  host.Erase("key1");
  auto lookup = (*c)->Lookup(cold);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->prefix_length, 2u);
  EXPECT_EQ(lookup->tiers[0], protocol::Tier::kSsd);
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->find("\"ssd\":{"), std::string::npos) << *stats;
  server.Stop();
  (*ssd)->Close();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvdepot::daemon
