// `kvdepot cluster status` and `kvdepot cluster owner` against in-process daemons, run through
// RunCli: a three-node cluster and a daemon that is in none.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../daemon/in_process_cluster.h"
#include "../daemon/in_process_server.h"
#include "kvdepot/cli/cli.h"

namespace kvdepot::cli {
namespace {

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

CliResult RunKvdepot(std::vector<std::string> args) {
  args.insert(args.begin(), "kvdepot");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST(ClusterCommandTest, StatusJsonListsEveryMemberUp) {
  daemon::InProcessCluster cluster;
  cluster.Start(3, {.replicas = 1, .group_chunks = 4});
  const CliResult r = RunKvdepot({"--addr", cluster.node(2).addr, "cluster", "status", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["members"].size(), 3u);
  std::set<std::string> ids;
  for (const auto& m : j["members"]) {
    EXPECT_EQ(m["state"], "up");
    ids.insert(m["id"].get<std::string>());
    EXPECT_EQ(m["addr"], cluster.node(cluster.IndexOf(m["id"].get<std::string>())).addr);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(j["self"], cluster.node(2).id);

  const CliResult human = RunKvdepot({"--addr", cluster.node(0).addr, "cluster", "status"});
  ASSERT_EQ(human.code, 0) << human.err;
  EXPECT_NE(human.out.find("3 members up"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("64.0 MiB"), std::string::npos) << human.out;  // capacity, human units
}

TEST(ClusterCommandTest, OwnerNamesThePlacementsOwners) {
  daemon::InProcessCluster cluster;
  cluster.Start(3, {.replicas = 2, .group_chunks = 1});
  const auto view = cluster.node(0).source->Current();
  for (const std::string key : {"k1", "{tag}chunk-9", "another-key"}) {
    const auto owners = view->Owners(cluster::PlacementKey(key));
    const CliResult r =
        RunKvdepot({"--addr", cluster.node(1).addr, "cluster", "owner", key, "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["owners"].size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(j["owners"][i]["id"], owners[i]->id) << key;
      EXPECT_EQ(j["owners"][i]["addr"], owners[i]->native_addr);
    }
    const CliResult human = RunKvdepot({"--addr", cluster.node(1).addr, "cluster", "owner", key});
    ASSERT_EQ(human.code, 0) << human.err;
    EXPECT_NE(human.out.find("primary  " + owners[0]->id), std::string::npos) << human.out;
  }
  EXPECT_EQ(RunKvdepot({"--addr", cluster.node(1).addr, "cluster", "owner"}).code, 2);
  EXPECT_EQ(RunKvdepot({"--addr", cluster.node(1).addr, "cluster", "bogus"}).code, 2);
}

class NotClusteredTest : public daemon::InProcessServerTest {};

TEST_F(NotClusteredTest, StatusAndOwnerSaySo) {
  StartServerWith(daemon::HostTierOptions{}, daemon::ServerOptions{});
  const std::string addr = "127.0.0.1:" + std::to_string(server_->tcp_port());
  const CliResult status = RunKvdepot({"--addr", addr, "cluster", "status"});
  ASSERT_EQ(status.code, 0) << status.err;
  EXPECT_NE(status.out.find("not in a cluster"), std::string::npos) << status.out;
  const CliResult json = RunKvdepot({"--addr", addr, "cluster", "status", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["clustered"].get<bool>());
  EXPECT_TRUE(j["members"].empty());
  const CliResult owner = RunKvdepot({"--addr", addr, "cluster", "owner", "k1"});
  ASSERT_EQ(owner.code, 0) << owner.err;
  EXPECT_NE(owner.out.find("not in a cluster"), std::string::npos) << owner.out;
}

}  // namespace
}  // namespace kvdepot::cli
