#include "kvdepot/protocol/chunk_key.h"
#include "kvdepot/base/hex.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <string>

namespace kvdepot {
namespace {

constexpr std::string_view kNamespaceDomain = "kvdepot.ns.v1";  // followed by one 0x00 byte

// "'g'" for printable ASCII, "0x0a" otherwise.
std::string DescribeChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  return "0x" + HexLower(std::span(&u, 1));
}

bool IsControl(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

// Length in [min_bytes, max_bytes] and no ASCII control characters.
Status CheckText(std::string_view field, const std::string& value, std::size_t min_bytes,
                 std::size_t max_bytes) {
  if (value.size() < min_bytes) {
    return InvalidArgument("namespace: " + std::string(field) + " is empty");
  }
  if (value.size() > max_bytes) {
    return InvalidArgument("namespace: " + std::string(field) + " is " +
                           std::to_string(value.size()) + " bytes, over the limit of " +
                           std::to_string(max_bytes));
  }
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (IsControl(static_cast<unsigned char>(value[i]))) {
      return InvalidArgument("namespace: " + std::string(field) + " has control character " +
                             DescribeChar(value[i]) + " at byte " + std::to_string(i));
    }
  }
  return Status::Ok();
}

void AppendU8(std::string& out, std::uint8_t v) {
  out.push_back(static_cast<char>(v));
}

void AppendU32Le(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// u32 little-endian byte length, then the bytes.
void AppendLengthPrefixed(std::string& out, const std::string& bytes) {
  AppendU32Le(out, static_cast<std::uint32_t>(bytes.size()));
  out += bytes;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Feeds token ids to `hasher` as u32 little-endian.
void UpdateWithTokens(Sha256& hasher, std::span<const std::uint32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    hasher.Update(std::as_bytes(tokens));
  } else {
    std::array<std::byte, 1024> buffer;
    while (!tokens.empty()) {
      const std::size_t n = std::min(tokens.size(), buffer.size() / 4);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t b = 0; b < 4; ++b) {
          buffer[4 * i + b] = static_cast<std::byte>((tokens[i] >> (8 * b)) & 0xff);
        }
      }
      hasher.Update(std::span<const std::byte>(buffer.data(), 4 * n));
      tokens = tokens.subspan(n);
    }
  }
}

}  // namespace

std::string NamespaceDigest::ToHex() const {
  return HexLower(bytes);
}

std::string NamespaceId::ToHex() const {
  return HexLower(bytes);
}

Status Namespace::Validate() const {
  KVD_RETURN_IF_ERROR(CheckText("model", model, 1, kMaxModelNameBytes));
  if (tp_world_size < 1 || tp_world_size > kMaxTpWorldSize) {
    return InvalidArgument("namespace: tp_world_size = " + std::to_string(tp_world_size) +
                           " is out of range [1, " + std::to_string(kMaxTpWorldSize) + "]");
  }
  if (tp_rank >= tp_world_size) {
    return InvalidArgument("namespace: tp_rank = " + std::to_string(tp_rank) +
                           " must be below tp_world_size = " + std::to_string(tp_world_size));
  }
  const auto raw_dtype = static_cast<std::uint8_t>(dtype);
  if (!IsValidDType(raw_dtype)) {
    return InvalidArgument("namespace: dtype = " + std::to_string(raw_dtype) +
                           " is not a valid dtype");
  }
  const auto raw_codec = static_cast<std::uint8_t>(codec);
  if (!IsValidCodecId(raw_codec)) {
    return InvalidArgument("namespace: codec = " + std::to_string(raw_codec) +
                           " is not a valid codec id");
  }
  KVD_RETURN_IF_ERROR(CheckText("tenant", tenant, 0, kMaxTenantBytes));
  if (salt.size() > kMaxSaltBytes) {
    return InvalidArgument("namespace: salt is " + std::to_string(salt.size()) +
                           " bytes, over the limit of " + std::to_string(kMaxSaltBytes));
  }
  if (chunk_tokens < 1 || chunk_tokens > kMaxTokens) {
    return InvalidArgument("namespace: chunk_tokens = " + std::to_string(chunk_tokens) +
                           " is out of range [1, " + std::to_string(kMaxTokens) + "]");
  }
  return Status::Ok();
}

NamespaceDigest Namespace::Digest() const {
  std::string encoded;
  encoded.reserve(kNamespaceDomain.size() + 1 + 4 + model.size() + 4 + 4 + 1 + 1 + 4 + 4 +
                  tenant.size() + 4 + salt.size());
  encoded += kNamespaceDomain;
  encoded.push_back('\0');
  AppendLengthPrefixed(encoded, model);
  AppendU32Le(encoded, tp_world_size);
  AppendU32Le(encoded, tp_rank);
  AppendU8(encoded, static_cast<std::uint8_t>(dtype));
  AppendU8(encoded, static_cast<std::uint8_t>(codec));
  AppendU32Le(encoded, chunk_tokens);
  AppendLengthPrefixed(encoded, tenant);
  AppendLengthPrefixed(encoded, salt);
  NamespaceDigest digest;
  digest.bytes = Sha256Of(AsBytes(encoded));
  return digest;
}

NamespaceId Namespace::Id() const {
  const NamespaceDigest digest = Digest();
  NamespaceId id;
  std::copy_n(digest.bytes.begin(), kNamespaceIdBytes, id.bytes.begin());
  return id;
}

