#include "kvdepot/protocol/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

#include "kvdepot/base/hex.h"

namespace kvdepot {
namespace {

// A libcrypto failure here means memory exhaustion or a broken installation (SHA-256 is in every
// provider): there is no digest to return, and a wrong one would silently mix up keys.
[[noreturn]] void Fatal(const char* what) {
  std::fprintf(stderr, "kvdepot: OpenSSL SHA-256 failed in %s\n", what);
  std::abort();
}

// OpenSSL's built-in SHA-256 method: a static object, nothing to free (an explicitly fetched
// EVP_MD held in a static would be reported as leaked once a library holding it is dlclose'd,
// as libkvdepot_lmcache.so is by LMCache's loader). Each init looks up the provider's
// implementation; docs/format.md measures what that costs.
const EVP_MD* Sha256Algorithm() {
  return EVP_sha256();
}

template <typename Owner>
EVP_MD_CTX* Ctx(const Owner& context) {
  return static_cast<EVP_MD_CTX*>(context.get());
}

}  // namespace

void Sha256::ContextDeleter::operator()(void* context) const {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(context));
}

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (!context_) Fatal("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(Ctx(context_), Sha256Algorithm(), nullptr) != 1) Fatal("EVP_DigestInit_ex");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

Sha256::Sha256(const Sha256& other) : context_(EVP_MD_CTX_new()) {
  if (!context_) Fatal("EVP_MD_CTX_new");
  if (EVP_MD_CTX_copy_ex(Ctx(context_), Ctx(other.context_)) != 1) Fatal("EVP_MD_CTX_copy_ex");
}

Sha256& Sha256::operator=(const Sha256& other) {
  if (this != &other) *this = Sha256(other);
  return *this;
}

void Sha256::Update(std::span<const std::byte> data) {
  if (data.empty()) return;
  if (EVP_DigestUpdate(Ctx(context_), data.data(), data.size()) != 1) Fatal("EVP_DigestUpdate");
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest;
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(Ctx(context_), digest.data(), &length) != 1 || length != digest.size()) {
    Fatal("EVP_DigestFinal_ex");
  }
  if (EVP_DigestInit_ex(Ctx(context_), Sha256Algorithm(), nullptr) != 1) Fatal("EVP_DigestInit_ex");
  return digest;
}

Sha256Digest Sha256Of(std::span<const std::byte> data) {
  Sha256Digest digest;
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, Sha256Algorithm(), nullptr) !=
          1 ||
      length != digest.size()) {
    Fatal("EVP_Digest");
  }
  return digest;
}

std::string Sha256DigestHex(const Sha256Digest& digest) {
  return HexLower(digest);
}

}  // namespace kvdepot
