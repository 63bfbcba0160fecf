// TLS between the members of a cluster (docs/cluster.md, "TLS between members"), on real kvdepotd
// processes and a real etcd: members whose listener speaks TLS forward to each other over TLS
// (the peer's certificate checked against cluster.tls_ca_file and the host of its advertise
// address), with AUTH inside the session and with mutual TLS; the SDK's smart client with TLS
// options reaches every owner with them; a member that does not trust the others' CA answers
// misses for their keys, logs why (rate-limited), and keeps running.
#include <gtest/gtest.h>

#include <fstream>

#include "../common/test_cert.h"
#include "../common/wait.h"
#include "cluster_daemon_fixture.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;
using test::WaitFor;

constexpr std::size_t kChunks = 24;

std::string KeyOf(std::size_t i) {
  return "tls-prompt/chunk-" + std::to_string(i);
}

std::vector<std::byte> ValueOf(std::size_t i) {
  std::vector<std::byte> v(8192 + i * 1031);
  for (std::size_t b = 0; b < v.size(); ++b) v[b] = static_cast<std::byte>((b * 167 + i) & 0xff);
  return v;
}

std::size_t CountOf(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++n;
  return n;
}

std::uint64_t ConnectionsTotal(const test::KvdepotdChild& node) {
  auto c = client::Connection::Connect(node.Options());
  if (!c.ok()) return 0;
  auto stats = (*c)->Stats();
  if (!stats.ok()) return 0;
  const auto j = nlohmann::json::parse(*stats, nullptr, false);
  return j.is_discarded() ? 0 : j.value("connections_total", std::uint64_t{0});
}

class ClusterTlsTest : public ClusterDaemonTest {
 protected:
  void SetUp() override {
    ClusterDaemonTest::SetUp();
    if (IsSkipped()) return;
    cert_ = test::MakeSelfSignedCert(certs_.path(), "member");  // its own CA
  }

  // The listener's TLS flags with `cert`, trusting `ca` for peers.
  std::vector<std::string> TlsFlags(const std::string& ca) const {
    return {"--tls-cert-file", cert_ + ".crt",          "--tls-key-file",
            cert_ + ".key",    "--cluster-tls-ca-file", ca};
  }

  // Every node sees `n` members.
  void AwaitMembers(const std::vector<std::unique_ptr<test::KvdepotdChild>>& nodes, std::size_t n) {
    ASSERT_TRUE(AllSee(nodes, n, milliseconds(10000)));
  }

  // PUTs the chunks through `through`, then reads each one through every node, byte-identical.
  void PutThroughOneReadThroughAll(const std::vector<std::unique_ptr<test::KvdepotdChild>>& nodes) {
    auto a = client::Connection::Connect(nodes[0]->Options());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (std::size_t i = 0; i < kChunks; ++i) {
      ASSERT_TRUE((*a)->Put(KeyOf(i), ValueOf(i)).ok()) << i;
    }
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      auto c = client::Connection::Connect(nodes[n]->Options());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      for (std::size_t i = 0; i < kChunks; ++i) {
        auto got = (*c)->Get(KeyOf(i));
        ASSERT_TRUE(got.ok()) << "node " << n << ": " << got.status().ToString();
        ASSERT_TRUE(got->has_value()) << "node " << n << " " << KeyOf(i);
        ASSERT_EQ(**got, ValueOf(i)) << "node " << n << " " << KeyOf(i);
      }
    }
  }

  test::TempTestDir certs_{"kvd-cl-certs"};
  std::string cert_;
};

