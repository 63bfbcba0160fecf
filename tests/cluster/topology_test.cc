#include "kvdepot/cluster/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kvdepot::cluster {
namespace {

Member MakeMember(int i, std::uint64_t capacity = 1ull << 30) {
  Member m;
  char id[33];
  std::snprintf(id, sizeof id, "%032x", i * 2654435761u);
  m.id = id;
  m.native_addr = "127.0.0.1:" + std::to_string(7600 + i);
  m.capacity_bytes = capacity;
  return m;
}

std::vector<Member> Members(int n) {
  std::vector<Member> members;
  for (int i = 0; i < n; ++i) members.push_back(MakeMember(i));
  return members;
}

std::string Key(int i) {
  return "key-" + std::to_string(i);
}

TEST(TopologyTest, EmptyOwnsNothing) {
  Topology t;
  EXPECT_TRUE(t.Owners("k").empty());
  EXPECT_EQ(t.PrimaryOwner("k"), nullptr);
  EXPECT_FALSE(t.IsOwner("x", "k"));
}

TEST(TopologyTest, OwnersAreDeterministicAndIndependentOfMemberOrder) {
  std::vector<Member> members = Members(5);
  Topology a(1, members, {});
  std::reverse(members.begin(), members.end());
  Topology b(2, members, {});
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.PrimaryOwner(Key(i))->id, b.PrimaryOwner(Key(i))->id);
    ASSERT_EQ(a.Owners(Key(i)).front()->id, a.PrimaryOwner(Key(i))->id);
  }
}

TEST(TopologyTest, ReplicasAreDistinctAndCappedByMembers) {
  Topology t(1, Members(3), {.replicas = 5, .group_chunks = 4});
  const auto owners = t.Owners("k");
  ASSERT_EQ(owners.size(), 3u);
  std::set<std::string> ids;
  for (const Member* m : owners) ids.insert(m->id);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_TRUE(t.IsOwner(owners[2]->id, "k"));
}

TEST(TopologyTest, AJoinMovesAboutOneOverNPlusOne) {
  constexpr int kKeys = 20000;
  for (int n : {1, 2, 4, 9}) {
    Topology before(1, Members(n), {});
    Topology after(2, Members(n + 1), {});
    int moved = 0;
    for (int i = 0; i < kKeys; ++i) {
      const Member* was = before.PrimaryOwner(Key(i));
      const Member* now = after.PrimaryOwner(Key(i));
      if (was->id != now->id) {
        ++moved;
        ASSERT_EQ(now->id, MakeMember(n).id) << "a key moved between two old members";
      }
    }
    const double expected = 1.0 / (n + 1);
    EXPECT_NEAR(static_cast<double>(moved) / kKeys, expected, expected * 0.1) << n << " members";
  }
}

TEST(TopologyTest, LoadFollowsCapacity) {
  std::vector<Member> members = {MakeMember(0, 1ull << 30), MakeMember(1, 3ull << 30)};
  Topology t(1, members, {});
  std::map<std::string, int> load;
  constexpr int kKeys = 20000;
  for (int i = 0; i < kKeys; ++i) ++load[t.PrimaryOwner(Key(i))->id];
  EXPECT_NEAR(load[members[1].id] / static_cast<double>(kKeys), 0.75, 0.02);
}

TEST(TopologyTest, PlacementKeyUsesANonEmptyHashTag) {
  EXPECT_EQ(PlacementKey("plain"), "plain");
  EXPECT_EQ(PlacementKey("a{tag}b"), "tag");
  EXPECT_EQ(PlacementKey("a{tag}b{other}"), "tag");
  EXPECT_EQ(PlacementKey("a{}b"), "a{}b");
  EXPECT_EQ(PlacementKey("a{open"), "a{open");
  Topology t(1, Members(4), {});
  EXPECT_EQ(t.PrimaryOwner(PlacementKey("x{p1}y"))->id, t.PrimaryOwner(PlacementKey("z{p1}"))->id);
}

TEST(TopologyTest, BinaryKeysArePlacedByTheirWholeBytes) {
  // A chunk key with '{' and '}' bytes among non-printable ones: no hash tag.
  std::string binary(48, '\x01');
  binary[3] = '{';
  binary[4] = 'x';
  binary[5] = '}';
  EXPECT_EQ(PlacementKey(binary), binary);
  std::string high = "a{tag}b";
  high += '\xff';
  EXPECT_EQ(PlacementKey(high), high);
  std::string tab = "a{tag}\tb";  // a control character makes the key binary too
  EXPECT_EQ(PlacementKey(tab), tab);
  EXPECT_EQ(PlacementKey("lm@model@1@0@ab{tag}cd"), "tag");  // printable: the tag rule holds
}

TEST(TopologyTest, GroupAnchorIndex) {
  EXPECT_EQ(GroupAnchorIndex(0, 4), 0u);
  EXPECT_EQ(GroupAnchorIndex(3, 4), 0u);
  EXPECT_EQ(GroupAnchorIndex(4, 4), 4u);
  EXPECT_EQ(GroupAnchorIndex(7, 1), 7u);
  EXPECT_EQ(GroupAnchorIndex(7, 0), 7u);
}

TEST(TopologyTest, FindById) {
  Topology t(7, Members(3), {});
  EXPECT_EQ(t.revision(), 7);
  EXPECT_NE(t.Find(MakeMember(1).id), nullptr);
  EXPECT_EQ(t.Find("nope"), nullptr);
}

}  // namespace
}  // namespace kvdepot::cluster
