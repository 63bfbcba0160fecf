// The configuration document of connector_create: a JSON object whose members kvdepot reads are
// strings, numbers or booleans. A total parser (hostile input is an error, never a crash).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "kvdepot/status.h"

namespace kvdepot::lmcache {

// Top-level members of a JSON object as text: strings unescaped (\uXXXX outside ASCII becomes
// UTF-8), numbers and true/false/null as written; nested objects and arrays are skipped (their
// members are not needed). InvalidArgument, naming the offset, for anything that is not a JSON
// object, and for nesting deeper than 64.
Result<std::map<std::string, std::string>> ParseFlatJsonObject(std::string_view text);

}  // namespace kvdepot::lmcache
