#include "flat_json.h"

#include <nlohmann/json.hpp>

namespace kvdepot::lmcache {
namespace {

constexpr int kMaxDepth = 64;

struct TooDeep {};  // thrown by the parser callback, caught below

}  // namespace

Result<std::map<std::string, std::string>> ParseFlatJsonObject(std::string_view text) {
  using nlohmann::json;
  json document;
  try {
    // Refuses nesting past kMaxDepth while parsing (the callback sees each value's depth), so a
    // hostile document cannot make the parser or the destructor recurse deeply.
    document = json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const json::parse_error& e) {
    return InvalidArgument("JSON: " + std::string(e.what()) + " (byte " + std::to_string(e.byte) +
                           ")");
  } catch (const TooDeep&) {
    return InvalidArgument("JSON: nested deeper than " + std::to_string(kMaxDepth) + " levels");
  } catch (const json::exception& e) {
    return InvalidArgument("JSON: " + std::string(e.what()));
  }
  if (!document.is_object()) {
    return InvalidArgument(std::string("JSON: the configuration is a ") + document.type_name() +
                           ", not an object");
  }
  std::map<std::string, std::string> members;
  for (const auto& [key, value] : document.items()) {
    if (value.is_string()) {
      members[key] = value.get<std::string>();
    } else if (value.is_primitive()) {
      members[key] = value.dump();  // numbers, true, false, null
    }
  }
  return members;
}

}  // namespace kvdepot::lmcache
