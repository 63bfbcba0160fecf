// SHA-256 (FIPS 180-4), computed by OpenSSL's libcrypto (which picks SHA-NI, AVX2 or portable code
// for the CPU it runs on). This header keeps OpenSSL out of its includers: chunk keys, the LMCache
// value header and auth's token hashing see only these types.
//
// Thread-safety: a Sha256 object is a plain value with no shared state; use one object per thread
// (copies are independent). Sha256Of may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace kvdepot {

inline constexpr std::size_t kSha256DigestBytes = 32;

using Sha256Digest = std::array<std::uint8_t, kSha256DigestBytes>;

// Incremental SHA-256. Update may be called any number of times with pieces of any length
// (including zero); the digest depends only on the concatenation of the pieces.
//
// Copying an object mid-message forks the computation: both copies continue independently.
// A moved-from object may only be destroyed or assigned to.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(std::span<const std::byte> data);

  // Returns the digest of everything passed to Update since construction or the previous Finish,
  // and resets the object to the empty-message state, ready for a new message.
  Sha256Digest Finish();

 private:
  struct ContextDeleter {
    void operator()(void* context) const;
  };
  std::unique_ptr<void, ContextDeleter> context_;  // an EVP_MD_CTX, initialised for SHA-256
};

// One-shot SHA-256 of `data`.
Sha256Digest Sha256Of(std::span<const std::byte> data);

// The digest as 64 lowercase hex characters.
std::string Sha256DigestHex(const Sha256Digest& digest);

}  // namespace kvdepot
