// Faulty clients and a faulty disk against in-process servers: clients that disconnect
// mid-frame, stop reading, or send a byte at a time are bounded by request_timeout, idle_timeout
// and max_output_bytes; the lm:// listener has the same bounds; SSD read errors (EIO) and a full
// disk (ENOSPC) behind a running Server never produce wrong bytes, and the memory tier keeps
// serving. Timeouts here are short (hundreds of ms) so that every test takes about a second.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <random>
#include <thread>

#include "../common/random_bytes.h"
#include "in_process_server.h"
#include "kvdepot/client/client.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/protocol/lm_wire.h"
#include "socket_test_util.h"
#include "ssd/io_engine.h"

namespace kvdepot::daemon {
namespace {

using ::kvdepot::test_socket::ClosedByPeer;
using ::kvdepot::test_socket::ConnectLoopback;
using ::kvdepot::test_socket::WaitFor;

using namespace std::chrono_literals;

using test::RandomBytes;

std::vector<std::byte> GetFrame(const std::string& key, std::uint64_t id) {
  const std::string keys[] = {key};
  const std::vector<std::byte> body = protocol::EncodeKeyList(keys).value();
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(protocol::Op::kGet);
  h.request_id = id;
  h.body_length = static_cast<std::uint32_t>(body.size());
  std::vector<std::byte> out(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, out.data());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

class ServerFaultsTest : public InProcessServerTest {
 protected:
  void Start(const ServerOptions& o) { StartServerWith(HostTierOptions::With(64u << 20), o); }
  std::unique_ptr<client::Connection> Client(protocol::Limits limits = {}) {
    client::ClientOptions co = TcpOptions();
    co.limits = limits;
    return ConnectOrFail(co);
  }
};

// Regression (fuzz/regressions/server/put-key-600-bytes): a PUT key longer than 256 bytes under
// limits.max_key_bytes up to 1024 overflowed the connection's fixed item buffer.
TEST_F(ServerFaultsTest, KeysUpToTheLargestConfigurableLimitRoundTrip) {
  ServerOptions o;
  o.limits.max_key_bytes = 1024;
  Start(o);
  auto c = Client(o.limits);
  ASSERT_NE(c, nullptr);
  const std::string key(1024, 'k');
  ASSERT_TRUE(c->Put(key, RandomBytes(5000, 1)).ok());
  auto got = c->Get(key);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, RandomBytes(5000, 1));
}

// Regression (fuzz/regressions/server/get-as-then-close-write-race): the write started when a
// GET_AS answer came back from the transcoder could end after a malformed frame had closed the
// connection; its handler then popped frames from the emptied queue (UBSan: an invalid bool read
// out of the deque). Rounds of pipelined GET_AS requests followed at once by a malformed header:
// each connection is closed, the server keeps serving (the sanitizer builds catch the UB).
TEST_F(ServerFaultsTest, AWriteEndingAfterTheConnectionClosedIsHarmless) {
  Start(ServerOptions{});
  auto c = Client();
  ASSERT_NE(c, nullptr);
  const KvTensor t = *SynthesizeKv(SynthOptions{KvShape{2, 64, 2, 32}, 1, DType::kFloat16});
  EncodeOptions raw;
  raw.codec = CodecId::kRaw;
  ASSERT_TRUE(c->Put("c", *EncodeChunk(t.view(), raw)).ok());
  const std::string keys[] = {"c", "c"};
  const std::vector<std::byte> body =
      protocol::EncodeGetAsRequest(static_cast<std::uint8_t>(CodecId::kCacheGen), keys).value();
  std::vector<std::byte> wire;
  for (std::uint64_t id = 1; id <= 3; ++id) {
    protocol::FrameHeader h;
    h.type = static_cast<std::uint8_t>(protocol::Op::kGetAs);
    h.request_id = id;
    h.body_length = static_cast<std::uint32_t>(body.size());
    const std::size_t at = wire.size();
    wire.resize(at + protocol::kFrameHeaderBytes);
    protocol::EncodeFrameHeader(h, wire.data() + at);
    wire.insert(wire.end(), body.begin(), body.end());
  }
  wire.insert(wire.end(), protocol::kFrameHeaderBytes, std::byte{'X'});  // malformed: closes
  for (int round = 0; round < 60; ++round) {
    const int fd = ConnectLoopback(server_->tcp_port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(wire.size()));
    EXPECT_TRUE(ClosedByPeer(fd)) << "round " << round;
    ::close(fd);
  }
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_TRUE(WaitFor([&] { return server_->stats().connections_open == 1; }));
}

TEST_F(ServerFaultsTest, AClientSendingAByteAtATimeIsClosedByTheRequestTimeout) {
  ServerOptions o;
  o.request_timeout = 400ms;
  o.idle_timeout = 0ms;
  Start(o);
  auto good = Client();
  const int fd = ConnectLoopback(server_->tcp_port());
  const std::vector<std::byte> frame = GetFrame("k", 1);
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < frame.size() && !closed; ++i) {  // 1 byte per 100 ms: ~3 s
    if (::send(fd, &frame[i], 1, MSG_NOSIGNAL) != 1) closed = true;
    std::this_thread::sleep_for(100ms);
    closed = closed || server_->stats().request_timeouts > 0;
  }
  EXPECT_TRUE(ClosedByPeer(fd));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 2500ms) << "the request timeout must close the slow sender (the frame takes 3 s)";
  ::close(fd);
  EXPECT_EQ(server_->stats().request_timeouts, 1u);
  EXPECT_TRUE(good->Ping().ok()) << "other clients are unaffected";
  EXPECT_TRUE(WaitFor([&] { return server_->stats().connections_open == 1; }));
}

