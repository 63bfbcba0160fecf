#include "kvdepot/cluster/cluster_info.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvdepot::cluster {

Result<Topology> TopologyFromClusterInfo(std::string_view json) {
  const nlohmann::json info = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (info.is_discarded() || !info.is_object()) {
    return Corruption(
        "CLUSTER_INFO answer is not a JSON object (is the daemon an older kvdepotd?)");
  }
  try {
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
    PlacementOptions options;
    const auto& placement = info.at("placement");
    options.replicas = placement.at("replicas").get<std::uint32_t>();
    options.group_chunks = placement.at("group_chunks").get<std::uint32_t>();
    return Topology(info.value("revision", std::int64_t{0}), std::move(members), options);
  } catch (const nlohmann::json::exception& e) {
    return Corruption(std::string("CLUSTER_INFO document lacks a field or has a wrong type: ") +
                      e.what());
  }
}

}  // namespace kvdepot::cluster
