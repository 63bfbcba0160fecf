// Every request type's limit errors (docs/protocol.md): a well-formed request over a limit — a
// count of 0 or above limits.max_batch, a key of 0 bytes or longer than limits.max_key_bytes —
// gets an `out_of_range` response labelled with the request's own operation and id, and the
// connection stays open: a PING sent right behind it on the same connection is answered. A PUT
// refuses an over-limit item alone (its status list says out_of_range for that item, the others
// are stored) and an over-limit count as a whole, skipping its body. Raw frames, so that the
// client library's own checks are not in the way.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "in_process_server.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/protocol/protocol.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using ::kvdepot::test_socket::ConnectLoopback;
using protocol::Op;

// Little-endian body builder.
class Body {
 public:
  Body& U8(std::uint8_t v) { return Raw(&v, 1); }
  Body& U16(std::uint16_t v) {
    std::byte b[2];
    StoreLE<std::uint16_t>(b, v);
    return Raw(b, 2);
  }
  Body& U32(std::uint32_t v) {
    std::byte b[4];
    StoreLE<std::uint32_t>(b, v);
    return Raw(b, 4);
  }
  Body& U64(std::uint64_t v) {
    std::byte b[8];
    StoreLE<std::uint64_t>(b, v);
    return Raw(b, 8);
  }
  Body& Key(const std::string& k) {  // u16 length, bytes (any length: limits are under test)
    U16(static_cast<std::uint16_t>(k.size()));
    return Raw(k.data(), k.size());
  }
  Body& KeyList(const std::vector<std::string>& keys) {
    U32(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) Key(k);
    return *this;
  }
  Body& PutItem(const std::string& key, const std::string& value) {
    Key(key).U64(value.size());
    return Raw(value.data(), value.size());
  }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  Body& Raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<std::byte> bytes_;
};

std::vector<std::byte> Frame(Op op, std::uint64_t id, const std::vector<std::byte>& body) {
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(op);
  h.request_id = id;
  h.body_length = static_cast<std::uint32_t>(body.size());
  std::vector<std::byte> out(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, out.data());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

bool ReadExact(int fd, std::byte* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

struct Response {
  protocol::FrameHeader header;
  std::vector<std::byte> body;
};

// The next response frame, or nullopt when the connection closed or timed out (5 s).
std::optional<Response> ReadResponse(int fd) {
  std::array<std::byte, protocol::kFrameHeaderBytes> head{};
  if (!ReadExact(fd, head.data(), head.size())) return std::nullopt;
  auto h = protocol::DecodeFrameHeader(head, protocol::Limits{}, /*expect_response=*/true);
  if (!h.ok()) return std::nullopt;
  Response r{*h, std::vector<std::byte>(h->body_length)};
  if (!ReadExact(fd, r.body.data(), r.body.size())) return std::nullopt;
  return r;
}

std::string Message(const Response& r) {
  return std::string(reinterpret_cast<const char*>(r.body.data()), r.body.size());
}

class ServerLimitsTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    socket_path_ = (std::filesystem::temp_directory_path() /
                    ("kvdepot-limits-" + std::to_string(::getpid()) + ".sock"))
                       .string();
    ServerOptions o;
    o.unix_path = socket_path_;
    StartServerWith(HostTierOptions::With(64u << 20), o);
  }

  int ConnectUnix() const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path_.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return -1;
    }
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }

  // Sends `op` with `body` and a PING behind it on one connection; expects an out_of_range
  // answer to the first (its op, its id, a message naming `what`) and a PING answer after it.
  void ExpectOutOfRangeAndOpen(Op op, const Body& body, const std::string& what,
                               bool unix_socket = false) {
    SCOPED_TRACE(std::string(protocol::OpName(op)) + ": " + what);
    const int fd = unix_socket ? ConnectUnix() : ConnectLoopback(server_->tcp_port());
    ASSERT_GE(fd, 0);
    auto bytes = Frame(op, 41, body.bytes());
    const auto ping = Frame(Op::kPing, 42, {});
    bytes.insert(bytes.end(), ping.begin(), ping.end());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    auto first = ReadResponse(fd);
    ASSERT_TRUE(first.has_value()) << "no answer: the connection closed";
    EXPECT_EQ(first->header.type, static_cast<std::uint8_t>(op) | protocol::kResponseBit);
    EXPECT_EQ(first->header.request_id, 41u);
    EXPECT_EQ(first->header.status, static_cast<std::uint16_t>(StatusCode::kOutOfRange))
        << Message(*first);
    EXPECT_NE(Message(*first).find(what), std::string::npos) << Message(*first);
    auto second = ReadResponse(fd);
    ASSERT_TRUE(second.has_value()) << "the connection was closed after the error";
    EXPECT_EQ(second->header.type, static_cast<std::uint8_t>(Op::kPing) | protocol::kResponseBit);
    EXPECT_EQ(second->header.request_id, 42u);
    EXPECT_EQ(second->header.status, 0);
    ::close(fd);
  }

  std::string socket_path_;
};

const std::string kLongKey(257, 'k');  // one past the default limits.max_key_bytes

std::vector<std::string> Keys(std::size_t n) {
  return std::vector<std::string>(n, "k");
}

