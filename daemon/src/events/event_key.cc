#include "events/event_key.h"

#include <array>
#include <cstdint>

namespace kvdepot::daemon::events {
namespace {

// LMCache's hex chunk hash ("1a2b", "-1a2b"), reduced to its low 64 bits like vLLM's integer form.
std::optional<BlockHash> ParseHexHash(std::string_view text) {
  BlockHash h;
  if (!text.empty() && text.front() == '-') {
    h.integer_signed = true;
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    std::uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint64_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    value = (value << 4) | digit;  // wraps: keeps the low 64 bits
  }
  h.integer = h.integer_signed ? ~value + 1 : value;
  if (h.integer_signed && value == 0) h.integer_signed = false;
  return h;
}

}  // namespace

std::optional<KeyIdentity> IdentifyKey(std::string_view key, std::string_view lm_namespace_id) {
  if (key.size() < kNamespaceIdBytes) return std::nullopt;
  const std::string_view ns = key.substr(0, kNamespaceIdBytes);
  if (!lm_namespace_id.empty() && ns == lm_namespace_id) {
    // fmt@model@world_size@worker_id@HASH[@...]; LMCache pads keys with spaces on the wire.
    std::string_view rest = key.substr(kNamespaceIdBytes);
    while (!rest.empty() && rest.back() == ' ') rest.remove_suffix(1);
    std::array<std::string_view, 5> fields;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const std::size_t at = rest.find('@');
      if (at == std::string_view::npos && i + 1 < fields.size()) return std::nullopt;
      fields[i] = rest.substr(0, at);
      rest = at == std::string_view::npos ? std::string_view() : rest.substr(at + 1);
    }
    auto hash = ParseHexHash(fields[4]);
    if (!hash || fields[1].empty()) return std::nullopt;
    return KeyIdentity{std::move(*hash), ns, fields[1]};
  }
  if (key.size() != kChunkKeyBytes) return std::nullopt;
  KeyIdentity id;
  id.hash.bytes = std::string(key.substr(kNamespaceIdBytes));
  id.namespace_id = ns;
  return id;
}

}  // namespace kvdepot::daemon::events
