#include "kvdepot/sha256.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVDEPOT_SHA256_SHANI 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define KVDEPOT_SHA256_SHANI 0
#endif

namespace kvdepot {
namespace {

// FIPS 180-4 section 4.2.2: first 32 bits of the fractional parts of the cube roots of the first
// 64 primes.
alignas(16) constexpr std::uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// FIPS 180-4 section 5.3.3.
constexpr std::array<std::uint32_t, 8> kInitialState = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

inline std::uint32_t LoadBigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// FIPS 180-4 section 6.2.2, one 64-byte block at a time. Byte-order independent.
void CompressPortable(std::uint32_t* state, const std::uint8_t* blocks, std::size_t block_count) {
  std::uint32_t w[64];
  for (std::size_t block = 0; block < block_count; ++block, blocks += kSha256BlockBytes) {
    for (int t = 0; t < 16; ++t) w[t] = LoadBigEndian32(blocks + 4 * t);
    for (int t = 16; t < 64; ++t) {
      const std::uint32_t x = w[t - 15];
      const std::uint32_t y = w[t - 2];
      const std::uint32_t s0 = std::rotr(x, 7) ^ std::rotr(x, 18) ^ (x >> 3);
      const std::uint32_t s1 = std::rotr(y, 17) ^ std::rotr(y, 19) ^ (y >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; ++t) {
      const std::uint32_t big_s1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
      const std::uint32_t ch = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + big_s1 + ch + kRoundConstants[t] + w[t];
      const std::uint32_t big_s0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
      const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = big_s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

#if KVDEPOT_SHA256_SHANI
// The same compression with the x86 SHA extensions. The state is kept in the layout the
// instructions expect: one register holds words A,B,E,F and the other C,D,G,H.
// Precondition: the CPU supports SHA and SSE4.1 (checked by Sha256ShaNiAvailable).
__attribute__((target("sha,sse4.1"))) void CompressShaNi(std::uint32_t* state,
                                                         const std::uint8_t* blocks,
                                                         std::size_t block_count) {
  // Reverses the bytes of each 32-bit lane (message words are big-endian).
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);

  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));        // D C B A
  __m128i state1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));  // H G F E
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                // C D A B
  state1 = _mm_shuffle_epi32(state1, 0x1B);          // E F G H
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);  // A B E F
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);       // C D G H

  for (std::size_t block = 0; block < block_count; ++block, blocks += kSha256BlockBytes) {
    const __m128i saved0 = state0;
    const __m128i saved1 = state1;
    // w[i] holds message words 4i..4i+3 of the current group of four (indices mod 4).
    __m128i w[4];
#pragma GCC unroll 16
    for (int group = 0; group < 16; ++group) {
      __m128i& cur = w[group & 3];
      if (group < 4) {
        cur = _mm_shuffle_epi8(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * group)), byte_swap);
      } else {
        // W[t..t+3] from W[t-16..t-13] (cur), W[t-12..], W[t-7..t-4] and W[t-4..t-1].
        const __m128i& prev1 = w[(group - 1) & 3];
        const __m128i& prev2 = w[(group - 2) & 3];
        const __m128i& prev3 = w[(group - 3) & 3];
        __m128i x = _mm_sha256msg1_epu32(cur, prev3);
        x = _mm_add_epi32(x, _mm_alignr_epi8(prev1, prev2, 4));
        cur = _mm_sha256msg2_epu32(x, prev1);
      }
      __m128i msg = _mm_add_epi32(
          cur, _mm_load_si128(reinterpret_cast<const __m128i*>(kRoundConstants + 4 * group)));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, saved0);
    state1 = _mm_add_epi32(state1, saved1);
  }

  tmp = _mm_shuffle_epi32(state0, 0x1B);        // F E B A
  state1 = _mm_shuffle_epi32(state1, 0xB1);     // D C H G
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // D C B A
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // H G F E
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), state1);
}
#endif  // KVDEPOT_SHA256_SHANI

