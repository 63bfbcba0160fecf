// What a member stores in etcd (docs/cluster.md, "etcd key layout"), and the node identity kept in
// its data directory.
//
// Key:   /kvdepot/<cluster.name>/members/<id>, under the member's lease.
// Value: one JSON object, format 1:
//   {"format":1,"id":"<32 hex>","incarnation":7,"native":"10.0.0.5:7600","lm":"10.0.0.5:7700",
//    "metrics":"10.0.0.5:9600","capacity":68719476736,"used":123456,"version":"0.1.0",
//    "replicas":1,"group_chunks":4}
// Readers ignore fields they do not know (a newer minor version may add some); a record with
// another "format", a missing or mistyped required field, or an id that is not the key's last
// segment is corrupt and skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/cluster/topology.h"

namespace kvdepot::cluster {

inline constexpr int kMemberRecordFormat = 1;

struct MemberRecord {
  Member member;
  std::string version;         // kvdepotd's version
  PlacementOptions placement;  // the member's cluster.replicas and cluster.group_chunks
};

// "/kvdepot/<cluster_name>/members/"
std::string MembersPrefix(std::string_view cluster_name);

std::string EncodeMemberRecord(const MemberRecord& record);
// Parses the value stored at `key` (whose last segment must be the record's id); kCorruption
// naming what is wrong otherwise.
Result<MemberRecord> DecodeMemberRecord(std::string_view key, std::string_view value);

// Whether `id` is a node id: 32 lowercase hex characters.
bool IsNodeId(std::string_view id);

// The node's identity in `data_dir`: the id in data_dir/cluster-node-id (created with 128 random
// bits on first use, then never changed) and the incarnation in data_dir/cluster-incarnation
// (raised by one at every call, i.e. at every start; both files written atomically). An existing
// id file that does not hold a node id is an error naming the file (it is never overwritten).
struct NodeIdentity {
  std::string id;
  std::uint64_t incarnation = 0;
};
Result<NodeIdentity> LoadNodeIdentity(const std::string& data_dir);

}  // namespace kvdepot::cluster
