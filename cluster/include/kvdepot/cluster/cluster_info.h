// A CLUSTER_INFO answer (docs/protocol.md, op 14: a node's view of its cluster as JSON) read back
// as a Topology, so that a process outside the cluster (the CLI, a benchmark, a smart client)
// computes the same owners as the node it asked.
#pragma once

#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/cluster/topology.h"

namespace kvdepot::cluster {

// The current view of a CLUSTER_INFO document (its "members", "placement" and "revision"; members
// need "id" and "addr", capacity_bytes and used_bytes default to 0). kCorruption, naming what is
// wrong, for text that is not such a document. A daemon not in a cluster gives an empty Topology.
Result<Topology> TopologyFromClusterInfo(std::string_view json);

}  // namespace kvdepot::cluster
