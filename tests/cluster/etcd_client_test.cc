// EtcdClient against a real etcd (tests/cluster/etcd_fixture.h): reads, writes, transactions,
// leases, fail-over and the errors that name the endpoint and cluster.etcd.
#include "kvdepot/cluster/etcd_client.h"

#include <gtest/gtest.h>

#include "etcd_fixture.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;

TEST(Base64, RoundTripsEveryLength) {
  std::string bytes;
  for (int i = 0; i < 40; ++i) {
    const std::string encoded = Base64Encode(bytes);
    EXPECT_EQ(encoded.size() % 4, 0u);
    auto decoded = Base64Decode(encoded);
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, bytes);
    bytes.push_back(static_cast<char>(i * 37 + 200));
  }
  EXPECT_EQ(Base64Encode("/a/x"), "L2EveA==");
  EXPECT_FALSE(Base64Decode("abc").has_value());
  EXPECT_FALSE(Base64Decode("a=bc").has_value());
  EXPECT_FALSE(Base64Decode("ab!c").has_value());
}

TEST(EtcdEndpoints, ParsesAndRefusesWithTheSetting) {
  auto ok = EtcdClient::Create(" http://127.0.0.1:2379 ,http://[::1]:2380/,http://etcd",
                               milliseconds(100));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->endpoints().size(), 3u);
  EXPECT_EQ(ok->endpoints()[1].host, "::1");
  EXPECT_EQ(ok->endpoints()[1].port, "2380");
  EXPECT_EQ(ok->endpoints()[2].port, "2379");
  for (const char* bad : {"", "127.0.0.1:2379", "https://h:1", "http://h:0", "http://h:99999",
                          "http://:1", "http://h:1/v3"}) {
    auto refused = EtcdClient::Create(bad, milliseconds(100));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("cluster.etcd"), std::string::npos) << bad;
  }
}

TEST(EtcdClientNoServer, UnreachableNamesEveryEndpointAndTheSetting) {
  const int port = test::FreeLoopbackPort();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto client = EtcdClient::Create(url, milliseconds(300));
  ASSERT_TRUE(client.ok());
  auto r = client->Get("/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(url), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("cluster.etcd"), std::string::npos);
}

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::EtcdInstalled()) return;
    etcd_ = new test::EtcdProcess();
    ASSERT_TRUE(etcd_->Start()) << "etcd did not start; see " << etcd_->dir() << "/etcd.log";
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (!test::EtcdInstalled())
      GTEST_SKIP() << test::kEtcdBinary << " is not installed (etcd-server)";
  }
  EtcdClient Client() const { return *EtcdClient::Create(etcd_->endpoint(), milliseconds(1000)); }
  static test::EtcdProcess* etcd_;
};
test::EtcdProcess* EtcdClientTest::etcd_ = nullptr;

TEST_F(EtcdClientTest, PutGetRangeDelete) {
  EtcdClient c = Client();
  ASSERT_TRUE(c.Put("/t1/a", std::string("v\0a", 3), 0).ok());
  ASSERT_TRUE(c.Put("/t1/b", "vb", 0).ok());
  ASSERT_TRUE(c.Put("/t10", "other", 0).ok());
  auto range = c.RangePrefix("/t1/");
  ASSERT_TRUE(range.ok()) << range.status().message();
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].value, std::string("v\0a", 3));
  EXPECT_GT(range->revision, 0);
  ASSERT_TRUE(c.Delete("/t1/a").ok());
  auto one = c.Get("/t1/a");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->kvs.empty());
}

TEST_F(EtcdClientTest, CreateIfAbsentAndCompareOnModRevision) {
  EtcdClient c = Client();
  const std::vector<EtcdCompare> absent{{"/t2/k", EtcdCompare::Target::kCreateRevision, 0}};
  auto first = c.PutIf(absent, "/t2/k", "one", 0);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->succeeded);
  auto second = c.PutIf(absent, "/t2/k", "two", 0);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->succeeded);
  ASSERT_TRUE(second->current.has_value());
  EXPECT_EQ(second->current->value, "one");
  auto replaced =
      c.PutIf({{"/t2/k", EtcdCompare::Target::kModRevision, second->current->mod_revision}},
              "/t2/k", "three", 0);
  ASSERT_TRUE(replaced.ok());
  EXPECT_TRUE(replaced->succeeded);
  EXPECT_EQ(c.Get("/t2/k")->kvs.at(0).value, "three");
}

TEST_F(EtcdClientTest, LeaseGrantKeepAliveRevoke) {
  EtcdClient c = Client();
  auto lease = c.LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_EQ(lease->ttl_seconds, 5);
  ASSERT_TRUE(c.Put("/t3/leased", "x", lease->id).ok());
  EXPECT_EQ(c.Get("/t3/leased")->kvs.at(0).lease, lease->id);
  auto guarded = c.PutIf({{"/t3/leased", EtcdCompare::Target::kLease, lease->id}}, "/t3/leased",
                         "y", lease->id);
  ASSERT_TRUE(guarded.ok());
  EXPECT_TRUE(guarded->succeeded);
  auto ttl = c.LeaseKeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status().message();
  EXPECT_EQ(*ttl, 5);
  ASSERT_TRUE(c.LeaseRevoke(lease->id).ok());
  EXPECT_TRUE(c.Get("/t3/leased")->kvs.empty());
  auto gone = c.LeaseKeepAlive(lease->id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 0);
}

TEST_F(EtcdClientTest, FailsOverPastADeadEndpoint) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(test::FreeLoopbackPort());
  auto c = EtcdClient::Create(dead + "," + etcd_->endpoint(), milliseconds(500));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->Put("/t4/k", "v", 0).ok());
  EXPECT_EQ(c->current_endpoint(), etcd_->endpoint());
  ASSERT_TRUE(c->Get("/t4/k").ok());  // goes to the endpoint that answered
}

}  // namespace
}  // namespace kvdepot::cluster
