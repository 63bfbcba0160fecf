// A daemon's membership of a kvdepot cluster, kept in etcd (docs/cluster.md), and the topology it
// reads back: the TopologySource of a clustered kvdepotd.
//
// Registration: the node's record (member_record.h) is created at
// /kvdepot/<cluster.name>/members/<id> under a lease of cluster.lease_ttl, with a transaction that
// creates it only if absent. A live record already there is
//  - this node's previous life (same native address, lower incarnation: a restart within the old
//    lease's TTL): replaced, compared on its mod revision;
//  - this node's own record of this incarnation (a re-registration): replaced the same way;
//  - anything else (another address, or an incarnation at least as high): a node-id clash — two
//    daemons share one data directory's identity. Refused: Start fails with kAlreadyExists; a
//    re-registration that meets it stays fenced and logs the clash (rate-limited) until it clears.
// The lease is refreshed every ~TTL/3; the record is rewritten (guarded by the lease) every
// used_refresh with the tier's current use.
//
// Self-fencing: Fenced() is true while this node holds no lease that etcd has confirmed within
// the last TTL — before the first registration, after a lease expiry (etcd says TTL 0: the record
// is gone, so other nodes no longer count this one) and whenever no keepalive has succeeded for a
// whole TTL (measured from when the last successful keepalive was sent, so the local clock never
// outlives etcd's). It is computed at every call, so a process resumed after SIGSTOP is fenced
// from its first instruction. It lifts after a fresh registration, or after a keepalive that
// finds the old lease still alive (etcd kept the record throughout: no other node can have seen
// this one leave).
//
// Topology: the members prefix is polled every poll_interval (<= 1 s); a new Topology (revision =
// etcd's header revision of that read) is published only when the member set changed (ids,
// incarnations, addresses or capacities; `used` alone does not republish: see Members()). The
// view before a change stays available from Previous() for handoff_grace; so does, after the
// node's first read, the view of the other members (the cluster before this node joined it, so
// that a miss at a key's new owner asks its previous one). A record that cannot be
// read is skipped with a warning naming its key (at most one per key per minute). Placement
// options (replicas, group_chunks) are this node's own; a member advertising others is logged
// (once per member per minute) and counted, not refused: refusing would turn a rolling
// configuration change into an outage, and the worst a disagreement causes is misses.
//
// When etcd is unreachable the node keeps its last view, logs once per state change, and keeps
// retrying; it re-registers when etcd answers again (and its lease has gone).
//
// Thread-safety: the TopologySource methods, stats(), Members() and HealthDetail() may be called
// from any thread and never block on etcd. All etcd traffic runs on the membership's own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/cluster/etcd_client.h"
#include "kvdepot/cluster/member_record.h"
#include "kvdepot/cluster/topology_source.h"

namespace kvdepot::cluster {

enum class MembershipLogLevel { kDebug, kInfo, kWarn, kError };
using MembershipLogFields = std::vector<std::pair<std::string, std::string>>;
using MembershipLog =
    std::function<void(MembershipLogLevel, std::string_view message, const MembershipLogFields&)>;

struct MembershipOptions {
  std::string etcd;                      // cluster.etcd: comma-separated http:// endpoints
  std::string cluster_name = "kvdepot";  // cluster.name
  std::string data_dir;                  // holds cluster-node-id and cluster-incarnation
  // This node as it advertises itself; id and incarnation are filled in from data_dir.
  Member self;
  std::string version;
  PlacementOptions placement;
  std::chrono::milliseconds lease_ttl{6000};       // rounded up to whole seconds, >= 2 s
  std::chrono::milliseconds handoff_grace{30000};  // how long Previous() stays set
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds used_refresh{5000};
  // Deadline of one etcd call on one endpoint; 0: min(1 s, lease_ttl / 3).
  std::chrono::milliseconds etcd_timeout{0};
  // The bytes this node holds now (read on the membership thread); null: 0.
  std::function<std::uint64_t()> used_bytes;
  MembershipLog log;  // null: silent
};

struct MembershipStats {
  std::int64_t topology_revision = 0;  // of Current()
  std::uint64_t members_up = 0;        // in Current()
  bool etcd_up = false;                // the last etcd call was answered
  bool fenced = true;
  bool registered = false;
  std::uint64_t membership_changes = 0;      // topologies published after the first
  std::uint64_t registrations = 0;           // leases granted and records written
  std::uint64_t lease_expiries = 0;          // leases found gone (keepalive or record refresh)
  std::uint64_t id_clashes = 0;              // registrations refused for a node-id clash
  std::uint64_t corrupt_records = 0;         // member records skipped (counted per poll)
  std::uint64_t placement_mismatches = 0;    // members seen advertising other placement options
  std::int64_t etcd_down_since_unix_ms = 0;  // 0 while etcd is up
};

class EtcdMembership final : public TopologySource {
 public:
  // Loads (or creates) the node identity, raises its incarnation, registers once (bounded by the
  // etcd timeout) and starts the membership thread. Fails on a bad cluster.etcd, an unreadable
  // identity in data_dir, or a node-id clash (kAlreadyExists); an unreachable etcd is not a
  // failure: the node starts fenced with an empty view and keeps trying.
  static Result<std::unique_ptr<EtcdMembership>> Start(MembershipOptions options);
  // Stops the thread without revoking the lease (the record expires with it); Leave() first for
  // a graceful leave.
  ~EtcdMembership() override;
  EtcdMembership(const EtcdMembership&) = delete;
  EtcdMembership& operator=(const EtcdMembership&) = delete;

  // Graceful leave: stops the thread and revokes the lease (the record goes at once). Idempotent.
  void Leave();

  std::shared_ptr<const Topology> Current() const override;
  std::shared_ptr<const Topology> Previous() const override;
  std::string SelfId() const override;
  bool Fenced() const override;

  std::uint64_t incarnation() const;
  std::string members_prefix() const;
  MembershipStats stats() const;
  // The members of the last poll, with their latest `used` (Current() may hold older values).
  std::vector<Member> Members() const;
  // One line for /healthz: "cluster: N members, topology revision R", or what is wrong
  // ("etcd unreachable since 2026-12-02T03:40:00Z, serving topology revision R", "fenced: ...").
  std::string HealthDetail() const;

 private:
  class Impl;
  explicit EtcdMembership(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::cluster