// Three TLS members with auth: a chunk PUT through one node is read byte-identical through every
// node (forwarded over TLS, AUTH inside the session); the smart client with TLS options reads
// every chunk, connecting with TLS to the other owners itself.
TEST_F(ClusterTlsTest, MembersForwardOverTlsAndTheSmartClientReachesEveryOwner) {
  const std::string token = "cluster-tls-token-0123456789";
  { std::ofstream(certs_.path() / "tokens") << token << " *\n"; }
  node_token_ = token;
  std::vector<std::string> flags = TlsFlags(cert_ + ".crt");
  flags.insert(flags.end(), {"--auth-token-file", (certs_.path() / "tokens").string()});
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  for (const auto* d : {&d1, &d2, &d3}) nodes.push_back(StartNode(*d, flags));
  AwaitMembers(nodes, 3);
  PutThroughOneReadThroughAll(nodes);

  const std::uint64_t b_before = ConnectionsTotal(*nodes[1]);
  const std::uint64_t c_before = ConnectionsTotal(*nodes[2]);
  client::ClientOptions o;
  o.address = AddrOf(d1);
  o.token = token;
  o.tls = true;
  o.tls_ca_file = cert_ + ".crt";
  o.tls_server_name = "localhost";  // kept for the seed only: members are checked by address
  o.timeout = milliseconds(5000);
  client::Client smart(o);
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto got = smart.Get(KeyOf(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << KeyOf(i);
    ASSERT_EQ(**got, ValueOf(i)) << KeyOf(i);
  }
  // The smart client opened TLS connections of its own to the other owners (each STATS read
  // above and below is one more connection).
  EXPECT_GE(ConnectionsTotal(*nodes[1]), b_before + 2);
  EXPECT_GE(ConnectionsTotal(*nodes[2]), c_before + 2);
  for (const auto* d : {&d1, &d2, &d3}) {
    EXPECT_EQ(ReadAll(d->path() / "daemon.log").find("cluster peer unreachable"), std::string::npos)
        << ReadAll(d->path() / "daemon.log");
  }
}

// Mutual TLS: each listener requires a client certificate signed by tls.client_ca_file, which
// also verifies the peers (cluster.tls_ca_file unset); a member presents its own certificate.
TEST_F(ClusterTlsTest, MutualTlsMembersPresentTheirCertificate) {
  const std::vector<std::string> flags{"--tls-cert-file", cert_ + ".crt",         "--tls-key-file",
                                       cert_ + ".key",    "--tls-client-ca-file", cert_ + ".crt"};
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  for (const auto* d : {&d1, &d2, &d3}) nodes.push_back(StartNode(*d, flags));
  AwaitMembers(nodes, 3);
  PutThroughOneReadThroughAll(nodes);
}

// A member whose cluster.tls_ca_file did not sign the others' certificates: what it forwards
// fails the handshake, so a GET through it answers the owner's keys as misses (never an error),
// one log line per peer names the peer and the reason, and the member keeps serving.
TEST_F(ClusterTlsTest, AMemberWithTheWrongCaAnswersMissesAndSaysWhy) {
  const std::string other = test::MakeSelfSignedCert(certs_.path(), "other");
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  nodes.push_back(StartNode(d1, TlsFlags(cert_ + ".crt")));
  nodes.push_back(StartNode(d2, TlsFlags(cert_ + ".crt")));
  nodes.push_back(StartNode(d3, TlsFlags(other + ".crt")));
  AwaitMembers(nodes, 3);
  {
    auto a = client::Connection::Connect(nodes[0]->Options());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (std::size_t i = 0; i < kChunks; ++i) ASSERT_TRUE((*a)->Put(KeyOf(i), ValueOf(i)).ok());
  }
  auto c = client::Connection::Connect(nodes[2]->Options());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::size_t hits = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < kChunks; ++i) {
      auto got = (*c)->Get(KeyOf(i));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      if (!got->has_value()) continue;
      ASSERT_EQ(**got, ValueOf(i));
      ++hits;
    }
  }
  EXPECT_LT(hits, 3 * kChunks);        // the others' keys are misses
  EXPECT_TRUE(nodes[2]->WaitReady());  // still running and answering
  const std::string log = ReadAll(d3.path() / "daemon.log");
  EXPECT_NE(log.find("cluster peer unreachable"), std::string::npos) << log;
  EXPECT_NE(log.find("certificate did not verify"), std::string::npos) << log;
  EXPECT_TRUE(log.find(AddrOf(d1)) != std::string::npos ||
              log.find(AddrOf(d2)) != std::string::npos)
      << log;
  // Rate-limited: at most one line per peer per 10 s however many requests failed.
  EXPECT_LE(CountOf(log, "cluster peer unreachable"), 2u) << log;
}

}  // namespace
}  // namespace kvdepot::cluster
