// Shared-secret authentication and per-namespace authorisation (docs/security.md).
//
// A token file holds one token per line with the namespaces it may reach:
//
//   # comment
//   TOKEN *                        every key (all namespaces, and keys that are not chunk keys)
//   TOKEN ns=HEX32[,HEX32...]      only 48-byte chunk keys whose 16-byte namespace id is listed
//
// A token is 16 ..= 1024 printable ASCII characters without spaces; a scope is required (no
// implicit "everything"). Keys that are not 48-byte chunk keys belong to the default namespace,
// which only `*` tokens may use. Tokens are kept only as SHA-256 digests; a presented token is
// hashed and compared with every entry in constant time (the time does not depend on how much of
// a digest matches, nor on which entry matched).
//
// Thread-safety: an Authenticator is immutable once loaded; share it freely between threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

inline constexpr std::size_t kNamespaceIdBytes = 16;
inline constexpr std::size_t kMinTokenBytes = 16;

// What one token may reach.
struct AuthScope {
  bool all = false;                     // `*`
  std::vector<std::string> namespaces;  // sorted 16-byte namespace ids (when !all)

  // The key's namespace (the first 16 bytes of a 48-byte chunk key; other keys: the default
  // namespace, reachable only with `all`) is allowed.
  bool AllowsKey(std::string_view key) const;
  bool AllowsNamespace(std::string_view ns_id) const;
};

class Authenticator {
 public:
  // Parses a token file's text; `source` names it in errors ("FILE:LINE: ..."). InvalidArgument
  // for a malformed line, a short token, a bad namespace id or a duplicate token; an empty file
  // (no tokens) is an error too, since it would lock every client out.
  static Result<std::shared_ptr<const Authenticator>> Parse(std::string_view text,
                                                            std::string_view source);
  // Reads and parses `path`. NotFound/IOError name the path.
  static Result<std::shared_ptr<const Authenticator>> LoadFile(const std::string& path);

  // The scope of `token`, or nullptr when it matches no entry. Constant time in the token's
  // content (see above). The pointer lives as long as this Authenticator.
  const AuthScope* Check(std::string_view token) const;

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<std::uint8_t, 32> digest;
    AuthScope scope;
  };
  std::vector<Entry> entries_;
};

// The token a cluster member presents to its peers (docs/cluster.md): the first `*` token of the
// token file at `path` (every member has the same file). NotFound when the file has none: peers
// must reach every key. The file is validated as Authenticator::LoadFile does.
Result<std::string> LoadPeerToken(const std::string& path);

}  // namespace kvdepot::daemon
