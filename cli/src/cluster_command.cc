// `kvdepot cluster status [--json]` and `kvdepot cluster owner KEY [--json]`: a cluster as the
// node at --addr sees it (its CLUSTER_INFO answer, docs/protocol.md; docs/cluster.md).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_args.h"
#include "cli_internal.h"
#include "cli_json.h"
#include "kvdepot/cluster/cluster_info.h"
#include "kvdepot/cluster/topology.h"

namespace kvdepot::cli {
namespace {

Result<nlohmann::json> FetchClusterInfo(const client::ClientOptions& remote) {
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(std::string text, c->ClusterInfo());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("members") || !j["members"].is_array()) {
    return Corruption("kvdepotd at " + remote.address +
                      " answered CLUSTER_INFO with a document that is not the expected JSON "
                      "object (is it an older kvdepotd?)");
  }
  return j;
}

void PrintMembers(const nlohmann::json& members, const std::string& self, std::ostream& out) {
  for (const auto& m : members) {
    const std::string id = m.value("id", "");
    const std::uint64_t capacity = m.value("capacity_bytes", std::uint64_t{0});
    const std::uint64_t used = m.value("used_bytes", std::uint64_t{0});
    out << "  " << id << (id == self ? " *" : "  ") << "  " << m.value("addr", "") << "  "
        << m.value("state", "") << "  " << HumanBytes(static_cast<double>(used)) << " used of "
        << HumanBytes(static_cast<double>(capacity));
    if (capacity > 0) {
      char pct[16];
      std::snprintf(pct, sizeof pct, " (%.0f%%)",
                    100.0 * static_cast<double>(used) / static_cast<double>(capacity));
      out << pct;
    }
    out << "\n";
  }
}

Status ClusterStatus(const client::ClientOptions& remote, std::span<const char* const> argv,
                     Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  KVD_ASSIGN_OR_RETURN(nlohmann::json info, FetchClusterInfo(remote));
  if (args.Has("--json")) {
    io.out << info.dump() << "\n";
    return Status::Ok();
  }
  if (!info.value("clustered", false)) {
    io.out << "kvdepotd at " << remote.address
           << " is not in a cluster (its cluster.etcd is empty): it holds every key itself\n";
    return Status::Ok();
  }
  const std::string self = info.value("self", "");
  const auto& placement = info["placement"];
  io.out << "topology revision " << info.value("revision", std::int64_t{0}) << ", "
         << info["members"].size() << " members up, replicas " << placement.value("replicas", 1)
         << ", group_chunks " << placement.value("group_chunks", 1) << "\n";
  io.out << "asked: " << remote.address << " (member " << self << ", marked *)"
         << (info.value("fenced", false) ? ", FENCED: its lease lapsed, it owns no keys" : "")
         << "\n";
  PrintMembers(info["members"], self, io.out);
  if (info.contains("previous") && info["previous"].is_object()) {
    io.out << "previous view (hand-off grace period): revision "
           << info["previous"].value("revision", std::int64_t{0}) << ", "
           << info["previous"]["members"].size() << " members\n";
  }
  return Status::Ok();
}

Status Owner(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_ASSIGN_OR_RETURN(nlohmann::json info, FetchClusterInfo(remote));
  KVD_ASSIGN_OR_RETURN(const cluster::ClusterInfo view, cluster::ParseClusterInfo(info.dump()));
  const bool clustered = view.clustered;
  const cluster::Topology& topology = view.topology;
  const std::string_view placement_key = cluster::PlacementKey(key);
  const std::vector<const cluster::Member*> owners = topology.Owners(placement_key);
  if (args.Has("--json")) {
    Json doc = {{"key", KeyForDisplay(key)},
                {"placement_key", KeyForDisplay(placement_key)},
                {"clustered", clustered},
                {"revision", topology.revision()},
                {"owners", Json::array()}};
    for (const cluster::Member* m : owners) {
      doc["owners"].push_back({{"id", m->id}, {"addr", m->native_addr}});
    }
    PrintJson(doc, io.out);
    return Status::Ok();
  }
  if (!clustered) {
    io.out << "kvdepotd at " << remote.address << " is not in a cluster: it owns every key\n";
    return Status::Ok();
  }
  if (owners.empty()) {
    io.out << "no members are up in this node's view: no owner\n";
    return Status::Ok();
  }
  for (std::size_t i = 0; i < owners.size(); ++i) {
    io.out << (i == 0 ? "primary  " : "replica  ") << owners[i]->id << "  "
           << owners[i]->native_addr << "\n";
  }
  return Status::Ok();
}

}  // namespace

Status RunClusterCommand(const client::ClientOptions& remote, std::span<const char* const> argv,
                         Io io) {
  const std::string sub = argv.empty() ? "" : argv[0];
  const auto rest = argv.empty() ? argv : argv.subspan(1);
  if (sub == "status") return ClusterStatus(remote, rest, io);
  if (sub == "owner") return Owner(remote, rest, io);
  return UsageError("kvdepot cluster status [--json] | kvdepot cluster owner KEY [--json]" +
                    (sub.empty() ? std::string() : " (unknown subcommand '" + sub + "')"));
}

}  // namespace kvdepot::cli