TEST_F(ServerFaultsTest, APartialFrameThenSilenceIsClosedAndItsValueReleased) {
  ServerOptions o;
  o.request_timeout = 300ms;
  Start(o);
  // A PUT announcing a 1 MiB value, of which only 1000 bytes ever arrive.
  const std::vector<std::byte> value = RandomBytes(1 << 20, 2);
  const protocol::PutItemView item{"partial", value};
  std::vector<std::byte> body = protocol::EncodePutBody(std::span(&item, 1)).value();
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(protocol::Op::kPut);
  h.request_id = 3;
  h.body_length = static_cast<std::uint32_t>(body.size());
  std::vector<std::byte> frame(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, frame.data());
  frame.insert(frame.end(), body.begin(), body.begin() + 1000);
  const int fd = ConnectLoopback(server_->tcp_port());
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  EXPECT_TRUE(ClosedByPeer(fd));
  ::close(fd);
  EXPECT_EQ(server_->stats().request_timeouts, 1u);
  EXPECT_TRUE(WaitFor([&] { return host_->stats().bytes == 0; }))
      << "the half-received value's charge is released";
  EXPECT_FALSE(store_->Locate("partial") != protocol::Tier::kNone);
}

TEST_F(ServerFaultsTest, DisconnectingMidFrameLeavesNothingBehind) {
  ServerOptions o;
  Start(o);
  auto good = Client();
  for (std::size_t cut : {5u, 24u, 30u, 60u}) {  // inside the header, after it, inside the body
    const std::vector<std::byte> value = RandomBytes(50000, cut);
    const protocol::PutItemView item{"cut", value};
    std::vector<std::byte> body = protocol::EncodePutBody(std::span(&item, 1)).value();
    protocol::FrameHeader h;
    h.type = static_cast<std::uint8_t>(protocol::Op::kPut);
    h.body_length = static_cast<std::uint32_t>(body.size());
    std::vector<std::byte> frame(protocol::kFrameHeaderBytes);
    protocol::EncodeFrameHeader(h, frame.data());
    frame.insert(frame.end(), body.begin(), body.end());
    const int fd = ConnectLoopback(server_->tcp_port());
    ASSERT_EQ(::send(fd, frame.data(), cut, MSG_NOSIGNAL), static_cast<ssize_t>(cut));
    ::close(fd);
  }
  EXPECT_TRUE(WaitFor([&] { return server_->stats().connections_open == 1; }));
  EXPECT_EQ(host_->stats().bytes, 0u);
  EXPECT_TRUE(good->Ping().ok());
}

