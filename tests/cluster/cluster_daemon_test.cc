// Real kvdepotd processes in a cluster on a real etcd: they register, a SIGKILLed one leaves when
// its lease expires, a SIGSTOPped one is fenced past its lease and re-registers after SIGCONT, a
// SIGTERMed one leaves at once; and the cluster.* settings refuse bad values.
#include <gtest/gtest.h>
#include <signal.h>

#include "../common/wait.h"
#include "cluster_daemon_fixture.h"
#include "kvdepot/daemon/config.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;
using test::WaitFor;

TEST_F(ClusterDaemonTest, NodesRegisterAndLeaveByLeaseExpiryOrGracefully) {
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  auto a = StartNode(d1);
  auto b = StartNode(d2);
  auto c = StartNode(d3);
  ASSERT_TRUE(WaitFor([&] { return Records().size() == 3; }));
  const auto records = Records();
  ASSERT_EQ(records.count(IdOf(d1)), 1u);
  EXPECT_EQ(records.at(IdOf(d1)).member.incarnation, 1u);
  EXPECT_EQ(records.at(IdOf(d1)).member.capacity_bytes, 64u << 20);
  // SIGKILL: the record stays until the 2 s lease expires.
  b->Kill();
  EXPECT_EQ(Records().count(IdOf(d2)), 1u);
  ASSERT_TRUE(WaitFor([&] { return Records().count(IdOf(d2)) == 0; }, milliseconds(5000)));
  // SIGTERM: a graceful leave removes the record at once.
  ASSERT_TRUE(c->Stop());
  EXPECT_EQ(Records().count(IdOf(d3)), 0u);
  EXPECT_NE(ReadAll(d3.path() / "daemon.log").find("left the cluster"), std::string::npos);
  // A restart keeps the id and raises the incarnation.
  auto c2 = StartNode(d3);
  ASSERT_TRUE(WaitFor([&] {
    auto r = Records();
    return r.count(IdOf(d3)) == 1 && r.at(IdOf(d3)).member.incarnation == 2;
  }));
}

std::vector<std::byte> ValueFor(std::size_t i) {
  std::vector<std::byte> v(4096 + i * 97);
  for (std::size_t b = 0; b < v.size(); ++b) v[b] = static_cast<std::byte>((b * 131 + i) & 0xff);
  return v;
}

// The whole request path on real processes: a prompt's chunks PUT through one node are read
// byte-identical through every node (forwarded to their owners), LOOKUP through any node finds the
// whole prefix, and after one node is SIGKILLed the survivors answer every key with its value or a
// miss — never an error — once the lost node's lease has expired.
TEST_F(ClusterDaemonTest, AnyNodeAnswersAnythingAndSurvivesALostNode) {
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  nodes.push_back(StartNode(d1));
  nodes.push_back(StartNode(d2));
  nodes.push_back(StartNode(d3));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& n : nodes) {
          if (MembersSeenBy(*n) != 3) return false;
        }
        return true;
      },
      milliseconds(10000)));
  constexpr std::size_t kChunks = 32;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kChunks; ++i) keys.push_back("prompt-7/chunk-" + std::to_string(i));
  {
    auto a = client::Connection::Connect(nodes[0]->Options());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (std::size_t i = 0; i < kChunks; ++i) {
      ASSERT_TRUE((*a)->Put(keys[i], ValueFor(i)).ok()) << i;
    }
  }
  // Stored only at their owners: no single node holds them all (3 nodes, 32 keys).
  for (const auto& n : nodes) {
    auto c = client::Connection::Connect(n->Options());
    ASSERT_TRUE(c.ok());
    for (std::size_t i = 0; i < kChunks; ++i) {
      auto got = (*c)->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(got->has_value()) << keys[i];
      ASSERT_EQ(**got, ValueFor(i)) << keys[i];
    }
    auto lookup = (*c)->Lookup(keys);
    ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
    EXPECT_EQ(lookup->prefix_length, kChunks);
  }
  // Lose node 2 (SIGKILL: no graceful leave). Until its lease expires, requests for its keys may
  // time out at the peer pool and answer as misses; afterwards the view has two members.
  nodes[1]->Kill();
  ASSERT_TRUE(
      WaitFor([&] { return MembersSeenBy(*nodes[0]) == 2 && MembersSeenBy(*nodes[2]) == 2; },
              milliseconds(10000)));
  std::size_t hits = 0;
  for (std::size_t n : {0u, 2u}) {
    auto c = client::Connection::Connect(nodes[n]->Options());
    ASSERT_TRUE(c.ok());
    for (std::size_t i = 0; i < kChunks; ++i) {
      auto got = (*c)->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << "node " << n << " key " << keys[i] << ": "
                            << got.status().ToString();
      if (got->has_value()) {
        ASSERT_EQ(**got, ValueFor(i));
        ++hits;
      }
    }
  }
  // The survivors kept what they owned (about two thirds of the keys, read through both).
  EXPECT_GT(hits, 2 * kChunks / 3);
  EXPECT_LT(hits, 2 * kChunks);
}