bool DetectShaNi() {
#if KVDEPOT_SHA256_SHANI
  // CPUID directly: clang 14's __builtin_cpu_supports does not know "sha".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & bit_SSE4_1) == 0) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (ebx & bit_SHA) != 0;
#else
  return false;
#endif
}

std::atomic<internal::Sha256Impl> g_impl_override{internal::Sha256Impl::kAuto};

}  // namespace

namespace internal {

bool Sha256ShaNiAvailable() {
  static const bool available = DetectShaNi();
  return available;
}

bool SetSha256ImplForTesting(Sha256Impl impl) {
  if (impl == Sha256Impl::kShaNi && !Sha256ShaNiAvailable()) return false;
  g_impl_override.store(impl, std::memory_order_relaxed);
  return true;
}

Sha256Impl Sha256SelectedImpl() {
  const Sha256Impl impl = g_impl_override.load(std::memory_order_relaxed);
  if (impl != Sha256Impl::kAuto) return impl;
  return Sha256ShaNiAvailable() ? Sha256Impl::kShaNi : Sha256Impl::kPortable;
}

}  // namespace internal

Sha256::Sha256() : compress_(&CompressPortable) {
#if KVDEPOT_SHA256_SHANI
  if (internal::Sha256SelectedImpl() == internal::Sha256Impl::kShaNi) compress_ = &CompressShaNi;
#endif
  Reset();
}

void Sha256::Reset() {
  state_ = kInitialState;
  buffered_ = 0;
  total_bytes_ = 0;
}

void Sha256::Update(std::span<const std::byte> data) {
  if (data.empty()) return;
  const auto* p = reinterpret_cast<const std::uint8_t*>(data.data());
  std::size_t n = data.size();
  total_bytes_ += n;
  if (buffered_ > 0) {
    const std::size_t take = std::min(kSha256BlockBytes - buffered_, n);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < kSha256BlockBytes) return;
    compress_(state_.data(), buffer_.data(), 1);
    buffered_ = 0;
  }
  const std::size_t whole_blocks = n / kSha256BlockBytes;
  if (whole_blocks > 0) {
    compress_(state_.data(), p, whole_blocks);
    p += whole_blocks * kSha256BlockBytes;
    n -= whole_blocks * kSha256BlockBytes;
  }
  if (n > 0) std::memcpy(buffer_.data(), p, n);
  buffered_ = n;
}

Sha256Digest Sha256::Finish() {
  // FIPS 180-4 section 5.1.1: 0x80, zeros up to 56 mod 64, then the bit length as u64 big-endian.
  const std::uint64_t bit_length = total_bytes_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > kSha256BlockBytes - 8) {
    std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(buffered_), buffer_.end(), 0);
    compress_(state_.data(), buffer_.data(), 1);
    buffered_ = 0;
  }
  std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(buffered_), buffer_.end() - 8, 0);
  for (int i = 0; i < 8; ++i) {
    buffer_[kSha256BlockBytes - 1 - i] = static_cast<std::uint8_t>(bit_length >> (8 * i));
  }
  compress_(state_.data(), buffer_.data(), 1);

  Sha256Digest digest;
  for (std::size_t i = 0; i < 8; ++i) {
    digest[4 * i + 0] = static_cast<std::uint8_t>(state_[i] >> 24);
    digest[4 * i + 1] = static_cast<std::uint8_t>(state_[i] >> 16);
    digest[4 * i + 2] = static_cast<std::uint8_t>(state_[i] >> 8);
    digest[4 * i + 3] = static_cast<std::uint8_t>(state_[i]);
  }
  Reset();
  return digest;
}

Sha256Digest Sha256Of(std::span<const std::byte> data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.Finish();
}

std::string Sha256DigestHex(const Sha256Digest& digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex(2 * digest.size(), '\0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kHexDigits[digest[i] >> 4];
    hex[2 * i + 1] = kHexDigits[digest[i] & 0x0f];
  }
  return hex;
}

}  // namespace kvdepot
