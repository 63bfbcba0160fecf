// libkvdepot_lmcache.so (LMCache's native remote-backend ABI) loaded with dlopen from C
// (lmcache_so_smoke.c) against an in-process daemon; and its chunks read back over lm://.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "flat_json.h"
#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

extern "C" int kvdepot_lmcache_so_smoke(const char* so_path, const char* address);
extern "C" int kvdepot_lmcache_so_unreachable(const char* so_path);

namespace kvdepot {
namespace {

TEST(LmcacheSoTest, EveryFunctionWorksFromC) {
  daemon::HostTier tier(daemon::HostTierOptions::With(64ull << 20));
  daemon::Store store(tier, nullptr);
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  daemon::Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  const std::string addr = "127.0.0.1:" + std::to_string(server.tcp_port());
  EXPECT_EQ(kvdepot_lmcache_so_smoke(KVDEPOT_LMCACHE_SO, addr.c_str()), 0)
      << "failed check at lmcache_so_smoke.c line";
  server.Stop();
}

TEST(LmcacheSoTest, UnreachableDaemonFailsCleanly) {
  EXPECT_EQ(kvdepot_lmcache_so_unreachable(KVDEPOT_LMCACHE_SO), 0)
      << "failed check at lmcache_so_smoke.c line";
}

// A chunk PUT through lm:// (as LMCache's LMCServerConnector sends it) is stored through the
// Store and keeps its metadata; a GET echoes it.
TEST(LmServerTest, PutGetEchoesMetadataThroughTheStore) {
  daemon::HostTier tier(daemon::HostTierOptions::With(64ull << 20));
  daemon::Store store(tier, nullptr);
  daemon::LmServerOptions o;
  o.listen = "127.0.0.1:0";
  daemon::LmServer lm(o, store);
  ASSERT_TRUE(lm.Start().ok());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(lm.port());
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  auto header = [](std::int32_t cmd, std::int32_t len, const char* key) {
    std::string h(186, ' ');
    const std::int32_t ints[9] = {cmd, len, 1, 3, 1, 2, 16, 256, 1024};
    std::memcpy(h.data(), ints, sizeof(ints));
    std::memcpy(h.data() + 36, key, std::strlen(key));
    return h;
  };
  const std::string payload(1000, 'p');
  const std::string put = header(1, 1000, "model@2@1@ff") + payload;
  ASSERT_EQ(::send(fd, put.data(), put.size(), 0), static_cast<ssize_t>(put.size()));
  const std::string get = header(2, 0, "model@2@1@ff");
  ASSERT_EQ(::send(fd, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  std::int32_t reply[9];
  ASSERT_EQ(::recv(fd, reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
  EXPECT_EQ(reply[0], 200);
  EXPECT_EQ(reply[1], 1000);
  EXPECT_EQ(reply[2], 1);
  EXPECT_EQ(reply[3], 3);
  EXPECT_EQ(reply[4], 2);
  EXPECT_EQ(reply[7], 1024);
  EXPECT_EQ(reply[8], 1);
  std::string got(1000, '\0');
  ASSERT_EQ(::recv(fd, got.data(), got.size(), MSG_WAITALL), 1000);
  EXPECT_EQ(got, payload);
  ::close(fd);
  EXPECT_EQ(tier.stats().chunks, 1u);
  lm.Stop();
  EXPECT_EQ(lm.stats().puts, 1u);
  EXPECT_EQ(lm.stats().get_hits, 1u);
}

}  // namespace
}  // namespace kvdepot

namespace kvdepot::lmcache {
namespace {

TEST(FlatJsonTest, ReadsTopLevelScalarsAndSkipsNesting) {
  auto r = ParseFlatJsonObject(
      R"( {"address": "unix:/tmp/k.sock", "n": 8, "b": true, "esc": "a\"\u00e9\n",)"
      R"( "nested": {"x": ["}", {"y": 1}]}, "z": null} )");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->at("address"), "unix:/tmp/k.sock");
  EXPECT_EQ(r->at("n"), "8");
  EXPECT_EQ(r->at("b"), "true");
  EXPECT_EQ(r->at("esc"), "a\"\xc3\xa9\n");
  EXPECT_EQ(r->count("nested"), 0u);
  EXPECT_EQ(r->at("z"), "null");
}

TEST(FlatJsonTest, EveryTruncationAndFlipIsAnErrorNotACrash) {
  const std::string doc = R"({"address": "127.0.0.1:7600", "a": [1, {"b": "]"}], "n": -1.5})";
  ASSERT_TRUE(ParseFlatJsonObject(doc).ok());
  for (std::size_t n = 0; n < doc.size(); ++n) {
    EXPECT_FALSE(ParseFlatJsonObject(std::string_view(doc).substr(0, n)).ok()) << n;
  }
  for (std::size_t i = 0; i < doc.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = doc;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      (void)ParseFlatJsonObject(flipped);  // any outcome but a crash
    }
  }
  EXPECT_FALSE(ParseFlatJsonObject(std::string(1000, '[')).ok());
  EXPECT_FALSE(ParseFlatJsonObject("{\"a\":" + std::string(1000, '[')).ok());
}

TEST(FlatJsonTest, StrictLiteralsSurrogatePairsAndDepth) {
  EXPECT_FALSE(ParseFlatJsonObject(R"({"tls": tru})").ok());
  EXPECT_FALSE(ParseFlatJsonObject(R"({"tls": true,})").ok());
  EXPECT_FALSE(ParseFlatJsonObject(R"(["not", "an", "object"])").ok());
  EXPECT_FALSE(ParseFlatJsonObject(R"({"s": "\ud83d"})").ok());  // a lone high surrogate
  auto r = ParseFlatJsonObject(R"({"emoji": "\ud83d\ude00", "n": -1.5})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->at("emoji"), "\xf0\x9f\x98\x80");  // U+1F600 in UTF-8
  EXPECT_EQ(r->at("n"), "-1.5");
  const auto nested = [](int depth) {
    return R"({"a":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  EXPECT_TRUE(ParseFlatJsonObject(nested(10)).ok());
  EXPECT_FALSE(ParseFlatJsonObject(nested(100)).ok());
  EXPECT_FALSE(ParseFlatJsonObject(nested(100000)).ok());
  auto error = ParseFlatJsonObject(R"({"address": })");
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.status().message().find("byte"), std::string::npos) << error.status().message();
}

}  // namespace
}  // namespace kvdepot::lmcache

