// The C API (kvdepot/kvdepot.h) over the C++ client. No exception or C++ type crosses it.
#include "kvdepot/kvdepot.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/protocol/chunk_key.h"

struct kvdepot_client {
  explicit kvdepot_client(kvdepot::client::ClientOptions options) : client(std::move(options)) {}
  kvdepot::client::Client client;
  std::string last_error;
};

namespace {

int Report(kvdepot_client* c, const kvdepot::Status& s) {
  if (c != nullptr) c->last_error = s.ok() ? "" : s.message();
  return static_cast<int>(s.code());
}

std::string_view AsKey(const void* key, std::size_t len) {
  return {static_cast<const char*>(key), len};
}

// A C placement key: NULL or length 0 is none (the key places itself).
std::string_view AsPlacement(const void* placement_key, std::size_t len) {
  return placement_key == nullptr ? std::string_view() : AsKey(placement_key, len);
}

kvdepot::Namespace ToNamespace(const kvdepot_namespace& ns) {
  kvdepot::Namespace n;
  n.model = ns.model;
  n.tp_world_size = ns.tp_world_size;
  n.tp_rank = ns.tp_rank;
  n.dtype = static_cast<kvdepot::DType>(ns.dtype);
  n.codec = static_cast<kvdepot::CodecId>(ns.codec);
  if (ns.tenant != nullptr) n.tenant = ns.tenant;
  if (ns.salt != nullptr) n.salt.assign(static_cast<const char*>(ns.salt), ns.salt_len);
  if (ns.chunk_tokens != 0) n.chunk_tokens = ns.chunk_tokens;
  return n;
}

// Whether a prompt is given: a namespace with a model, and tokens unless there are none.
bool PromptGiven(const kvdepot_namespace* ns, const uint32_t* tokens, size_t n_tokens) {
  return ns != nullptr && ns->model != nullptr && (tokens != nullptr || n_tokens == 0);
}

template <typename Fn>
int Guard(kvdepot_client* c, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Report(c, kvdepot::ResourceExhausted("out of memory"));
  } catch (...) {
    return Report(c, kvdepot::Internal("unexpected exception"));
  }
}

}  // namespace

