#include "kvdepot/cluster/cluster_info.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvdepot::cluster {

Result<ClusterInfo> ParseClusterInfo(std::string_view json) {
  const nlohmann::json info = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (info.is_discarded() || !info.is_object()) {
    return Corruption(
        "CLUSTER_INFO answer is not a JSON object (is the daemon an older kvdepotd?)");
  }
  try {
    ClusterInfo out;
    out.clustered = info.value("clustered", false);
    out.self = info.value("self", "");
    out.fenced = info.value("fenced", false);
    std::vector<Member> members;
    for (const auto& m : info.at("members")) {
      Member member;
      member.id = m.at("id").get<std::string>();
      member.native_addr = m.at("addr").get<std::string>();
      member.lm_addr = m.value("lm_addr", "");
      member.metrics_addr = m.value("metrics_addr", "");
      member.incarnation = m.value("incarnation", std::uint64_t{0});
      member.capacity_bytes = m.value("capacity_bytes", std::uint64_t{0});
      member.used_bytes = m.value("used_bytes", std::uint64_t{0});
      members.push_back(std::move(member));
    }
    std::sort(members.begin(), members.end(),
              [](const Member& a, const Member& b) { return a.id < b.id; });
    const auto twice =
        std::adjacent_find(members.begin(), members.end(),
                           [](const Member& a, const Member& b) { return a.id == b.id; });
    if (twice != members.end()) {
      return Corruption("CLUSTER_INFO answer lists member id " + twice->id + " twice");
    }
    PlacementOptions options;
    const auto& placement = info.at("placement");
    options.replicas = placement.at("replicas").get<std::uint32_t>();
    options.group_chunks = placement.at("group_chunks").get<std::uint32_t>();
    out.topology = Topology(info.value("revision", std::int64_t{0}), std::move(members), options);
    return out;
  } catch (const nlohmann::json::exception& e) {
    return Corruption(std::string("CLUSTER_INFO document lacks a field or has a wrong type: ") +
                      e.what());
  }
}

Result<Topology> TopologyFromClusterInfo(std::string_view json) {
  KVD_ASSIGN_OR_RETURN(ClusterInfo info, ParseClusterInfo(json));
  return std::move(info.topology);
}

}  // namespace kvdepot::cluster
