// Chunk keys: the store's identity of one chunk of KV cache, derived from the namespace the KV was
// computed in and the token ids of the whole prefix up to and including the chunk.
//
// Scheme (docs/format.md §2 has it byte by byte, with a golden vector):
//   ns_digest = SHA-256("kvdepot.ns.v1" 0x00 ‖ encoded Namespace fields)
//   h(-1)     = ns_digest
//   h(i)      = SHA-256(h(i-1) ‖ token ids of chunk i, each u32 little-endian)
//   key(i)    = ns_digest[0..16) ‖ h(i)                                          (48 bytes)
// Chunk i covers tokens [i * chunk_tokens, (i + 1) * chunk_tokens); only the last chunk of a
// sequence may be shorter. SHA-256 (not a fast non-cryptographic hash) because keys are shared
// across requests and tenants: a colliding token sequence would let one client poison another's
// cache.
//
// The encoding is a persistent format: stored chunks are found by these keys, so any change to it
// must bump "kvdepot.ns.v1".
//
// Thread-safety: all types are plain values. A PrefixHasher is used by one thread at a time; the
// free functions may be called from any thread.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/codec_id.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/protocol/sha256.h"

namespace kvdepot {

inline constexpr std::size_t kNamespaceIdBytes = 16;
inline constexpr std::size_t kChunkKeyBytes = kNamespaceIdBytes + kSha256DigestBytes;  // 48

// Limits checked by Namespace::Validate.
inline constexpr std::size_t kMaxModelNameBytes = 256;
inline constexpr std::size_t kMaxTenantBytes = 128;
inline constexpr std::size_t kMaxSaltBytes = 256;
inline constexpr std::uint32_t kMaxTpWorldSize = 65536;

// The full 32-byte SHA-256 of a namespace; h(-1) of every chain in it.
struct NamespaceDigest {
  std::array<std::uint8_t, kSha256DigestBytes> bytes{};

  std::string ToHex() const;  // 64 lowercase hex characters
  auto operator<=>(const NamespaceDigest&) const = default;
};

// The first 16 bytes of a NamespaceDigest; the prefix of every chunk key in the namespace, so the
// store can list, filter and account per namespace.
struct NamespaceId {
  std::array<std::uint8_t, kNamespaceIdBytes> bytes{};

  std::string ToHex() const;  // 32 lowercase hex characters
  auto operator<=>(const NamespaceId&) const = default;
};

// Everything that makes two KV caches of the same tokens incompatible (model, parallel layout,
// dtype, codec, chunking) or that must keep them apart (tenant, salt).
struct Namespace {
  std::string model;                 // 1..256 bytes, no ASCII control characters
  std::uint32_t tp_world_size = 1;   // 1..65536
  std::uint32_t tp_rank = 0;         // < tp_world_size
  DType dtype = DType::kFloat16;     // a valid DType
  CodecId codec = CodecId::kRaw;     // a valid CodecId
  std::string tenant;                // 0..128 bytes, no ASCII control characters
  std::string salt;                  // 0..256 arbitrary bytes; secret: never printed or logged
  std::uint32_t chunk_tokens = 256;  // 1..kMaxTokens

  // OK, or kInvalidArgument naming the first bad field in declaration order
  // ("namespace: tp_rank = 4 must be below tp_world_size = 4"). Messages never contain the salt.
  Status Validate() const;

  // SHA-256 of the encoding in docs/format.md §2. Computed on every call (a few hundred bytes
  // hashed); meaningful only for a valid namespace.
  NamespaceDigest Digest() const;

  // The first 16 bytes of Digest().
  NamespaceId Id() const;

  // "model=<m> tp=<rank>/<world> dtype=<fp16> codec=<raw> chunk=<256> tenant=<t>", for logs and
  // metrics labels. Never contains the salt. Field values are printed as they are, unescaped.
  std::string Label() const;
};

struct ChunkKey {
  std::array<std::uint8_t, kChunkKeyBytes> bytes{};

  // The first 16 bytes.
  NamespaceId ns() const;

  // 96 lowercase hex characters.
  std::string ToHex() const;

  // Parses exactly 96 hex digits (either case). kInvalidArgument when the length differs or at
  // the first character that is not a hex digit, naming its position.
  static Result<ChunkKey> FromHex(std::string_view hex);

  // Exactly kChunkKeyBytes bytes, else kInvalidArgument.
  static Result<ChunkKey> FromBytes(std::span<const std::byte> bytes);

  auto operator<=>(const ChunkKey&) const = default;
};

// For unordered containers. Keys are already uniformly distributed, so this folds their bytes
// (XOR of the six 64-bit words) rather than hashing them again.
struct ChunkKeyHash {
  std::size_t operator()(const ChunkKey& key) const noexcept;
};

// Derives the keys of one token sequence chunk by chunk, in prefix order. One instance per
// sequence; copying an instance forks the chain (both copies continue from the same prefix).
class PrefixHasher {
 public:
  // Precondition: ns.Validate().ok() (checked by assert only). Copies what it needs from `ns`.
  explicit PrefixHasher(const Namespace& ns);

  // The key of the next chunk, whose token ids are `chunk_tokens`. kInvalidArgument when
  // chunk_tokens is empty, longer than the namespace's chunk_tokens, or when the previous chunk
  // was partial (shorter than the namespace's chunk_tokens: a partial chunk must be the last).
  // On error the hasher is unchanged.
  Result<ChunkKey> Next(std::span<const std::uint32_t> chunk_tokens);

  // Number of chunks hashed so far.
  std::uint64_t chunks() const { return chunks_; }

 private:
  NamespaceId ns_id_;
  Sha256Digest chain_;  // h(chunks_ - 1)
  std::uint32_t chunk_tokens_;
  std::uint64_t chunks_ = 0;
  bool ended_with_partial_ = false;
};

// The keys of every chunk of `tokens`, in prefix order. A last partial chunk is included when
// include_partial_last, otherwise dropped. Empty tokens give an empty vector. kInvalidArgument
// when ns is invalid.
Result<std::vector<ChunkKey>> ChunkKeysForTokens(const Namespace& ns,
                                                 std::span<const std::uint32_t> tokens,
                                                 bool include_partial_last = true);

}  // namespace kvdepot
