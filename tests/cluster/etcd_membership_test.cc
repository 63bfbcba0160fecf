// EtcdMembership against a real etcd: members see each other, a lost lease removes a member and
// fences it until it re-registers, an etcd outage keeps the last view, corrupt records are
// skipped, node-id clashes are refused. Leases are 2 s (etcd's minimum) so each test takes seconds.
#include "kvdepot/cluster/etcd_membership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "../common/wait.h"
#include "etcd_fixture.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;
using test::WaitFor;

// A temporary data directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/kvdepot-member-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Log lines kept for assertions.
struct LogSink {
  std::mutex mu;
  std::vector<std::string> lines;
  MembershipLog Callback() {
    return [this](MembershipLogLevel, std::string_view message, const MembershipLogFields& f) {
      std::string line(message);
      for (const auto& [k, v] : f) line += " " + k + "=" + v;
      std::lock_guard lock(mu);
      lines.push_back(std::move(line));
    };
  }
  bool Contains(std::string_view text) {
    std::lock_guard lock(mu);
    for (const std::string& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

class EtcdMembershipTest : public ::testing::Test {
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
    cluster_ = std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  MembershipOptions Options(const TempDir& dir, int port, LogSink* sink = nullptr) const {
    MembershipOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster_name = cluster_;
    o.data_dir = dir.str();
    o.self.native_addr = "127.0.0.1:" + std::to_string(port);
    o.self.capacity_bytes = 1 << 30;
    o.version = "test";
    o.lease_ttl = milliseconds(2000);
    o.handoff_grace = milliseconds(60000);
    o.poll_interval = milliseconds(50);
    o.used_refresh = milliseconds(200);
    if (sink != nullptr) o.log = sink->Callback();
    return o;
  }

  EtcdClient Client() const { return *EtcdClient::Create(etcd_->endpoint(), milliseconds(1000)); }

  static bool HasMembers(const EtcdMembership& m, std::size_t n) {
    return m.Current()->members().size() == n;
  }

  static test::EtcdProcess* etcd_;
  std::string cluster_;
};
test::EtcdProcess* EtcdMembershipTest::etcd_ = nullptr;

TEST_F(EtcdMembershipTest, IdentityIsStableAndIncarnationRises) {
  TempDir dir;
  auto first = LoadNodeIdentity(dir.str());
  auto second = LoadNodeIdentity(dir.str());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(IsNodeId(first->id));
  EXPECT_EQ(first->id, second->id);
  EXPECT_EQ(second->incarnation, first->incarnation + 1);
  std::ofstream(dir.str() + "/cluster-node-id") << "not-an-id\n";
  auto corrupt = LoadNodeIdentity(dir.str());
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find("cluster-node-id"), std::string::npos);
}

TEST_F(EtcdMembershipTest, ThreeMembersSeeEachOtherAndAgreeOnOwners) {
  TempDir d1, d2, d3;
  auto a = EtcdMembership::Start(Options(d1, 7001));
  auto b = EtcdMembership::Start(Options(d2, 7002));
  auto c = EtcdMembership::Start(Options(d3, 7003));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (auto* m : {a->get(), b->get(), c->get()}) {
    ASSERT_TRUE(WaitFor([&] { return HasMembers(*m, 3); })) << m->SelfId();
    EXPECT_FALSE(m->Fenced());
    EXPECT_TRUE(IsNodeId(m->SelfId()));
  }
  // One view: the same revision and the same owner of every key on every member.
  ASSERT_TRUE(WaitFor([&] {
    return (*a)->Current()->revision() == (*c)->Current()->revision() &&
           (*b)->Current()->revision() == (*c)->Current()->revision();
  }));
  for (const std::string key : {"k1", "k2", "prompt-chunk-7"}) {
    EXPECT_EQ((*a)->Current()->PrimaryOwner(key)->id, (*c)->Current()->PrimaryOwner(key)->id);
  }
  const Member* self = (*b)->Current()->Find((*b)->SelfId());
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->native_addr, "127.0.0.1:7002");
  EXPECT_EQ(self->incarnation, (*b)->incarnation());
  EXPECT_GE((*a)->stats().membership_changes, 1u);
}

TEST_F(EtcdMembershipTest, GracefulLeaveRemovesAtOnceAndKeepsThePreviousView) {
  TempDir d1, d2;
  auto a = EtcdMembership::Start(Options(d1, 7011));
  auto b = EtcdMembership::Start(Options(d2, 7012));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor([&] { return HasMembers(**a, 2); }));
  (*b)->Leave();
  EXPECT_TRUE((*b)->Fenced());
  // Well within the 2 s lease: the revoke removed the record.
  ASSERT_TRUE(WaitFor([&] { return HasMembers(**a, 1); }, milliseconds(1500)));
  auto previous = (*a)->Previous();
  ASSERT_NE(previous, nullptr);
  EXPECT_EQ(previous->members().size(), 2u);
}

