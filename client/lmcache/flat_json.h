// The configuration document of connector_create: a JSON object whose members kvdepot reads are
// strings, numbers or booleans. Hostile input is an error, never a crash.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::lmcache {

// Top-level members of a JSON object (parsed by nlohmann-json) as text: strings unescaped (UTF-8,
// surrogate pairs joined), numbers, true, false and null as nlohmann-json prints them; nested
// objects and arrays are skipped (their members are not needed). InvalidArgument, naming the byte
// offset, for anything that is not a JSON object, and for nesting deeper than 64.
Result<std::map<std::string, std::string>> ParseFlatJsonObject(std::string_view text);

}  // namespace kvdepot::lmcache
