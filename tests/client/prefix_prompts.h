// Prompts for the tests of the prompt-level calls (Client::PutPrefix / LookupPrefix,
// kvdepot_put_prefix / kvdepot_lookup_prefix, Python's put_prefix / lookup_prefix): token ids and
// chunk values that are pure functions of a seed and a chunk index, the same as
// tests/cluster/prefix_client.py computes (prompt_tokens, chunk_value), and their C API forms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvdepot/kvdepot.h"
#include "kvdepot/protocol/chunk_key.h"

namespace kvdepot::test {

inline constexpr std::uint32_t kPromptChunkTokens = 16;

// `count` token ids of prompt `seed`.
inline std::vector<std::uint32_t> PromptTokens(std::uint32_t seed, std::size_t count) {
  std::vector<std::uint32_t> t(count);
  for (std::size_t i = 0; i < count; ++i) t[i] = static_cast<std::uint32_t>(seed * 104729 + i);
  return t;
}

// The value of chunk `i` (1024 + 3 i bytes).
inline std::vector<std::byte> PromptChunkValue(std::size_t i) {
  std::vector<std::byte> v(1024 + 3 * i);
  for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<std::byte>((i * 7 + j) & 0xff);
  return v;
}

// The values of chunks 0 .. count - 1, and views of them.
struct PromptValues {
  explicit PromptValues(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) values.push_back(PromptChunkValue(i));
    for (const auto& v : values) {
      spans.emplace_back(v);
      pointers.push_back(v.data());
      lengths.push_back(v.size());
    }
  }
  std::vector<std::vector<std::byte>> values;
  std::vector<std::span<const std::byte>> spans;  // for Client::PutPrefix
  std::vector<const void*> pointers;              // for kvdepot_put_prefix
  std::vector<std::size_t> lengths;
};

inline Namespace PromptNamespace(const std::string& model) {
  Namespace ns;
  ns.model = model;
  ns.chunk_tokens = kPromptChunkTokens;
  return ns;
}

// The same namespace for the C API; `model` must outlive it.
inline kvdepot_namespace CPromptNamespace(const char* model) {
  kvdepot_namespace ns{};
  ns.model = model;
  ns.tp_world_size = 1;
  ns.dtype = 1;
  ns.chunk_tokens = kPromptChunkTokens;
  return ns;
}

// What kvdepot_lookup_prefix answered.
struct CPrefixFound {
  int rc = -1;
  std::string error;  // kvdepot_last_error
  std::size_t prefix_length = 0;
  std::size_t chunks = 0;
};

// kvdepot_lookup_prefix of `tokens` in namespace CPromptNamespace(model) through a new C client of
// `address` (G from its view of the cluster).
inline CPrefixFound CLookupPrefix(const std::string& address, const char* model,
                                  std::span<const std::uint32_t> tokens) {
  CPrefixFound out;
  kvdepot_client* c = nullptr;
  out.rc = kvdepot_open(address.c_str(), 5000, &c);
  if (out.rc != KVDEPOT_OK) return out;
  const kvdepot_namespace ns = CPromptNamespace(model);
  out.rc = kvdepot_lookup_prefix(c, &ns, tokens.data(), tokens.size(), 0, &out.prefix_length,
                                 &out.chunks, nullptr, 0);
  out.error = kvdepot_last_error(c);
  kvdepot_close(c);
  return out;
}

}  // namespace kvdepot::test