// A joining member's first view has a previous view too — the members before it joined — so
// that a miss at the new owner asks a key's previous owner (hand-off); the first member of a
// cluster has none.
TEST_F(EtcdMembershipTest, AJoiningMembersPreviousViewIsTheClusterWithoutIt) {
  TempDir d1, d2;
  auto a = EtcdMembership::Start(Options(d1, 7016));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Previous(), nullptr);
  auto b = EtcdMembership::Start(Options(d2, 7017));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(HasMembers(**b, 2));  // its first view, read at the start
  auto previous = (*b)->Previous();
  ASSERT_NE(previous, nullptr);
  ASSERT_EQ(previous->members().size(), 1u);
  EXPECT_EQ(previous->members()[0].id, (*a)->SelfId());
  EXPECT_EQ((*b)->stats().membership_changes, 0u);  // not a change this node saw happen
}

TEST_F(EtcdMembershipTest, AnExpiredLeaseRemovesTheMember) {
  TempDir d1, d2;
  auto a = EtcdMembership::Start(Options(d1, 7021));
  ASSERT_TRUE(a.ok());
  {
    auto b = EtcdMembership::Start(Options(d2, 7022));
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(WaitFor([&] { return HasMembers(**a, 2); }));
  }  // b stops keeping its lease alive without revoking it: a crash, as etcd sees it
  EXPECT_TRUE(HasMembers(**a, 2));
  ASSERT_TRUE(WaitFor([&] { return HasMembers(**a, 1); }, milliseconds(5000)));
}

TEST_F(EtcdMembershipTest, ALostLeaseFencesUntilReRegistered) {
  TempDir d1;
  LogSink log;
  auto a = EtcdMembership::Start(Options(d1, 7031, &log));
  ASSERT_TRUE(a.ok());
  ASSERT_FALSE((*a)->Fenced());
  // Revoke the member's lease behind its back (what etcd does when keepalives stop arriving).
  EtcdClient c = Client();
  auto record = c.Get((*a)->members_prefix() + (*a)->SelfId());
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->kvs.size(), 1u);
  ASSERT_TRUE(c.LeaseRevoke(record->kvs[0].lease).ok());
  ASSERT_TRUE(WaitFor([&] { return (*a)->stats().lease_expiries >= 1; }));
  // It re-registers under a fresh lease, with the same id and incarnation.
  ASSERT_TRUE(WaitFor([&] { return !(*a)->Fenced() && (*a)->stats().registrations == 2; }));
  auto again = c.Get((*a)->members_prefix() + (*a)->SelfId());
  ASSERT_EQ(again->kvs.size(), 1u);
  EXPECT_NE(again->kvs[0].lease, record->kvs[0].lease);
  EXPECT_TRUE(log.Contains("lease expired") || log.Contains("no longer carries"));
}

TEST_F(EtcdMembershipTest, EtcdOutageKeepsTheViewAndConvergesAfter) {
  // Its own etcd: this test stops it.
  test::EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start());
  TempDir d1, d2, d3;
  LogSink log;
  auto with_etcd = [&](MembershipOptions o) {
    o.etcd = etcd.endpoint();
    o.etcd_timeout = milliseconds(200);
    return o;
  };
  auto a = EtcdMembership::Start(with_etcd(Options(d1, 7041, &log)));
  auto b = EtcdMembership::Start(with_etcd(Options(d2, 7042)));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor([&] { return HasMembers(**a, 2) && HasMembers(**b, 2); }));
  const std::int64_t revision = (*a)->Current()->revision();
  etcd.Stop();
  ASSERT_TRUE(WaitFor([&] { return !(*a)->stats().etcd_up; }));
  EXPECT_TRUE(HasMembers(**a, 2));  // the last view is kept
  EXPECT_EQ((*a)->Current()->revision(), revision);
  const std::string detail = (*a)->HealthDetail();
  EXPECT_NE(detail.find("etcd unreachable since"), std::string::npos) << detail;
  EXPECT_NE(detail.find("serving topology revision " + std::to_string(revision)), std::string::npos)
      << detail;
  // Past a whole TTL without a keepalive: fenced.
  ASSERT_TRUE(WaitFor([&] { return (*a)->Fenced(); }, milliseconds(4000)));
  ASSERT_TRUE(etcd.Start());
  // A node that joins while the others were cut off is seen by all once etcd is back.
  auto c = EtcdMembership::Start(with_etcd(Options(d3, 7043)));
  ASSERT_TRUE(c.ok());
  for (auto* m : {a->get(), b->get(), c->get()}) {
    ASSERT_TRUE(WaitFor([&] { return HasMembers(*m, 3) && !m->Fenced(); }, milliseconds(8000)))
        << m->SelfId() << " " << m->HealthDetail();
    EXPECT_TRUE(m->stats().etcd_up);
  }
  EXPECT_TRUE(log.Contains("etcd unreachable"));
  EXPECT_TRUE(log.Contains("etcd reachable again"));
}