TEST_F(ServerFaultsTest, AClientThatStopsReadingIsClosedByTheIdleTimeout) {
  ServerOptions o;
  o.max_output_bytes = 1u << 20;
  o.idle_timeout = 500ms;
  Start(o);
  auto c = Client();
  ASSERT_TRUE(c->Put("big", RandomBytes(1 << 20, 3)).ok());
  c.reset();
  const int fd = ConnectLoopback(server_->tcp_port());
  int rcvbuf = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  const std::vector<std::byte> get = GetFrame("big", 1);
  for (int i = 0; i < 64; ++i) {  // 64 MiB of responses, never read
    if (::send(fd, get.data(), get.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) break;
  }
  EXPECT_TRUE(WaitFor([&] { return server_->stats().requests >= 3; })) << "GETs were read";
  EXPECT_TRUE(WaitFor([&] { return server_->stats().connections_open == 0; }, 3s))
      << "the stalled writer is closed";
  EXPECT_EQ(server_->stats().idle_timeouts, 1u);
  ::close(fd);
  EXPECT_TRUE(Client()->Ping().ok());
}

TEST_F(ServerFaultsTest, IdleConnectionsCloseAndBusyOnesStayOpen) {
  ServerOptions o;
  o.request_timeout = 800ms;
  o.idle_timeout = 800ms;  // generous: a loaded CI machine may stall the test thread a while
  Start(o);
  const int idle = ConnectLoopback(server_->tcp_port());
  auto busy = Client();
  for (int i = 0; i < 20; ++i) {  // 2 s of pings, 100 ms apart
    ASSERT_TRUE(busy->Ping().ok()) << i << ": idle_timeouts " << server_->stats().idle_timeouts
                                   << ", request_timeouts " << server_->stats().request_timeouts;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ClosedByPeer(idle));
  ::close(idle);
  EXPECT_EQ(server_->stats().idle_timeouts, 1u);
  EXPECT_EQ(server_->stats().request_timeouts, 0u);
}

// ---- lm:// ------------------------------------------------------------------------------------
TEST(LmServerFaultsTest, SlowPartialAndIdleClientsAreClosed) {
  HostTier host(HostTierOptions::With(64u << 20));
  Store store(host, nullptr);
  LmServerOptions o;
  o.listen = "127.0.0.1:0";
  o.request_timeout = 300ms;
  o.idle_timeout = 600ms;
  LmServer server(o, store);
  ASSERT_TRUE(server.Start().ok());
  // Half a header, then nothing: the request timeout.
  std::array<std::byte, lm::kRequestHeaderBytes> header{};
  header[0] = std::byte{lm::kCommandPut};
  header[4] = std::byte{100};  // a 100-byte payload
  header[36] = std::byte{'k'};
  const int slow = ConnectLoopback(server.port());
  ASSERT_EQ(::send(slow, header.data(), 90, MSG_NOSIGNAL), 90);
  // A whole header whose payload never comes: the request timeout too.
  const int partial = ConnectLoopback(server.port());
  ASSERT_EQ(::send(partial, header.data(), header.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(header.size()));
  const int idle = ConnectLoopback(server.port());
  EXPECT_TRUE(ClosedByPeer(slow));
  EXPECT_TRUE(ClosedByPeer(partial));
  EXPECT_TRUE(ClosedByPeer(idle));
  ::close(slow);
  ::close(partial);
  ::close(idle);
  EXPECT_EQ(server.stats().request_timeouts, 2u);
  EXPECT_EQ(server.stats().idle_timeouts, 1u);
  EXPECT_TRUE(WaitFor([&] { return server.stats().connections_open == 0; }));
  EXPECT_EQ(host.stats().bytes, 0u) << "the unfinished PUT's value is released";
  server.Stop();
}

// ---- SSD faults behind a running server -------------------------------------------------------
TEST(ServerSsdFaultsTest, ReadErrorsAndAFullDiskNeverServeWrongBytes) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvdepot-ssd-faults-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::atomic<bool> fail_reads{false}, disk_full{false};
  SsdTierOptions so;
  so.dir = dir.string();
  so.capacity_bytes = 16 << 20;
  so.segment_bytes = 2 << 20;
  so.durability = SsdDurability::kSync;
  so.write_policy = SsdWritePolicy::kWriteThrough;
  so.fault = [&](const ssd::IoRequest& r) {
    if (r.kind == ssd::IoKind::kRead && fail_reads) return -EIO;
    if (r.kind == ssd::IoKind::kAllocate && disk_full) return -ENOSPC;
    return 0;
  };
  auto ssd = SsdTier::Open(so);
  ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
  HostTier host(HostTierOptions::With(16 << 20));
  Store store(host, ssd->get());
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.limits.max_value_bytes = 1 << 20;
  Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  client::ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string(server.tcp_port());
  auto conn = client::Connection::Connect(co);
  ASSERT_TRUE(conn.ok());
  auto& c = **conn;
  auto value = [](int i) { return RandomBytes(200000 + 1000 * i, 100 + i); };
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back("k" + std::to_string(i));
    ASSERT_TRUE(c.Put(keys.back(), value(i)).ok());
  }
  // Keys 0-3 only on the SSD; 4-7 in memory too.
  for (int i = 0; i < 4; ++i) host.Erase(keys[i]);
  auto check_all = [&](bool reads_fail) {
    std::uint32_t next = 0;
    ASSERT_TRUE(
        c.Get(keys, [&](const client::GetItem& item) {
           EXPECT_EQ(item.index, next++);
           if (item.status.ok()) {
             const auto want = value(static_cast<int>(item.index));
             EXPECT_TRUE(std::equal(item.value.begin(), item.value.end(), want.begin(), want.end()))
                 << "key " << item.index << " served wrong bytes";
           } else {
             EXPECT_TRUE(item.status.code() == StatusCode::kIOError ||
                         item.status.code() == StatusCode::kNotFound)
                 << item.status.ToString();
             EXPECT_LT(item.index, 4u) << "memory-resident keys must keep serving";
           }
           if (reads_fail && item.index < 4) {
             EXPECT_FALSE(item.status.ok());
           }
           if (item.index >= 4) {
             EXPECT_TRUE(item.status.ok());
           }
         }).ok());
    EXPECT_EQ(next, keys.size());
  };
  fail_reads = true;
  check_all(/*reads_fail=*/true);
  EXPECT_GT((*ssd)->stats().read_errors, 0u);
  fail_reads = false;
  for (int i = 0; i < 4; ++i) host.Erase(keys[i]);  // (promoted copies, if any)
  check_all(/*reads_fail=*/false);
  // A full disk: durable PUTs report the failure, the values are still served from memory.
  disk_full = true;
  std::vector<std::string> more;
  int failed = 0;
  for (int i = 8; i < 24; ++i) {
    more.push_back("k" + std::to_string(i));
    const auto v = value(i);
    const protocol::PutItemView item{more.back(), v};
    auto codes = c.Put(std::span(&item, 1));
    ASSERT_TRUE(codes.ok()) << codes.status().ToString();
    if ((*codes)[0] != StatusCode::kOk) {
      EXPECT_EQ((*codes)[0], StatusCode::kResourceExhausted);
      ++failed;
    }
  }
  EXPECT_GT(failed, 0) << "16 x 200 KB must need a new 2 MiB segment";
  EXPECT_GT((*ssd)->stats().write_errors, 0u);
  for (int i = 8; i < 24; ++i) {
    auto got = c.Get("k" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << "k" << i << ": the memory tier keeps serving";
    EXPECT_EQ(**got, value(i));
  }
  EXPECT_TRUE(c.Ping().ok());
  server.Stop();
  (*ssd)->Close();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvdepot::daemon
