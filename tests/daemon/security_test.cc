// Authentication, per-namespace isolation and TLS (docs/security.md), end to end: a real Server
// on an ephemeral port driven by the real client library. Certificates are made at test time
// with the openssl CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "../common/test_cert.h"
#include "in_process_server.h"
#include "kvdepot/client/client.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/config.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/metrics.h"
#include "kvdepot/daemon/server.h"

namespace kvdepot::daemon {
namespace {

namespace fs = std::filesystem;
using client::ClientOptions;
using client::Connection;

const std::string kNs1(16, '\x11');
const std::string kNs2(16, '\x22');
const char* kNs1Hex = "11111111111111111111111111111111";
const char* kNs2Hex = "22222222222222222222222222222222";
const char* kAdmin = "admin-token-0123456789";
const char* kTenant1 = "tenant1-token-abcdefgh";
const char* kTenant2 = "tenant2-token-ijklmnop";

std::string ChunkKey(const std::string& ns, char fill) {
  return ns + std::string(32, fill);
}

std::vector<std::byte> Value(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

TEST(AuthenticatorTest, ParsesScopesAndChecksTokens) {
  const std::string text = std::string("# tokens\n\n") + kAdmin + " *\n" + kTenant1 +
                           "  ns=" + kNs1Hex + "," + kNs2Hex + "\r\n";
  auto auth = Authenticator::Parse(text, "tokens");
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_EQ((*auth)->size(), 2u);
  const AuthScope* admin = (*auth)->Check(kAdmin);
  ASSERT_NE(admin, nullptr);
  EXPECT_TRUE(admin->all);
  EXPECT_TRUE(admin->AllowsKey("plain-key"));
  const AuthScope* t1 = (*auth)->Check(kTenant1);
  ASSERT_NE(t1, nullptr);
  EXPECT_FALSE(t1->all);
  EXPECT_TRUE(t1->AllowsKey(ChunkKey(kNs1, 'a')));
  EXPECT_TRUE(t1->AllowsKey(ChunkKey(kNs2, 'a')));
  EXPECT_FALSE(t1->AllowsKey(ChunkKey(std::string(16, '\x33'), 'a')));
  EXPECT_FALSE(t1->AllowsKey(kNs1 + "short"));  // not a 48-byte chunk key: default namespace
  EXPECT_EQ((*auth)->Check("admin-token-012345678"), nullptr);
  EXPECT_EQ((*auth)->Check(""), nullptr);
}

TEST(AuthenticatorTest, RejectsBadFiles) {
  for (const std::string bad : {"", "# only a comment\n", "token-without-scope-1234\n", "short *\n",
                                "long-enough-token-123 ns=1234\n",
                                "long-enough-token-123 ns=zz111111111111111111111111111111\n",
                                "long-enough-token-123 everything\n",
                                "long-enough-token-123 *\nlong-enough-token-123 *\n"}) {
    auto auth = Authenticator::Parse(bad, "f");
    EXPECT_FALSE(auth.ok()) << "accepted: " << bad;
    if (!auth.ok()) {
      EXPECT_EQ(auth.status().message().rfind("f", 0), 0u);
    }
  }
  auto line = Authenticator::Parse("long-enough-token-123 *\nshort *\n", "f");
  ASSERT_FALSE(line.ok());
  EXPECT_NE(line.status().message().find("f:2:"), std::string::npos);
}

TEST(SecurityConfigTest, LmNeedsExplicitOptInUnderAuthAndTlsFilesGoTogether) {
  Config c;
  ASSERT_TRUE(ApplyConfigFlag("auth-token-file", "/etc/kvdepot/tokens", c).ok());
  ASSERT_TRUE(ApplyConfigFlag("lm-listen", "127.0.0.1:65432", c).ok());
  const Status refused = ValidateConfig(c);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("lm.allow_unauthenticated"), std::string::npos);
  ASSERT_TRUE(ApplyConfigFlag("lm-allow-unauthenticated", "true", c).ok());
  EXPECT_TRUE(ValidateConfig(c).ok());
  EXPECT_FALSE(ApplyConfigFlag("lm-allow-unauthenticated", "yes please", c).ok());

  Config t;
  ASSERT_TRUE(ApplyConfigFlag("tls-cert-file", "server.crt", t).ok());
  EXPECT_FALSE(ValidateConfig(t).ok());  // no key
  ASSERT_TRUE(ApplyConfigFlag("tls-key-file", "server.key", t).ok());
  EXPECT_TRUE(ValidateConfig(t).ok());
  ASSERT_TRUE(ApplyConfigFlag("listen", "", t).ok());
  ASSERT_TRUE(ApplyConfigFlag("unix", "/tmp/x.sock", t).ok());
  EXPECT_FALSE(ValidateConfig(t).ok());  // TLS without a TCP listener
}

class SecurityTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvdepot-sec-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    InProcessServerTest::TearDown();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Start(bool auth, const TlsOptions& tls = {}) {
    HostTierOptions host = HostTierOptions::With(64ull << 20, EvictionPolicy::kLru, 4);
    host.namespace_quotas = quotas_;
    ServerOptions o;
    o.io_threads = 2;
    o.tls = tls;
    if (auth) {
      auto a = Authenticator::Parse(std::string(kAdmin) + " *\n" + kTenant1 + " ns=" + kNs1Hex +
                                        "\n" + kTenant2 + " ns=" + kNs2Hex + "\n",
                                    "test-tokens");
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      o.auth = *a;
    }
    StartServerWith(host, o);
  }
  ClientOptions Options(const std::string& token = "") const {
    ClientOptions o = TcpOptions(std::chrono::milliseconds(5000));
    o.token = token;
    return o;
  }
  std::unique_ptr<Connection> Connect(const ClientOptions& o) { return ConnectOrFail(o); }
  // A self-signed certificate and its key: PEM files NAME.crt and NAME.key in the test's directory.
  std::string MakeCert(const std::string& name) { return test::MakeSelfSignedCert(dir_, name); }