extern "C" {

int kvdepot_open(const char* address, int timeout_ms, kvdepot_client** out) {
  return kvdepot_open_ex(address, timeout_ms, nullptr, out);
}

int kvdepot_open_ex(const char* address, int timeout_ms, const kvdepot_options* opts,
                    kvdepot_client** out) {
  if (address == nullptr || out == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  *out = nullptr;
  const std::string addr(address);
  if (addr.rfind("unix:", 0) != 0 && addr.rfind(':') == std::string::npos) {
    return KVDEPOT_INVALID_ARGUMENT;
  }
  kvdepot::client::ClientOptions options;
  options.address = addr;
  if (timeout_ms > 0) options.timeout = std::chrono::milliseconds(timeout_ms);
  if (opts != nullptr) {
    const auto text = [](const char* s) { return s == nullptr ? std::string() : std::string(s); };
    options.token = text(opts->token);
    if (options.token.empty() && !text(opts->token_file).empty()) {
      auto token = kvdepot::client::ReadTokenFile(opts->token_file);
      if (!token.ok()) return static_cast<int>(token.status().code());
      options.token = std::move(*token);
    }
    options.tls_ca_file = text(opts->tls_ca_file);
    options.tls_cert_file = text(opts->tls_cert_file);
    options.tls_key_file = text(opts->tls_key_file);
    options.tls_server_name = text(opts->tls_server_name);
    options.tls = opts->tls != 0 || !options.tls_ca_file.empty() || !options.tls_cert_file.empty();
    switch (opts->cluster_routing) {
      case KVDEPOT_CLUSTER_ROUTING_AUTO:
        options.cluster_routing = kvdepot::client::ClusterRouting::kAuto;
        break;
      case KVDEPOT_CLUSTER_ROUTING_OFF:
        options.cluster_routing = kvdepot::client::ClusterRouting::kOff;
        break;
      default: return KVDEPOT_INVALID_ARGUMENT;
    }
  }
  *out = new (std::nothrow) kvdepot_client(std::move(options));
  return *out == nullptr ? KVDEPOT_RESOURCE_EXHAUSTED : KVDEPOT_OK;
}

void kvdepot_close(kvdepot_client* client) {
  delete client;
}

const char* kvdepot_last_error(const kvdepot_client* client) {
  return client == nullptr ? "no client" : client->last_error.c_str();
}

int kvdepot_ping(kvdepot_client* c) {
  if (c == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  return Guard(c, [&] { return Report(c, c->client.Ping()); });
}

int kvdepot_put(kvdepot_client* c, const void* key, size_t key_len, const void* value,
                size_t value_len) {
  return kvdepot_put_placed(c, key, key_len, value, value_len, nullptr, 0);
}

int kvdepot_put_placed(kvdepot_client* c, const void* key, size_t key_len, const void* value,
                       size_t value_len, const void* placement_key, size_t placement_key_len) {
  if (c == nullptr || key == nullptr || (value == nullptr && value_len != 0)) {
    return KVDEPOT_INVALID_ARGUMENT;
  }
  return Guard(c, [&] {
    return Report(
        c, c->client.Put(AsKey(key, key_len), {static_cast<const std::byte*>(value), value_len},
                         AsPlacement(placement_key, placement_key_len)));
  });
}

int kvdepot_get(kvdepot_client* c, const void* key, size_t key_len, void** value,
                size_t* value_len) {
  return kvdepot_get_placed(c, key, key_len, nullptr, 0, value, value_len);
}

int kvdepot_get_placed(kvdepot_client* c, const void* key, size_t key_len,
                       const void* placement_key, size_t placement_key_len, void** value,
                       size_t* value_len) {
  if (c == nullptr || key == nullptr || value == nullptr || value_len == nullptr) {
    return KVDEPOT_INVALID_ARGUMENT;
  }
  *value = nullptr;
  *value_len = 0;
  return Guard(c, [&] {
    auto got = c->client.Get(AsKey(key, key_len), AsPlacement(placement_key, placement_key_len));
    if (!got.ok()) return Report(c, got.status());
    if (!got->has_value()) return Report(c, kvdepot::NotFound("key not cached"));
    const auto& bytes = **got;
    void* buf = std::malloc(bytes.empty() ? 1 : bytes.size());
    if (buf == nullptr) return Report(c, kvdepot::ResourceExhausted("out of memory"));
    std::memcpy(buf, bytes.data(), bytes.size());
    *value = buf;
    *value_len = bytes.size();
    return Report(c, kvdepot::Status::Ok());
  });
}

void kvdepot_free(void* buffer) {
  std::free(buffer);
}

int kvdepot_lookup(kvdepot_client* c, const void* const* keys, const size_t* key_lens, size_t count,
                   size_t* prefix_length, uint8_t* tiers) {
  return kvdepot_lookup_placed(c, keys, key_lens, nullptr, nullptr, count, prefix_length, tiers);
}

int kvdepot_lookup_placed(kvdepot_client* c, const void* const* keys, const size_t* key_lens,
                          const void* const* placement_keys, const size_t* placement_key_lens,
                          size_t count, size_t* prefix_length, uint8_t* tiers) {
  if (c == nullptr || keys == nullptr || key_lens == nullptr || prefix_length == nullptr ||
      count == 0 || (placement_keys != nullptr && placement_key_lens == nullptr)) {
    return KVDEPOT_INVALID_ARGUMENT;
  }
  return Guard(c, [&] {
    std::vector<std::string> list;
    list.reserve(count);
    for (size_t i = 0; i < count; ++i) list.emplace_back(AsKey(keys[i], key_lens[i]));
    std::vector<std::string> placement;  // none given: no placement section
    for (size_t i = 0; placement_keys != nullptr && i < count; ++i) {
      placement.emplace_back(AsPlacement(placement_keys[i], placement_key_lens[i]));
    }
    auto r = c->client.Lookup(list, placement);
    if (!r.ok()) return Report(c, r.status());
    *prefix_length = r->prefix_length;
    if (tiers != nullptr) {
      for (size_t i = 0; i < count && i < r->tiers.size(); ++i) {
        tiers[i] = static_cast<uint8_t>(r->tiers[i]);
      }
    }
    return Report(c, kvdepot::Status::Ok());
  });
}

int kvdepot_delete(kvdepot_client* c, const void* key, size_t key_len) {
  return kvdepot_delete_placed(c, key, key_len, nullptr, 0);
}

int kvdepot_delete_placed(kvdepot_client* c, const void* key, size_t key_len,
                          const void* placement_key, size_t placement_key_len) {
  if (c == nullptr || key == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  return Guard(c, [&] {
    const std::string list[] = {std::string(AsKey(key, key_len))};
    const std::string placed(AsPlacement(placement_key, placement_key_len));
    const std::span<const std::string> placement =
        placed.empty() ? std::span<const std::string>() : std::span<const std::string>(&placed, 1);
    auto r = c->client.Delete(list, placement);
    if (!r.ok()) return Report(c, r.status());
    return Report(c, (*r)[0] == kvdepot::StatusCode::kOk ? kvdepot::Status::Ok()
                                                         : kvdepot::NotFound("key not cached"));
  });
}

int kvdepot_put_prefix(kvdepot_client* c, const kvdepot_namespace* ns, const uint32_t* tokens,
                       size_t n_tokens, const void* const* values, const size_t* value_lens,
                       size_t n_values, uint32_t group_chunks, int* statuses) {
  if (c == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  if (!PromptGiven(ns, tokens, n_tokens) ||
      (n_values != 0 && (values == nullptr || value_lens == nullptr))) {
    return Report(c, kvdepot::InvalidArgument(
                         "kvdepot_put_prefix: ns, ns->model, tokens (unless n_tokens is 0), values "
                         "and value_lens (unless n_values is 0) must not be NULL"));
  }
  return Guard(c, [&] {
    std::vector<std::span<const std::byte>> chunks;
    chunks.reserve(n_values);
    for (size_t i = 0; i < n_values; ++i) {
      if (values[i] == nullptr && value_lens[i] != 0) {
        return Report(c, kvdepot::InvalidArgument("put_prefix: values[" + std::to_string(i) +
                                                  "] is NULL with a non-zero length"));
      }
      chunks.emplace_back(static_cast<const std::byte*>(values[i]), value_lens[i]);
    }
    auto r = c->client.PutPrefix(ToNamespace(*ns), {tokens, n_tokens}, chunks, group_chunks);
    if (!r.ok()) return Report(c, r.status());
    kvdepot::Status first = kvdepot::Status::Ok();
    for (size_t i = 0; i < r->size(); ++i) {
      if (statuses != nullptr) statuses[i] = static_cast<int>((*r)[i]);
      if (first.ok() && (*r)[i] != kvdepot::StatusCode::kOk) {
        first = kvdepot::Status(
            (*r)[i], "put_prefix: chunk " + std::to_string(i) + " of " + std::to_string(r->size()) +
                         " refused: " + std::string(kvdepot::StatusCodeName((*r)[i])));
      }
    }
    return Report(c, first);
  });
}

int kvdepot_lookup_prefix(kvdepot_client* c, const kvdepot_namespace* ns, const uint32_t* tokens,
                          size_t n_tokens, uint32_t group_chunks, size_t* prefix_length,
                          size_t* n_chunks, uint8_t* tiers, size_t tiers_capacity) {
  if (c == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  if (!PromptGiven(ns, tokens, n_tokens) || prefix_length == nullptr ||
      (tiers == nullptr && tiers_capacity != 0)) {
    return Report(c, kvdepot::InvalidArgument(
                         "kvdepot_lookup_prefix: ns, ns->model, tokens (unless n_tokens is 0), "
                         "prefix_length and tiers (unless tiers_capacity is 0) must not be NULL"));
  }
  return Guard(c, [&] {
    auto r = c->client.LookupPrefix(ToNamespace(*ns), {tokens, n_tokens}, group_chunks);
    if (!r.ok()) return Report(c, r.status());
    *prefix_length = r->prefix_length;
    if (n_chunks != nullptr) *n_chunks = r->keys.size();
    for (size_t i = 0; i < tiers_capacity && i < r->tiers.size(); ++i) {
      tiers[i] = static_cast<uint8_t>(r->tiers[i]);
    }
    return Report(c, kvdepot::Status::Ok());
  });
}

int kvdepot_chunk_keys(const kvdepot_namespace* ns, const uint32_t* tokens, size_t n_tokens,
                       int include_partial, uint8_t* keys_out, size_t keys_capacity,
                       size_t* n_keys) {
  if (!PromptGiven(ns, tokens, n_tokens) || n_keys == nullptr) return KVDEPOT_INVALID_ARGUMENT;
  return Guard(nullptr, [&] {
    auto keys =
        kvdepot::ChunkKeysForTokens(ToNamespace(*ns), {tokens, n_tokens}, include_partial != 0);
    if (!keys.ok()) return static_cast<int>(keys.status().code());
    *n_keys = keys->size();
    if (keys->size() > keys_capacity) return static_cast<int>(KVDEPOT_OUT_OF_RANGE);
    for (size_t i = 0; i < keys->size(); ++i) {
      std::memcpy(keys_out + i * KVDEPOT_CHUNK_KEY_BYTES, (*keys)[i].bytes.data(),
                  KVDEPOT_CHUNK_KEY_BYTES);
    }
    return static_cast<int>(KVDEPOT_OK);
  });
}

}  // extern "C"