// Warm rejoin: a node with an SSD tier restarted on its data directory rejoins under its old id,
// owns the same keys again and serves them from its SSD at once — every key is read through
// another node with no re-PUT.
TEST_F(ClusterDaemonTest, ARestartedNodeServesItsSsdChunksUnderItsOldIdentity) {
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"}, d3{"kvd-cl"};
  const std::vector<std::string> ssd = {"--ssd-dir",          "ssd",  "--ssd-capacity", "64MiB",
                                        "--ssd-segment-size", "16MiB"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  nodes.push_back(StartNode(d1));
  nodes.push_back(StartNode(d2, ssd));
  nodes.push_back(StartNode(d3));
  const auto all_see = [&](std::size_t n) {
    return WaitFor(
        [&] {
          for (const auto& node : nodes) {
            if (MembersSeenBy(*node) != n) return false;
          }
          return true;
        },
        milliseconds(10000));
  };
  ASSERT_TRUE(all_see(3));
  const std::string id_before = IdOf(d2);
  constexpr std::size_t kChunks = 24;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kChunks; ++i) keys.push_back("warm-" + std::to_string(i));
  {
    auto a = client::Connection::Connect(nodes[0]->Options());
    ASSERT_TRUE(a.ok());
    for (std::size_t i = 0; i < kChunks; ++i) ASSERT_TRUE((*a)->Put(keys[i], ValueFor(i)).ok());
  }
  // SIGTERM writes the host tier out to the SSD (ssd.flush_on_shutdown) and leaves at once. The
  // survivors must have seen it leave before it rejoins: otherwise a view that has not yet
  // applied the leave counts 3 members, then drops to 2 and places the node's keys elsewhere
  // while the GETs below run (seen under load in CI).
  ASSERT_TRUE(nodes[1]->Stop());
  ASSERT_TRUE(
      WaitFor([&] { return MembersSeenBy(*nodes[0]) == 2 && MembersSeenBy(*nodes[2]) == 2; },
              milliseconds(10000)));
  nodes[1] = StartNode(d2, ssd);
  ASSERT_TRUE(all_see(3));
  EXPECT_EQ(IdOf(d2), id_before);
  auto c = client::Connection::Connect(nodes[2]->Options());
  ASSERT_TRUE(c.ok());
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto got = (*c)->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << keys[i] << " was lost over the restart";
    EXPECT_EQ(**got, ValueFor(i));
  }
}

