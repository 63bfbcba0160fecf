// The fixture of the tests on real kvdepotd processes in a cluster on a real etcd
// (cluster_daemon_test.cc, cluster_join_test.cc): one etcd per test, daemons started in cluster
// "dtest" on free loopback ports with 2 s leases, and what they say of their view.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../daemon/kvdepotd_child.h"
#include "etcd_fixture.h"
#include "kvdepot/client/client.h"
#include "kvdepot/cluster/cluster_info.h"
#include "kvdepot/cluster/member_record.h"

namespace kvdepot::cluster {

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ClusterDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::EtcdInstalled())
      GTEST_SKIP() << test::kEtcdBinary << " is not installed (etcd-server)";
    ASSERT_TRUE(etcd_.Start()) << "etcd did not start; see " << etcd_.dir() << "/etcd.log";
    client_ = std::make_unique<EtcdClient>(
        *EtcdClient::Create(etcd_.endpoint(), std::chrono::milliseconds(1000)));
  }

  // A daemon in cluster "dtest" on its own directory and a free loopback port.
  // `extra` flags are appended (e.g. an SSD tier under the directory).
  std::unique_ptr<test::KvdepotdChild> StartNode(const test::TempTestDir& dir,
                                                 const std::vector<std::string>& extra = {}) {
    const std::string addr = "127.0.0.1:" + std::to_string(test::FreeLoopbackPort());
    addresses_[dir.path().string()] = addr;
    std::vector<std::string> flags{"--listen",
                                   addr,
                                   "--cluster-etcd",
                                   etcd_.endpoint(),
                                   "--cluster-name",
                                   "dtest",
                                   "--cluster-advertise",
                                   addr,
                                   "--cluster-lease-ttl",
                                   "2s",
                                   "--host-capacity",
                                   "64MiB"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto child = std::make_unique<test::KvdepotdChild>(dir.path(), (dir.path() / "s.sock").string(),
                                                       std::move(flags));
    child->set_token(node_token_);
    EXPECT_TRUE(child->WaitReady()) << ReadAll(dir.path() / "daemon.log");
    return child;
  }

  // The TCP address (listen and cluster.advertise) StartNode gave the daemon on `dir`.
  std::string AddrOf(const test::TempTestDir& dir) const {
    return addresses_.at(dir.path().string());
  }

  // The readable member records, by id.
  std::map<std::string, MemberRecord> Records() const {
    std::map<std::string, MemberRecord> out;
    auto range = client_->RangePrefix(MembersPrefix("dtest"));
    if (!range.ok()) return out;
    for (const auto& kv : range->kvs) {
      auto r = DecodeMemberRecord(kv.key, kv.value);
      if (r.ok()) out.emplace(r->member.id, *r);
    }
    return out;
  }

  std::string IdOf(const test::TempTestDir& dir) {
    std::string id = ReadAll(dir.path() / "cluster-node-id");
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  test::EtcdProcess etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::map<std::string, std::string> addresses_;  // by data directory
  std::string node_token_;  // the token clients of StartNode's daemons send (auth.token_file)
};

// Members in each node's CLUSTER_INFO view (0 when it cannot be asked).
inline std::size_t MembersSeenBy(const test::KvdepotdChild& node) {
  auto c = client::Connection::Connect(node.Options(std::chrono::milliseconds(2000)));
  if (!c.ok()) return 0;
  auto info = (*c)->ClusterInfo();
  if (!info.ok()) return 0;
  const auto j = nlohmann::json::parse(*info, nullptr, false);
  if (j.is_discarded() || !j.contains("members")) return 0;
  return j["members"].size();
}

// The view `node` answers CLUSTER_INFO with, as the daemons place keys by it.
inline Result<Topology> ViewOf(const test::KvdepotdChild& node) {
  KVD_ASSIGN_OR_RETURN(auto conn, client::Connection::Connect(node.Options()));
  KVD_ASSIGN_OR_RETURN(const std::string info, conn->ClusterInfo());
  return TopologyFromClusterInfo(info);
}

// Whether every node's CLUSTER_INFO lists `members` members, within `limit`.
inline bool AllSee(const std::vector<std::unique_ptr<test::KvdepotdChild>>& nodes,
                   std::size_t members,
                   std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const auto& n : nodes) all = all && MembersSeenBy(*n) == members;
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace kvdepot::cluster