std::string Namespace::Label() const {
  return "model=" + model + " tp=" + std::to_string(tp_rank) + "/" + std::to_string(tp_world_size) +
         " dtype=" + std::string(DTypeName(dtype)) + " codec=" + std::string(CodecName(codec)) +
         " chunk=" + std::to_string(chunk_tokens) + " tenant=" + tenant;
}

NamespaceId ChunkKey::ns() const {
  NamespaceId id;
  std::copy_n(bytes.begin(), kNamespaceIdBytes, id.bytes.begin());
  return id;
}

std::string ChunkKey::ToHex() const {
  return HexLower(bytes);
}

Result<ChunkKey> ChunkKey::FromHex(std::string_view hex) {
  if (hex.size() != 2 * kChunkKeyBytes) {
    return InvalidArgument("chunk key: hex is " + std::to_string(hex.size()) +
                           " characters, expected " + std::to_string(2 * kChunkKeyBytes));
  }
  ChunkKey key;
  for (std::size_t i = 0; i < hex.size(); ++i) {
    const int v = HexDigitValue(hex[i]);
    if (v < 0) {
      return InvalidArgument("chunk key: hex character " + DescribeChar(hex[i]) + " at position " +
                             std::to_string(i) + " is not a hex digit");
    }
    key.bytes[i / 2] = static_cast<std::uint8_t>((key.bytes[i / 2] << 4) | v);
  }
  return key;
}

Result<ChunkKey> ChunkKey::FromBytes(std::span<const std::byte> bytes) {
  if (bytes.size() != kChunkKeyBytes) {
    return InvalidArgument("chunk key: " + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(kChunkKeyBytes));
  }
  ChunkKey key;
  std::memcpy(key.bytes.data(), bytes.data(), kChunkKeyBytes);
  return key;
}

std::size_t ChunkKeyHash::operator()(const ChunkKey& key) const noexcept {
  std::uint64_t folded = 0;
  for (std::size_t offset = 0; offset < kChunkKeyBytes; offset += 8) {
    std::uint64_t word;
    std::memcpy(&word, key.bytes.data() + offset, sizeof(word));
    folded ^= word;
  }
  return static_cast<std::size_t>(folded);
}

PrefixHasher::PrefixHasher(const Namespace& ns) : chunk_tokens_(ns.chunk_tokens) {
  assert(ns.Validate().ok());
  const NamespaceDigest digest = ns.Digest();
  chain_ = digest.bytes;
  std::copy_n(digest.bytes.begin(), kNamespaceIdBytes, ns_id_.bytes.begin());
}

Result<ChunkKey> PrefixHasher::Next(std::span<const std::uint32_t> chunk_tokens) {
  if (chunk_tokens.empty()) {
    return InvalidArgument("prefix hasher: chunk " + std::to_string(chunks_) + " is empty");
  }
  if (chunk_tokens.size() > chunk_tokens_) {
    return InvalidArgument(
        "prefix hasher: chunk " + std::to_string(chunks_) + " has " +
        std::to_string(chunk_tokens.size()) +
        " tokens, more than the namespace's chunk_tokens = " + std::to_string(chunk_tokens_));
  }
  if (ended_with_partial_) {
    return InvalidArgument("prefix hasher: chunk " + std::to_string(chunks_) + " follows chunk " +
                           std::to_string(chunks_ - 1) + ", which had fewer than chunk_tokens = " +
                           std::to_string(chunk_tokens_) +
                           " tokens; only the last chunk may be partial");
  }
  Sha256 hasher;
  hasher.Update(std::as_bytes(std::span<const std::uint8_t>(chain_)));
  UpdateWithTokens(hasher, chunk_tokens);
  chain_ = hasher.Finish();
  ++chunks_;
  ended_with_partial_ = chunk_tokens.size() < chunk_tokens_;

  ChunkKey key;
  std::copy(ns_id_.bytes.begin(), ns_id_.bytes.end(), key.bytes.begin());
  std::copy(chain_.begin(), chain_.end(), key.bytes.begin() + kNamespaceIdBytes);
  return key;
}

Result<std::vector<ChunkKey>> ChunkKeysForTokens(const Namespace& ns,
                                                 std::span<const std::uint32_t> tokens,
                                                 bool include_partial_last) {
  KVD_RETURN_IF_ERROR(ns.Validate());
  const std::size_t per_chunk = ns.chunk_tokens;
  const std::size_t full_chunks = tokens.size() / per_chunk;
  const bool partial = tokens.size() % per_chunk != 0 && include_partial_last;
  std::vector<ChunkKey> keys;
  keys.reserve(full_chunks + (partial ? 1 : 0));
  PrefixHasher hasher(ns);
  for (std::size_t i = 0; i < full_chunks; ++i) {
    KVD_ASSIGN_OR_RETURN(ChunkKey key, hasher.Next(tokens.subspan(i * per_chunk, per_chunk)));
    keys.push_back(key);
  }
  if (partial) {
    KVD_ASSIGN_OR_RETURN(ChunkKey key, hasher.Next(tokens.subspan(full_chunks * per_chunk)));
    keys.push_back(key);
  }
  return keys;
}

}  // namespace kvdepot