  fs::path dir_;
  std::map<std::string, std::uint64_t> quotas_;
};

TEST_F(SecurityTest, RequestBeforeAuthIsRefusedAndClosed) {
  Start(/*auth=*/true);
  auto c = Connect(Options());
  ASSERT_NE(c, nullptr);
  const Status s = c->Ping();
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s.ToString();
  // The server closed the connection: the next request finds it gone.
  const Status again = c->Ping();
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(c->broken());
  EXPECT_GE(server_->stats().auth_failures, 1u);
}

TEST_F(SecurityTest, PutBeforeAuthStoresNothing) {
  Start(/*auth=*/true);
  auto c = Connect(Options());
  ASSERT_NE(c, nullptr);
  const auto v = Value("secret");
  EXPECT_FALSE(c->Put(ChunkKey(kNs1, 'p'), v).ok());
  EXPECT_EQ(store_->Locate(ChunkKey(kNs1, 'p')), protocol::Tier::kNone);
}

TEST_F(SecurityTest, WrongTokenIsRefusedAndLoggedRateLimited) {
  Start(/*auth=*/true);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    auto c = Connection::Connect(Options("wrong-token-0123456789"));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kUnauthenticated) << c.status().ToString();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::size_t lines = 0;
  for (std::size_t at = log.find("authentication failed"); at != std::string::npos;
       at = log.find("authentication failed", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 2u) << log;  // at most one a second
  EXPECT_EQ(log.find("wrong-token"), std::string::npos) << "a token reached the log";
  EXPECT_EQ(server_->stats().auth_failures, 5u);
  Metrics metrics("test");  // exported to Prometheus too
  metrics.SetServerSource([this] { return server_->stats(); });
  const std::string text = metrics.Text();
  EXPECT_NE(text.find("# TYPE kvdepot_auth_failures_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("\nkvdepot_auth_failures_total 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nkvdepot_tls_handshake_failures_total 0\n"), std::string::npos);
}

TEST_F(SecurityTest, RightTokenWorks) {
  Start(/*auth=*/true);
  auto c = Connect(Options(kAdmin));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
  const auto v = Value("hello");
  EXPECT_TRUE(c->Put("plain-key", v).ok());
  auto got = c->Get("plain-key");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, v);
  EXPECT_TRUE(c->Stats().ok());
}

TEST_F(SecurityTest, TokenIsAcceptedByServerWithoutAuth) {
  Start(/*auth=*/false);
  auto c = Connect(Options("any-token-at-all-123"));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(SecurityTest, NamespacesAreIsolated) {
  Start(/*auth=*/true);
  auto t1 = Connect(Options(kTenant1));
  auto t2 = Connect(Options(kTenant2));
  auto admin = Connect(Options(kAdmin));
  ASSERT_TRUE(t1 && t2 && admin);
  const std::string k1 = ChunkKey(kNs1, 'a'), k2 = ChunkKey(kNs2, 'b');
  const auto v1 = Value("one"), v2 = Value("two");
  ASSERT_TRUE(t1->Put(k1, v1).ok());
  ASSERT_TRUE(t2->Put(k2, v2).ok());
  ASSERT_TRUE(admin->Put("plain-key", v1).ok());

  // PUT: per item; the allowed item is stored, the other refused.
  const std::string c1 = ChunkKey(kNs1, 'c'), c2 = ChunkKey(kNs2, 'c');
  const protocol::PutItemView items[] = {{c1, v1}, {c2, v1}, {"plain-key-2", v1}};
  auto codes = t1->Put(items);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  EXPECT_EQ((*codes)[0], StatusCode::kOk);
  EXPECT_EQ((*codes)[1], StatusCode::kPermissionDenied);
  EXPECT_EQ((*codes)[2], StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->Locate(ChunkKey(kNs2, 'c')), protocol::Tier::kNone);
  EXPECT_EQ(store_->Locate("plain-key-2"), protocol::Tier::kNone);

  // GET / LOOKUP / DELETE of another namespace: refused whether the key exists or not.
  for (const std::string& key : {k2, ChunkKey(kNs2, 'z'), std::string("plain-key")}) {
    EXPECT_EQ(t1->Get(key).status().code(), StatusCode::kPermissionDenied);
    const std::string one[] = {key};
    EXPECT_EQ(t1->Lookup(one).status().code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(t1->Delete(one).status().code(), StatusCode::kPermissionDenied);
    const std::string mixed[] = {k1, key};  // one forbidden key refuses the whole request
    EXPECT_EQ(t1->Lookup(mixed).status().code(), StatusCode::kPermissionDenied);
  }
  EXPECT_NE(store_->Locate(k2), protocol::Tier::kNone);  // the DELETE did not happen
  // GET_AS (transcoding) is a read like GET: refused before the store is touched.
  {
    const std::string other[] = {k2};
    int answered = 0;
    const Status as = t1->GetAs(other, CodecId::kRaw, [&](const client::GetItem&) { ++answered; });
    EXPECT_EQ(as.code(), StatusCode::kPermissionDenied) << as.ToString();
    EXPECT_EQ(answered, 0);
  }
  // Own namespace works, and the connection survived the refusals.
  auto own = t1->Get(k1);
  ASSERT_TRUE(own.ok() && own->has_value());
  EXPECT_EQ(**own, v1);
  const std::string own_keys[] = {k1};
  auto lookup = t1->Lookup(own_keys);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->prefix_length, 1u);

  // SCAN: without a prefix only the token's namespaces; another namespace's prefix is refused.
  protocol::ScanRequest all;
  all.limit = 100;
  auto listed = t1->Scan(all);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::set<std::string> keys;
  for (const auto& e : listed->entries) keys.insert(e.key);
  EXPECT_EQ(keys, (std::set<std::string>{k1, ChunkKey(kNs1, 'c')}));
  protocol::ScanRequest other = all;
  other.prefix = kNs2;
  EXPECT_EQ(t1->Scan(other).status().code(), StatusCode::kPermissionDenied);
  protocol::ScanRequest paged = all;  // paging across the namespace works with limit 1
  paged.limit = 1;
  std::set<std::string> pages;
  for (int i = 0; i < 5; ++i) {
    auto page = t1->Scan(paged);
    ASSERT_TRUE(page.ok());
    for (const auto& e : page->entries) pages.insert(e.key);
    if (page->next_cursor.empty()) break;
    paged.cursor = page->next_cursor;
  }
  EXPECT_EQ(pages, keys);
  auto everything = admin->Scan(all);
  ASSERT_TRUE(everything.ok());
  EXPECT_EQ(everything->entries.size(), 4u);

  auto t2_get = t2->Get(k1);
  EXPECT_EQ(t2_get.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(SecurityTest, TlsRoundTrip) {
  const std::string cert = MakeCert("server");
  Start(/*auth=*/true, TlsOptions{cert + ".crt", cert + ".key", ""});
  ClientOptions o = Options(kAdmin);
  o.tls = true;
  o.tls_ca_file = cert + ".crt";
  auto c = Connect(o);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->tls());
  std::vector<std::byte> big(3 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 131);
  ASSERT_TRUE(c->Put("big", big).ok());
  auto got = c->Get("big");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ(**got, big);
}

TEST_F(SecurityTest, TlsWithWrongCaFailsCleanly) {
  const std::string cert = MakeCert("server");
  const std::string other = MakeCert("other");
  Start(/*auth=*/false, TlsOptions{cert + ".crt", cert + ".key", ""});
  ClientOptions o = Options();
  o.tls = true;
  o.tls_ca_file = other + ".crt";
  auto c = Connection::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("certificate"), std::string::npos) << c.status().ToString();
  o.tls_ca_file = cert + ".crt";
  o.tls_server_name = "not-this-host.example";  // right CA, wrong name
  EXPECT_FALSE(Connection::Connect(o).ok());
}

TEST_F(SecurityTest, PlainClientOnTlsPortFailsWithoutHurtingOthers) {
  const std::string cert = MakeCert("server");
  Start(/*auth=*/false, TlsOptions{cert + ".crt", cert + ".key", ""});
  ClientOptions tls = Options();
  tls.tls = true;
  tls.tls_ca_file = cert + ".crt";
  auto good = Connect(tls);
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->Put("k", Value("v")).ok());
  for (int i = 0; i < 3; ++i) {
    auto plain = Connection::Connect(Options());
    ASSERT_TRUE(plain.ok());  // TCP connects; the first request fails
    const Status s = (*plain)->Ping();
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  }
  EXPECT_TRUE(good->Ping().ok());
  auto got = good->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_GE(server_->stats().tls_handshake_failures, 3u);
  Metrics metrics("test");  // exported to Prometheus too
  metrics.SetServerSource([this] { return server_->stats(); });
  const std::string text = metrics.Text();
  const std::string series = "\nkvdepot_tls_handshake_failures_total ";
  const auto at = text.find(series);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(std::stod(text.substr(at + series.size())),
            static_cast<double>(server_->stats().tls_handshake_failures));
  EXPECT_NE(text.find("\nkvdepot_auth_failures_total 0\n"), std::string::npos);
}

TEST_F(SecurityTest, MutualTlsRequiresClientCertificate) {
  const std::string cert = MakeCert("server");
  const std::string ca = MakeCert("client");  // self-signed: it is its own CA
  Start(/*auth=*/false, TlsOptions{cert + ".crt", cert + ".key", ca + ".crt"});
  ClientOptions o = Options();
  o.tls = true;
  o.tls_ca_file = cert + ".crt";
  {
    auto c = Connection::Connect(o);  // TLS 1.3: the refusal may surface at the first request
    EXPECT_TRUE(!c.ok() || !(*c)->Ping().ok());
  }
  o.tls_cert_file = ca + ".crt";
  o.tls_key_file = ca + ".key";
  auto c = Connect(o);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(SecurityTest, StatsListsOnlyTheScopesQuotas) {
  quotas_ = {{kNs1, 1 << 20}, {kNs2, 1 << 20}};
  Start(/*auth=*/true);
  auto t1 = Connect(Options(kTenant1));
  auto admin = Connect(Options(kAdmin));
  ASSERT_TRUE(t1 && admin);
  auto mine = t1->Stats();
  auto all = admin->Stats();
  ASSERT_TRUE(mine.ok() && all.ok());
  EXPECT_NE(mine->find(kNs1Hex), std::string::npos);
  EXPECT_EQ(mine->find(kNs2Hex), std::string::npos) << *mine;
  EXPECT_NE(all->find(kNs2Hex), std::string::npos);
}

}  // namespace
}  // namespace kvdepot::daemon
