// SHA-256 (FIPS 180-4), implemented here without external libraries.
//
// Two implementations compute identical digests: a portable one (any architecture, any byte
// order) and, on x86, one using the SHA extensions (SHA-NI), chosen at run time when the CPU
// supports them. Callers never choose; internal::SetSha256ImplForTesting exists for tests and
// benchmarks only.
//
// Thread-safety: a Sha256 object is a plain value with no shared state; use one object per thread
// (copies are independent). Sha256Of may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvdepot {

inline constexpr std::size_t kSha256DigestBytes = 32;
inline constexpr std::size_t kSha256BlockBytes = 64;

using Sha256Digest = std::array<std::uint8_t, kSha256DigestBytes>;

// Incremental SHA-256. Update may be called any number of times with pieces of any length
// (including zero); the digest depends only on the concatenation of the pieces. Messages are
// limited to 2^61 - 1 bytes by the standard; longer input is not detected.
//
// Copying an object mid-message forks the computation: both copies continue independently.
class Sha256 {
 public:
  Sha256();

  void Update(std::span<const std::byte> data);

  // Returns the digest of everything passed to Update since construction or the previous Finish,
  // and resets the object to the empty-message state, ready for a new message.
  Sha256Digest Finish();

 private:
  using CompressFn = void (*)(std::uint32_t* state, const std::uint8_t* blocks,
                              std::size_t block_count);

  void Reset();

  CompressFn compress_;  // picked once at construction (see internal::Sha256SelectedImpl)
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, kSha256BlockBytes> buffer_;
  std::size_t buffered_ = 0;       // bytes pending in buffer_, always < kSha256BlockBytes
  std::uint64_t total_bytes_ = 0;  // message length so far
};

// One-shot SHA-256 of `data`.
Sha256Digest Sha256Of(std::span<const std::byte> data);

// The digest as 64 lowercase hex characters.
std::string Sha256DigestHex(const Sha256Digest& digest);

namespace internal {

enum class Sha256Impl : std::uint8_t {
  kAuto = 0,      // SHA-NI when compiled in and supported by the CPU, else portable
  kPortable = 1,  // the portable C++ implementation
  kShaNi = 2,     // x86 SHA extensions
};

// True when this build contains the SHA-NI path and the CPU running it supports SHA and SSE4.1.
bool Sha256ShaNiAvailable();

// Tests and benchmarks only: selects the implementation used by Sha256 objects constructed
// afterwards (objects already constructed keep theirs). Process-wide; safe to call from any thread,
// but meant to be called while no other thread is hashing. Returns false, changing nothing, when
// `impl` is kShaNi and !Sha256ShaNiAvailable().
bool SetSha256ImplForTesting(Sha256Impl impl);

// The implementation that a Sha256 object constructed now would use: kPortable or kShaNi.
Sha256Impl Sha256SelectedImpl();

}  // namespace internal
}  // namespace kvdepot
