// A CLUSTER_INFO answer (docs/protocol.md, op 14: a node's view of its cluster as JSON) read back,
// so that a process outside the cluster (the CLI, a benchmark, a smart client) computes the same
// owners as the node it asked. The one reader of that document; the daemon's ClusterRouter is its
// one writer.
#pragma once

#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/cluster/topology.h"

namespace kvdepot::cluster {

struct ClusterInfo {
  bool clustered = false;  // false: a single daemon (then `topology` is empty)
  std::string self;        // the answering daemon's member id
  bool fenced = false;     // the answering daemon's lease lapsed (or was never granted)
  Topology topology;       // its current view: "members", "placement" and "revision"
};

// Parses a CLUSTER_INFO document. Members need "id" and "addr"; "capacity_bytes", "used_bytes",
// "incarnation", "lm_addr" and "metrics_addr" default to 0 / "". kCorruption, naming what is
// wrong, for text that is not such a document (not JSON, a missing field, a wrong type, a member
// id listed twice).
Result<ClusterInfo> ParseClusterInfo(std::string_view json);

// ParseClusterInfo's topology alone.
Result<Topology> TopologyFromClusterInfo(std::string_view json);

}  // namespace kvdepot::cluster