TEST_F(EtcdMembershipTest, CorruptRecordsAreSkippedWithAWarningNamingTheKey) {
  TempDir d1;
  LogSink log;
  auto a = EtcdMembership::Start(Options(d1, 7051, &log));
  ASSERT_TRUE(a.ok());
  EtcdClient c = Client();
  const std::string prefix = (*a)->members_prefix();
  const std::string bad_json = prefix + "0123456789abcdef0123456789abcdef";
  const std::string wrong_id = prefix + "ffffffffffffffffffffffffffffffff";
  ASSERT_TRUE(c.Put(bad_json, "{not json", 0).ok());
  ASSERT_TRUE(c.Put(wrong_id,
                    R"({"format":1,"id":"0123456789abcdef0123456789abcdef","incarnation":1,)"
                    R"("native":"h:1","capacity":1,"used":0,"replicas":1,"group_chunks":4})",
                    0)
                  .ok());
  ASSERT_TRUE(c.Put(prefix + "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", R"({"format":2})", 0).ok());
  ASSERT_TRUE(WaitFor([&] { return (*a)->stats().corrupt_records >= 3; }));
  EXPECT_TRUE(HasMembers(**a, 1));
  EXPECT_TRUE(log.Contains("key=" + bad_json));
  EXPECT_TRUE(log.Contains("key=" + wrong_id));
  EXPECT_FALSE((*a)->Fenced());
}

TEST_F(EtcdMembershipTest, ANodeIdClashIsRefused) {
  TempDir d1, d2;
  auto a = EtcdMembership::Start(Options(d1, 7061));
  ASSERT_TRUE(a.ok());
  // A second daemon started from a copy of the first one's data directory.
  std::filesystem::copy_file(d1.str() + "/cluster-node-id", d2.str() + "/cluster-node-id");
  auto clash = EtcdMembership::Start(Options(d2, 7062));
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(clash.status().message().find((*a)->SelfId()), std::string::npos);
  EXPECT_NE(clash.status().message().find("cluster-node-id"), std::string::npos);
  EXPECT_NE(clash.status().message().find("127.0.0.1:7061"), std::string::npos);
  EXPECT_TRUE(HasMembers(**a, 1));
  EXPECT_FALSE((*a)->Fenced());
}

TEST_F(EtcdMembershipTest, ARestartWithinTheOldLeaseTakesOverItsOwnRecord) {
  TempDir d1;
  std::string id;
  {
    auto first = EtcdMembership::Start(Options(d1, 7071));
    ASSERT_TRUE(first.ok());
    id = (*first)->SelfId();
  }  // a crash: the record lives on until its lease expires
  auto second = EtcdMembership::Start(Options(d1, 7071));
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ((*second)->SelfId(), id);
  EXPECT_FALSE((*second)->Fenced());
  ASSERT_TRUE(WaitFor([&] {
    const Member* m = (*second)->Current()->Find(id);
    return m != nullptr && m->incarnation == (*second)->incarnation();
  }));
}

TEST_F(EtcdMembershipTest, AnUnknownClusterNameIsAClusterOfOne) {
  TempDir d1, d2;
  LogSink log;
  auto a = EtcdMembership::Start(Options(d1, 7081));
  MembershipOptions other = Options(d2, 7082, &log);
  other.cluster_name = cluster_ + "-typo";
  auto b = EtcdMembership::Start(other);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor([&] { return HasMembers(**b, 1) && HasMembers(**a, 1); }));
  EXPECT_TRUE(log.Contains("no other member"));
}

TEST_F(EtcdMembershipTest, APlacementMismatchIsCountedAndLogged) {
  TempDir d1, d2;
  LogSink log;
  auto a = EtcdMembership::Start(Options(d1, 7091, &log));
  MembershipOptions other = Options(d2, 7092);
  other.placement.group_chunks = 16;
  auto b = EtcdMembership::Start(other);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(
      WaitFor([&] { return HasMembers(**a, 2) && (*a)->stats().placement_mismatches > 0; }));
  EXPECT_TRUE(log.Contains("other placement options"));
}

TEST_F(EtcdMembershipTest, UsedBytesAreRefreshed) {
  TempDir d1;
  std::atomic<std::uint64_t> used{10};
  MembershipOptions o = Options(d1, 7101);
  o.used_bytes = [&used] { return used.load(); };
  auto a = EtcdMembership::Start(o);
  ASSERT_TRUE(a.ok());
  used = 12345;
  ASSERT_TRUE(WaitFor([&] {
    auto members = (*a)->Members();
    return members.size() == 1 && members[0].used_bytes == 12345;
  }));
  EXPECT_EQ((*a)->stats().membership_changes, 0u);  // `used` alone is no membership change
}

TEST_F(EtcdMembershipTest, UnreachableEtcdStartsFencedAndAlone) {
  TempDir d1;
  MembershipOptions o = Options(d1, 7111);
  o.etcd = "http://127.0.0.1:" + std::to_string(test::FreeLoopbackPort());
  o.etcd_timeout = milliseconds(100);
  auto a = EtcdMembership::Start(o);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE((*a)->Fenced());
  EXPECT_TRUE((*a)->Current()->empty());
  EXPECT_NE((*a)->HealthDetail().find("etcd unreachable since"), std::string::npos);
}

}  // namespace
}  // namespace kvdepot::cluster
