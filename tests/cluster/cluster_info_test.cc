// TopologyFromClusterInfo: a CLUSTER_INFO document (docs/protocol.md, op 14) read back as the
// Topology the node described, and clear errors for documents that are not one.
#include "kvdepot/cluster/cluster_info.h"

#include <gtest/gtest.h>

namespace kvdepot::cluster {
namespace {

TEST(ClusterInfoTest, ReadsTheCurrentViewAndPlacesKeysAsTheNodeDoes) {
  const std::string a(32, 'a'), b(32, 'b');
  const std::string doc = R"({"clustered":true,"self":")" + a +
                          R"(","fenced":false,"revision":42,
      "placement":{"replicas":2,"group_chunks":8},
      "members":[{"id":")" +
                          a +
                          R"(","addr":"127.0.0.1:7611","lm_addr":"","metrics_addr":"127.0.0.1:9611",
                   "incarnation":3,"capacity_bytes":1000,"used_bytes":10,"state":"up"},
                  {"id":")" +
                          b +
                          R"(","addr":"127.0.0.1:7612","capacity_bytes":1000,"state":"up"}],
      "previous":null,"future_field":1})";
  auto view = TopologyFromClusterInfo(doc);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->revision(), 42);
  EXPECT_EQ(view->options().replicas, 2u);
  EXPECT_EQ(view->options().group_chunks, 8u);
  ASSERT_EQ(view->members().size(), 2u);
  const Member* first = view->Find(a);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->native_addr, "127.0.0.1:7611");
  EXPECT_EQ(first->metrics_addr, "127.0.0.1:9611");
  EXPECT_EQ(first->incarnation, 3u);
  EXPECT_EQ(first->used_bytes, 10u);
  // The same owners as a Topology built from the same members.
  Topology same(42, {*view->Find(a), *view->Find(b)}, {2, 8});
  for (const std::string key : {"k1", "k2", "prompt/{p}/3"}) {
    EXPECT_EQ(view->PrimaryOwner(PlacementKey(key))->id, same.PrimaryOwner(PlacementKey(key))->id);
  }
}

TEST(ClusterInfoTest, ANodeOutsideAClusterGivesAnEmptyView) {
  auto view = TopologyFromClusterInfo(
      R"({"clustered":false,"self":"","fenced":false,"revision":0,)"
      R"("placement":{"replicas":1,"group_chunks":1},"members":[],"previous":null})");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE(view->empty());
}

TEST(ClusterInfoTest, DocumentsThatAreNotClusterInfoAreCorruptionNamingWhatIsWrong) {
  for (const char* bad :
       {"", "not json", "[1,2]", R"({"members":[]})",
        R"({"members":[{"addr":"h:1"}],"placement":{"replicas":1,"group_chunks":1}})",
        R"({"members":[],"placement":{"replicas":"one","group_chunks":1}})"}) {
    auto view = TopologyFromClusterInfo(bad);
    ASSERT_FALSE(view.ok()) << bad;
    EXPECT_EQ(view.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(view.status().message().find("CLUSTER_INFO"), std::string::npos)
        << view.status().message();
  }
}

TEST(ClusterInfoTest, ParseReadsSelfAndFencedAndRefusesGarbageAndDuplicateIds) {
  const std::string doc =
      R"({"clustered":true,"self":"b","fenced":false,"revision":12,)"
      R"("placement":{"replicas":2,"group_chunks":8},"members":[)"
      R"({"id":"b","addr":"127.0.0.1:2","capacity_bytes":10,"state":"up"},)"
      R"({"id":"a","addr":"127.0.0.1:1","lm_addr":"127.0.0.1:9","capacity_bytes":20}],)"
      R"("previous":null})";
  auto info = ParseClusterInfo(doc);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->clustered);
  EXPECT_EQ(info->self, "b");
  EXPECT_EQ(info->topology.revision(), 12);
  EXPECT_EQ(info->topology.options().replicas, 2u);
  EXPECT_EQ(info->topology.options().group_chunks, 8u);
  ASSERT_EQ(info->topology.members().size(), 2u);
  EXPECT_EQ(info->topology.members()[0].id, "a");
  EXPECT_EQ(info->topology.members()[0].lm_addr, "127.0.0.1:9");
  EXPECT_EQ(info->topology.members()[1].capacity_bytes, 10u);

  auto single = ParseClusterInfo(
      R"({"clustered":false,"members":[],"placement":{"replicas":1,"group_chunks":1}})");
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(single->clustered);
  EXPECT_TRUE(single->topology.empty());

  for (const char* bad : {"not json", "[]", R"({"clustered":true})",
                          R"({"members":[{"id":1}],"placement":{"replicas":1,"group_chunks":1}})",
                          R"({"members":[{"id":"a","addr":"x:1"},{"id":"a","addr":"x:2"}],)"
                          R"("placement":{"replicas":1,"group_chunks":1}})"}) {
    auto r = ParseClusterInfo(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(r.status().message().find("CLUSTER_INFO"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kvdepot::cluster
