// The CLI's --json output: nlohmann::ordered_json documents (members in the order they are set),
// one per line.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

namespace kvdepot::cli {

using Json = nlohmann::ordered_json;

// Writes `doc` compactly and a newline. Non-finite numbers become null; bytes that are not UTF-8
// (e.g. in a file name) are replaced with U+FFFD rather than failing.
inline void PrintJson(const Json& doc, std::ostream& out) {
  out << doc.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
}

}  // namespace kvdepot::cli