namespace kvdepot::daemon {
namespace {

TEST(LmConfigTest, KeysAndFlags) {
  Config c;
  EXPECT_TRUE(c.lm.listen.empty());  // off by default
  ASSERT_TRUE(ApplyConfigFlag("lm-listen", "127.0.0.1:65432", c).ok());
  ASSERT_TRUE(ApplyConfigFlag("lm-namespace", "staging", c).ok());
  ASSERT_TRUE(ApplyConfigFlag("lm-io-threads", "2", c).ok());
  ASSERT_TRUE(ApplyConfigFlag("lm-max-value-bytes", "8MiB", c).ok());
  EXPECT_EQ(c.lm.listen, "127.0.0.1:65432");
  EXPECT_EQ(c.lm.namespace_name, "staging");
  EXPECT_EQ(c.lm.io_threads, 2u);
  EXPECT_EQ(c.lm.max_value_bytes, 8u << 20);
  EXPECT_FALSE(ApplyConfigFlag("lm-namespace", "", c).ok());
  EXPECT_FALSE(ApplyConfigFlag("lm-io-threads", "0", c).ok());
  EXPECT_FALSE(ApplyConfigFlag("lm-max-value-bytes", "4GiB", c).ok());
}

TEST(LmServerTest, BadAddressesAreErrors) {
  HostTier tier(HostTierOptions::With(8ull << 20));
  Store store(tier, nullptr);
  for (const char* listen : {"nonsense", "127.0.0.1:99999", "not-an-ip:1"}) {
    LmServerOptions o;
    o.listen = listen;
    LmServer lm(o, store);
    EXPECT_EQ(lm.Start().code(), StatusCode::kInvalidArgument) << listen;
  }
}

}  // namespace
}  // namespace kvdepot::daemon