TEST_F(ClusterDaemonTest, AStoppedNodeIsFencedPastItsLeaseAndReRegistersAfterSigcont) {
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"};
  auto a = StartNode(d1);
  auto b = StartNode(d2);
  ASSERT_TRUE(WaitFor([&] { return Records().size() == 2; }));
  const std::string id = IdOf(d2);
  auto before = client_->Get(MembersPrefix("dtest") + id);
  ASSERT_EQ(before->kvs.size(), 1u);
  ASSERT_EQ(::kill(b->pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitFor([&] { return Records().count(id) == 0; }, milliseconds(5000)));
  ASSERT_EQ(::kill(b->pid(), SIGCONT), 0);
  ASSERT_TRUE(WaitFor([&] { return Records().count(id) == 1; }, milliseconds(5000)));
  auto after = client_->Get(MembersPrefix("dtest") + id);
  ASSERT_EQ(after->kvs.size(), 1u);
  EXPECT_NE(after->kvs[0].lease, before->kvs[0].lease);  // a fresh lease
  EXPECT_EQ(Records().at(id).member.incarnation, 1u);    // the same life
  ASSERT_TRUE(WaitFor([&] {
    const std::string log = ReadAll(d2.path() / "daemon.log");
    return log.find("fenced") != std::string::npos &&
           log.find("registered in the cluster") != log.rfind("registered in the cluster");
  }));
}

TEST_F(ClusterDaemonTest, ANodeIdClashRefusesToStart) {
  test::TempTestDir d1{"kvd-cl"}, d2{"kvd-cl"};
  auto a = StartNode(d1);
  ASSERT_TRUE(WaitFor([&] { return Records().size() == 1; }));
  std::filesystem::copy_file(d1.path() / "cluster-node-id", d2.path() / "cluster-node-id");
  const std::string addr = "127.0.0.1:" + std::to_string(test::FreeLoopbackPort());
  test::KvdepotdChild clash(d2.path(), (d2.path() / "s.sock").string(),
                            {"--listen", addr, "--cluster-etcd", etcd_.endpoint(), "--cluster-name",
                             "dtest", "--cluster-advertise", addr});
  // It answers while it starts (its listeners come first), then refuses to join and exits 1.
  EXPECT_EQ(clash.WaitExit(milliseconds(5000)), std::optional<int>(1));
  const std::string log = ReadAll(d2.path() / "daemon.log");
  EXPECT_NE(log.find("already registered by a live member"), std::string::npos) << log;
  EXPECT_EQ(Records().size(), 1u);
}

TEST(ClusterConfigTest, KeysHaveFlagsAndRefuseBadValues) {
  daemon::Config c;
  EXPECT_TRUE(
      daemon::ApplyConfigFlag("cluster-etcd", "http://127.0.0.1:2379,http://h:2379", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-name", "prod-a.1", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-advertise", "node1.example:7600", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-advertise", "[fd00::1]:7600", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-replicas", "2", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-group-chunks", "8", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-lease-ttl", "10s", c).ok());
  EXPECT_TRUE(daemon::ApplyConfigFlag("cluster-handoff-grace", "0", c).ok());
  EXPECT_EQ(c.cluster.replicas, 2u);
  EXPECT_EQ(c.cluster.lease_ttl, milliseconds(10000));
  const std::pair<const char*, const char*> bad[] = {{"cluster-etcd", "127.0.0.1:2379"},
                                                     {"cluster-etcd", "https://h:2379"},
                                                     {"cluster-name", "a/b"},
                                                     {"cluster-name", ""},
                                                     {"cluster-advertise", "0.0.0.0:7600"},
                                                     {"cluster-advertise", "[::]:7600"},
                                                     {"cluster-advertise", "h:0"},
                                                     {"cluster-advertise", "h"},
                                                     {"cluster-replicas", "0"},
                                                     {"cluster-group-chunks", "0"},
                                                     {"cluster-lease-ttl", "1s"},
                                                     {"cluster-lease-ttl", "10m"},
                                                     {"cluster-handoff-grace", "2h"}};
  for (const auto& [flag, value] : bad) {
    daemon::Config d;
    const Status s = daemon::ApplyConfigFlag(flag, value, d);
    EXPECT_FALSE(s.ok()) << flag << " " << value;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
  }
}

TEST(ClusterConfigTest, EtcdWithoutAdvertiseIsRefusedNamingTheKey) {
  daemon::Config c;
  const Status s = daemon::LoadConfig(
      "", {"--cluster-etcd", "http://127.0.0.1:2379", "--listen", "127.0.0.1:7600"}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster.advertise"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--cluster-advertise"), std::string::npos) << s.message();
  daemon::Config single;
  EXPECT_TRUE(daemon::LoadConfig("", {}, single).ok());
  EXPECT_TRUE(single.cluster.etcd.empty());  // no cluster unless asked for
}

// TLS between members (docs/cluster.md): a clustered TLS listener needs a CA for the other
// members (cluster.tls_ca_file, else tls.client_ca_file); cluster.tls_ca_file alone is refused.
TEST(ClusterConfigTest, TlsMembersNeedACaToVerifyEachOther) {
  const std::vector<std::string_view> cluster_tls = {"--cluster-etcd",
                                                     "http://127.0.0.1:2379",
                                                     "--cluster-advertise",
                                                     "127.0.0.1:7600",
                                                     "--listen",
                                                     "127.0.0.1:7600",
                                                     "--tls-cert-file",
                                                     "m.crt",
                                                     "--tls-key-file",
                                                     "m.key"};
  daemon::Config c;
  const Status no_ca = daemon::LoadConfig("", cluster_tls, c);
  ASSERT_FALSE(no_ca.ok());
  for (const char* named : {"cluster.tls_ca_file", "--cluster-tls-ca-file", "tls.client_ca_file"}) {
    EXPECT_NE(no_ca.message().find(named), std::string::npos) << no_ca.message();
  }
  std::vector<std::string_view> with_ca = cluster_tls;
  with_ca.insert(with_ca.end(), {"--cluster-tls-ca-file", "ca.crt"});
  daemon::Config d;
  ASSERT_TRUE(daemon::LoadConfig("", with_ca, d).ok());
  EXPECT_EQ(d.cluster.tls_ca_file, "ca.crt");
  std::vector<std::string_view> mutual = cluster_tls;
  mutual.insert(mutual.end(), {"--tls-client-ca-file", "clients.crt"});
  daemon::Config e;
  EXPECT_TRUE(daemon::LoadConfig("", mutual, e).ok());  // tls.client_ca_file verifies members
  daemon::Config f;
  const Status without_tls =
      daemon::LoadConfig("",
                         {"--cluster-etcd", "http://127.0.0.1:2379", "--cluster-advertise",
                          "127.0.0.1:7600", "--cluster-tls-ca-file", "ca.crt"},
                         f);
  ASSERT_FALSE(without_tls.ok());
  EXPECT_NE(without_tls.message().find("tls.cert_file"), std::string::npos)
      << without_tls.message();
}

}  // namespace
}  // namespace kvdepot::cluster
