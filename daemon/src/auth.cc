#include "kvdepot/daemon/auth.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kvdepot/base/hex.h"
#include "kvdepot/protocol/sha256.h"

namespace kvdepot::daemon {
namespace {

std::array<std::uint8_t, 32> Digest(std::string_view token) {
  const auto d =
      Sha256Of(std::span(reinterpret_cast<const std::byte*>(token.data()), token.size()));
  std::array<std::uint8_t, 32> out{};
  std::copy(d.begin(), d.end(), out.begin());
  return out;
}

// Equal or not, in time that does not depend on where the digests differ (OpenSSL's
// CRYPTO_memcmp).
bool ConstantTimeEqual(const std::array<std::uint8_t, 32>& a,
                       const std::array<std::uint8_t, 32>& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::string> ParseNamespaceId(std::string_view hex) {
  if (hex.size() != 2 * kNamespaceIdBytes) {
    return InvalidArgument("namespace id '" + std::string(hex) + "' is not 32 hex digits");
  }
  std::optional<std::string> id = HexDecode(hex);
  if (!id) return InvalidArgument("namespace id '" + std::string(hex) + "' is not 32 hex digits");
  return *std::move(id);
}

Result<AuthScope> ParseScope(std::string_view text) {
  AuthScope scope;
  if (text == "*") {
    scope.all = true;
    return scope;
  }
  if (text.substr(0, 3) != "ns=" || text.size() == 3) {
    return InvalidArgument("scope '" + std::string(text) +
                           "' is neither '*' nor ns=HEX32[,HEX32...]");
  }
  text.remove_prefix(3);
  while (!text.empty()) {
    const auto comma = text.find(',');
    KVD_ASSIGN_OR_RETURN(std::string id, ParseNamespaceId(text.substr(0, comma)));
    scope.namespaces.push_back(std::move(id));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  std::sort(scope.namespaces.begin(), scope.namespaces.end());
  scope.namespaces.erase(std::unique(scope.namespaces.begin(), scope.namespaces.end()),
                         scope.namespaces.end());
  return scope;
}

}  // namespace

bool AuthScope::AllowsNamespace(std::string_view ns_id) const {
  return all || std::binary_search(namespaces.begin(), namespaces.end(), ns_id);
}

bool AuthScope::AllowsKey(std::string_view key) const {
  if (all) return true;
  return key.size() == 48 && AllowsNamespace(key.substr(0, kNamespaceIdBytes));
}

Result<std::shared_ptr<const Authenticator>> Authenticator::Parse(std::string_view text,
                                                                  std::string_view source) {
  auto auth = std::make_shared<Authenticator>();
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    const auto where = [&] { return std::string(source) + ":" + std::to_string(line_no) + ": "; };
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto space = line.find_first_of(" \t");
    if (space == std::string_view::npos) {
      return InvalidArgument(where() + "token without a scope (append '*' or ns=HEX32,...)");
    }
    const std::string_view token = line.substr(0, space);
    std::string_view scope_text = line.substr(space);
    while (!scope_text.empty() && (scope_text.front() == ' ' || scope_text.front() == '\t')) {
      scope_text.remove_prefix(1);
    }
    if (token.size() < kMinTokenBytes || token.size() > 1024) {
      return InvalidArgument(where() + "token of " + std::to_string(token.size()) +
                             " characters; tokens have 16 to 1024");
    }
    if (std::any_of(token.begin(), token.end(), [](char c) { return c < 0x21 || c > 0x7e; })) {
      return InvalidArgument(where() + "token has a non-printable character");
    }
    auto scope = ParseScope(scope_text);
    if (!scope.ok()) return InvalidArgument(where() + scope.status().message());
    Entry entry{Digest(token), std::move(*scope)};
    for (const Entry& e : auth->entries_) {
      if (e.digest == entry.digest) return InvalidArgument(where() + "duplicate token");
    }
    auth->entries_.push_back(std::move(entry));
  }
  if (auth->entries_.empty()) {
    return InvalidArgument(std::string(source) + ": no tokens (every client would be refused)");
  }
  return std::shared_ptr<const Authenticator>(std::move(auth));
}

Result<std::shared_ptr<const Authenticator>> Authenticator::LoadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("auth token file " + path + ": cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IOError("auth token file " + path + ": read failed");
  return Parse(text.str(), path);
}

const AuthScope* Authenticator::Check(std::string_view token) const {
  const auto digest = Digest(token);
  const AuthScope* found = nullptr;
  for (const Entry& e : entries_) {
    const bool match = ConstantTimeEqual(digest, e.digest);
    found = match ? &e.scope : found;
  }
  return found;
}

Result<std::string> LoadPeerToken(const std::string& path) {
  KVD_RETURN_IF_ERROR(Authenticator::LoadFile(path).status());
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string token, scope;
    if (!(fields >> token >> scope) || token.front() == '#') continue;
    if (scope == "*") return token;
  }
  return NotFound("auth.token_file " + path +
                  " has no '*' token: cluster members authenticate to each other with the "
                  "file's first '*' token (docs/cluster.md)");
}

}  // namespace kvdepot::daemon
