#include "kvdepot/cluster/member_record.h"

#include <cstddef>
#include <random>
#include <span>
#include <system_error>

#include <nlohmann/json.hpp>

#include "kvdepot/base/file_io.h"
#include "kvdepot/base/hex.h"

namespace kvdepot::cluster {
namespace {

using Json = nlohmann::json;

constexpr std::uint64_t kMaxIdentityFileBytes = 4096;

Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

// The file's text without trailing whitespace; nullopt-like NotFound when it does not exist.
Result<std::string> ReadText(const std::string& path) {
  auto bytes = ReadFile(path, kMaxIdentityFileBytes);
  if (!bytes.ok()) return bytes.status();
  std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::string MembersPrefix(std::string_view cluster_name) {
  return "/kvdepot/" + std::string(cluster_name) + "/members/";
}

std::string EncodeMemberRecord(const MemberRecord& r) {
  const Json record{{"format", kMemberRecordFormat},
                    {"id", r.member.id},
                    {"incarnation", r.member.incarnation},
                    {"native", r.member.native_addr},
                    {"lm", r.member.lm_addr},
                    {"metrics", r.member.metrics_addr},
                    {"capacity", r.member.capacity_bytes},
                    {"used", r.member.used_bytes},
                    {"version", r.version},
                    {"replicas", r.placement.replicas},
                    {"group_chunks", r.placement.group_chunks}};
  return record.dump();
}

Result<MemberRecord> DecodeMemberRecord(std::string_view key, std::string_view value) {
  const Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corruption("not a JSON object");
  const auto unsigned_field = [&](const char* name, std::uint64_t& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      return Corruption(std::string("field '") + name + "' missing or not an unsigned integer");
    }
    out = it->get<std::uint64_t>();
    return Status::Ok();
  };
  const auto string_field = [&](const char* name, std::string& out, bool required) -> Status {
    auto it = j.find(name);
    if (it == j.end() && !required) return Status::Ok();
    if (it == j.end() || !it->is_string()) {
      return Corruption(std::string("field '") + name + "' missing or not a string");
    }
    out = it->get<std::string>();
    return Status::Ok();
  };
  std::uint64_t format = 0;
  if (Status s = unsigned_field("format", format); !s.ok()) return s;
  if (format != kMemberRecordFormat) {
    return Corruption("format " + std::to_string(format) + " (this kvdepotd reads format " +
                      std::to_string(kMemberRecordFormat) + ")");
  }
  MemberRecord r;
  std::uint64_t replicas = 0;
  std::uint64_t group_chunks = 0;
  for (Status s :
       {string_field("id", r.member.id, true), unsigned_field("incarnation", r.member.incarnation),
        string_field("native", r.member.native_addr, true),
        string_field("lm", r.member.lm_addr, false),
        string_field("metrics", r.member.metrics_addr, false),
        unsigned_field("capacity", r.member.capacity_bytes),
        unsigned_field("used", r.member.used_bytes), string_field("version", r.version, false),
        unsigned_field("replicas", replicas), unsigned_field("group_chunks", group_chunks)}) {
    if (!s.ok()) return s;
  }
  if (!IsNodeId(r.member.id)) return Corruption("id '" + r.member.id + "' is not 32 hex digits");
  const std::size_t slash = key.rfind('/');
  if (key.substr(slash == std::string_view::npos ? 0 : slash + 1) != r.member.id) {
    return Corruption("id '" + r.member.id + "' is not the key's last segment");
  }
  if (r.member.native_addr.empty()) return Corruption("field 'native' is empty");
  if (replicas == 0 || replicas > 64 || group_chunks == 0 || group_chunks > 1 << 20) {
    return Corruption("replicas or group_chunks out of range");
  }
  r.placement.replicas = static_cast<std::uint32_t>(replicas);
  r.placement.group_chunks = static_cast<std::uint32_t>(group_chunks);
  return r;
}

bool IsNodeId(std::string_view id) {
  if (id.size() != 32) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<NodeIdentity> LoadNodeIdentity(const std::string& data_dir) {
  const std::string id_path = data_dir + "/cluster-node-id";
  const std::string incarnation_path = data_dir + "/cluster-incarnation";
  NodeIdentity identity;
  auto id = ReadText(id_path);
  if (id.ok()) {
    if (!IsNodeId(*id)) {
      return Corruption(id_path +
                        " does not hold a node id (32 lowercase hex digits); restore it "
                        "or delete it to join as a new node");
    }
    identity.id = std::move(*id);
  } else if (id.status().code() == StatusCode::kNotFound) {
    std::random_device random;
    std::uint8_t bytes[16];
    for (std::uint8_t& b : bytes) b = static_cast<std::uint8_t>(random());
    identity.id = HexLower(std::span<const std::uint8_t>(bytes));
    if (Status s = WriteText(id_path, identity.id + "\n"); !s.ok()) return s;
  } else {
    return id.status();
  }
  auto incarnation = ReadText(incarnation_path);
  if (incarnation.ok()) {
    try {
      std::size_t used = 0;
      identity.incarnation = std::stoull(*incarnation, &used);
      if (used != incarnation->size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      return Corruption(incarnation_path +
                        " does not hold a decimal incarnation number; restore or delete it");
    }
  } else if (incarnation.status().code() != StatusCode::kNotFound) {
    return incarnation.status();
  }
  ++identity.incarnation;
  if (Status s = WriteText(incarnation_path, std::to_string(identity.incarnation) + "\n");
      !s.ok()) {
    return s;
  }
  return identity;
}

}  // namespace kvdepot::cluster