TEST_F(ServerLimitsTest, KeyListRequestsAnswerOutOfRangeAndKeepTheConnection) {
  for (Op op : {Op::kGet, Op::kLookup, Op::kDelete}) {
    ExpectOutOfRangeAndOpen(op, Body().KeyList({}), "count 0");
    ExpectOutOfRangeAndOpen(op, Body().KeyList(Keys(4097)), "count 4097");
    ExpectOutOfRangeAndOpen(op, Body().KeyList({"a", ""}), "length 0");
    ExpectOutOfRangeAndOpen(op, Body().KeyList({kLongKey}), "length 257");
  }
  // GET_AS and LEASE_GET: a 4-byte prefix, then the key list.
  auto get_as = [](const std::vector<std::string>& keys) {
    return Body().U8(0).U8(0).U8(0).U8(0).KeyList(keys);
  };
  ExpectOutOfRangeAndOpen(Op::kGetAs, get_as({}), "count 0");
  ExpectOutOfRangeAndOpen(Op::kGetAs, get_as(Keys(4097)), "count 4097");
  ExpectOutOfRangeAndOpen(Op::kGetAs, get_as({kLongKey}), "length 257");
  ExpectOutOfRangeAndOpen(Op::kLeaseGet, get_as({}), "count 0", /*unix_socket=*/true);
  ExpectOutOfRangeAndOpen(Op::kLeaseGet, get_as({""}), "length 0", /*unix_socket=*/true);
  ExpectOutOfRangeAndOpen(Op::kLeaseGet, get_as({kLongKey}), "length 257",
                          /*unix_socket=*/true);
}

TEST_F(ServerLimitsTest, ReleaseAndScanAnswerOutOfRangeAndKeepTheConnection) {
  // (A RELEASE of 4097 ids is longer than any valid RELEASE body: malformed, not a limit.)
  ExpectOutOfRangeAndOpen(Op::kRelease, Body().U32(0), "count 0", /*unix_socket=*/true);
  auto scan = [](std::uint32_t limit, const std::string& prefix) {
    return Body().U32(limit).U8(0).U8(0).Key(prefix).Key("");
  };
  ExpectOutOfRangeAndOpen(Op::kScan, scan(0, ""), "limit");
  ExpectOutOfRangeAndOpen(Op::kScan, scan(4097, ""), "limit");
  ExpectOutOfRangeAndOpen(Op::kScan, scan(10, kLongKey), "too long");
}

TEST_F(ServerLimitsTest, PutCountOverTheLimitIsRefusedWholeAndItsBodySkipped) {
  ExpectOutOfRangeAndOpen(Op::kPut, Body().U32(0), "count 0");
  // 4097 items that are all there: the whole body is skipped, and nothing is stored.
  Body many;
  many.U32(4097);
  for (int i = 0; i < 4097; ++i) many.PutItem("many" + std::to_string(i), "v");
  ExpectOutOfRangeAndOpen(Op::kPut, many, "count 4097");
  EXPECT_EQ(host_->stats().chunks, 0u);
}

TEST_F(ServerLimitsTest, PutKeyOverTheLimitRefusesThatItemOnly) {
  const int fd = ConnectLoopback(server_->tcp_port());
  ASSERT_GE(fd, 0);
  Body put;
  put.U32(4).PutItem("first", "1").PutItem("", "empty key").PutItem(kLongKey, "long key");
  put.PutItem("last", std::string(100000, 'z'));
  auto bytes = Frame(Op::kPut, 7, put.bytes());
  const auto ping = Frame(Op::kPing, 8, {});
  bytes.insert(bytes.end(), ping.begin(), ping.end());
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  auto answer = ReadResponse(fd);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->header.type, static_cast<std::uint8_t>(Op::kPut) | protocol::kResponseBit);
  EXPECT_EQ(answer->header.request_id, 7u);
  ASSERT_EQ(answer->header.status, 0);
  auto codes = protocol::DecodeStatusList(answer->body);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  EXPECT_EQ(*codes, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOutOfRange,
                                             StatusCode::kOutOfRange, StatusCode::kOk}));
  auto pong = ReadResponse(fd);
  ASSERT_TRUE(pong.has_value());
  EXPECT_EQ(pong->header.request_id, 8u);
  ::close(fd);
  EXPECT_TRUE(store_->Locate("first") != protocol::Tier::kNone);
  EXPECT_TRUE(store_->Locate("last") != protocol::Tier::kNone);
  EXPECT_EQ(host_->stats().chunks, 2u);
}

// A key length that runs past the frame's body is a malformed frame, not a limit: the
// connection closes after a corruption answer.
TEST_F(ServerLimitsTest, AnOverLimitKeyPastTheBodyIsMalformed) {
  const int fd = ConnectLoopback(server_->tcp_port());
  ASSERT_GE(fd, 0);
  const auto bytes = Frame(Op::kPut, 9, Body().U32(1).U16(300).U8(1).bytes());
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  auto answer = ReadResponse(fd);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->header.type, static_cast<std::uint8_t>(Op::kPut) | protocol::kResponseBit);
  EXPECT_EQ(answer->header.request_id, 9u);
  EXPECT_EQ(answer->header.status, static_cast<std::uint16_t>(StatusCode::kCorruption));
  EXPECT_FALSE(ReadResponse(fd).has_value());
  ::close(fd);
}

}  // namespace
}  // namespace kvdepot::daemon
