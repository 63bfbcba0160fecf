// Cluster topology: the live members of a kvdepot cluster and which of them own a key
// (docs/cluster.md). A Topology is an immutable snapshot, read from etcd at one revision; a newer
// view replaces it whole (share it as std::shared_ptr<const Topology>).
//
// Placement: weighted rendezvous (highest-random-weight) hashing over the members. Every member
// scores a placement key with XXH3-64 seeded by a hash of its id; the score is
// capacity / -ln(u), u the hash mapped into (0, 1); the `replicas` highest scores own the key,
// best first. Nothing is assigned or stored: any process holding the same member set computes the
// same owners, and a member that joins takes over only the keys it now scores highest on (about
// capacity share, 1/(N+1) with equal capacities); a member that leaves hands over only its own.
//
// Placement keys: a key's owner is decided by PlacementKey(key): for a key made entirely of
// printable ASCII (0x20-0x7E: every LMCache, Redis and CLI key) a Redis-style hash tag (the bytes
// between the key's first '{' and the next '}', when non-empty), else the whole key; a binary key
// (kvdepot's 48-byte chunk keys) is always placed by its whole bytes. A client that knows a
// prompt's prefix chain keeps a group of consecutive chunks together by placing them by the
// group's first chunk (GroupAnchorIndex): the native protocol's requests carry such explicit
// placement keys (protocol::kFlagPlacement, docs/protocol.md), which replace PlacementKey(key).
//
// Thread-safety: a Topology is a plain value; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/protocol/placement.h"

namespace kvdepot::cluster {

// One registered daemon, as it advertised itself in etcd.
struct Member {
  std::string id;                 // stable node id: 32 lowercase hex characters, kept in data_dir
  std::uint64_t incarnation = 0;  // rises at every start of the node
  std::string native_addr;        // cluster.advertise: "host:port" of the native protocol
  std::string lm_addr;            // "host:port" of lm://, "" when off
  std::string metrics_addr;       // "host:port" of /metrics, "" when off
  std::uint64_t capacity_bytes = 0;  // host + SSD capacity; weighs placement (0 counts as 1 byte)
  std::uint64_t used_bytes = 0;      // as of the member's last refresh of its record

  bool operator==(const Member&) const = default;
};

struct PlacementOptions {
  std::uint32_t replicas = 1;      // copies of each key, >= 1 (fewer when fewer members are up)
  std::uint32_t group_chunks = 8;  // G: consecutive chunks of a prefix placed together, >= 1
                                   // (8: chosen by bench/cluster_placement.cc, docs/cluster.md)
  bool operator==(const PlacementOptions&) const = default;
};

class Topology {
 public:
  Topology() = default;  // no members: owns nothing
  // `members` in any order (kept sorted by id); ids must be unique.
  Topology(std::int64_t revision, std::vector<Member> members, PlacementOptions options);

  // The etcd revision this view was read at; 0 for a view not read from etcd.
  std::int64_t revision() const { return revision_; }
  const std::vector<Member>& members() const { return members_; }
  const PlacementOptions& options() const { return options_; }
  bool empty() const { return members_.empty(); }

  const Member* Find(std::string_view id) const;  // nullptr when not a member

  // The min(replicas, members) owners of `placement_key`, best first.
  std::vector<const Member*> Owners(std::string_view placement_key) const;
  // The best owner of `placement_key`; nullptr when there are no members.
  const Member* PrimaryOwner(std::string_view placement_key) const;
  // Whether `member_id` is among Owners(placement_key).
  bool IsOwner(std::string_view member_id, std::string_view placement_key) const;

 private:
  std::int64_t revision_ = 0;
  std::vector<Member> members_;
  std::vector<std::uint64_t> seeds_;  // per member: XXH3-64 of its id
  PlacementOptions options_;
};

// The bytes `key` is placed by: its non-empty hash tag when the key is all printable ASCII
// (0x20-0x7E) and has one, else the whole key (binary keys: always the whole key).
std::string_view PlacementKey(std::string_view key);

// For chunk `index` of a prefix chain, the index of its group's first chunk (the anchor whose
// placement key places the whole group): index - index % group_chunks (protocol/placement.h).
using protocol::GroupAnchorIndex;

}  // namespace kvdepot::cluster
