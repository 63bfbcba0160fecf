// libkvdepot_lmcache.so: LMCache's native remote-backend C ABI (connector_api.h) over the kvdepot
// client. Every entry point catches everything: nothing may unwind into LMCache's loader.
#include "connector_api.h"

#include <charconv>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "flat_json.h"
#include "kvdepot/client/client.h"
#include "kvdepot/protocol/lm_value.h"

namespace kvdepot::lmcache {
namespace {

constexpr std::size_t kMaxKeyBytes = 256 - lm::kNamespaceIdBytes;  // the daemon's default limit

struct Connector {
  std::unique_ptr<client::Client> client;
  std::string prefix;  // the namespace id
};

Result<std::uint64_t> Number(const std::map<std::string, std::string>& cfg, const char* name,
                             std::uint64_t fallback, std::uint64_t min, std::uint64_t max) {
  const auto it = cfg.find(name);
  if (it == cfg.end()) return fallback;
  std::uint64_t v = 0;
  const std::string& t = it->second;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || v < min || v > max) {
    return InvalidArgument(std::string(name) + " = '" + t + "' is not an integer in [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

Result<std::unique_ptr<Connector>> Create(std::string_view json) {
  KVD_ASSIGN_OR_RETURN(auto cfg, ParseFlatJsonObject(json));
  client::ClientOptions options;
  options.address = cfg.count("address") ? cfg["address"] : "127.0.0.1:7600";
  KVD_ASSIGN_OR_RETURN(std::uint64_t timeout, Number(cfg, "timeout_ms", 30000, 1, 3600000));
  KVD_ASSIGN_OR_RETURN(std::uint64_t pool, Number(cfg, "pool_size", 8, 1, 1024));
  options.timeout = std::chrono::milliseconds(timeout);
  options.pool_size = static_cast<std::size_t>(pool);
  if (options.address.empty()) return InvalidArgument("address is empty");
  // Security (docs/security.md): a token file, and TLS when a CA or client certificate is named.
  if (cfg.count("token_file") && !cfg["token_file"].empty()) {
    KVD_ASSIGN_OR_RETURN(options.token, client::ReadTokenFile(cfg["token_file"]));
  }
  for (const auto& [name, field] :
       {std::pair<const char*, std::string*>{"tls_ca_file", &options.tls_ca_file},
        {"tls_cert_file", &options.tls_cert_file},
        {"tls_key_file", &options.tls_key_file},
        {"tls_server_name", &options.tls_server_name}}) {
    if (cfg.count(name)) *field = cfg[name];
  }
  options.tls = (cfg.count("tls") && cfg["tls"] == "true") || !options.tls_ca_file.empty() ||
                !options.tls_cert_file.empty();
  // Smart routing in a cluster (docs/cluster.md, "Smart clients"): "auto" (default) or "off".
  const std::string routing = cfg.count("cluster_routing") ? cfg["cluster_routing"] : "auto";
  if (routing == "auto") {
    options.cluster_routing = client::ClusterRouting::kAuto;
  } else if (routing == "off") {
    options.cluster_routing = client::ClusterRouting::kOff;
  } else {
    return InvalidArgument("cluster_routing = '" + routing +
                           "': expected \"auto\" (send each key to its owner in a cluster) or "
                           "\"off\" (everything to address)");
  }
  auto c = std::make_unique<Connector>();
  KVD_ASSIGN_OR_RETURN(
      c->prefix, lm::NamespaceId(cfg.count("namespace") ? cfg["namespace"]
                                                        : std::string(lm::kDefaultNamespace)));
  c->client = std::make_unique<client::Client>(options);
  return c;
}

// The stored key, or "" for a NULL, empty or over-long key.
std::string StoredKey(const Connector& c, const char* key) {
  if (key == nullptr) return {};
  const std::size_t n = ::strnlen(key, kMaxKeyBytes + 1);
  if (n == 0 || n > kMaxKeyBytes) return {};
  return c.prefix + std::string(key, n);
}

template <typename Fn>
std::int32_t Guard(ConnectorHandle handle, Fn&& fn) {
  if (handle == nullptr) return -1;
  try {
    return fn(*static_cast<Connector*>(handle));
  } catch (...) {
    return -1;
  }
}

}  // namespace
}  // namespace kvdepot::lmcache

using kvdepot::lmcache::Connector;
using kvdepot::lmcache::Guard;
using kvdepot::lmcache::StoredKey;
namespace lm = kvdepot::lm;

extern "C" {

ConnectorHandle connector_create(const char* config_json, size_t config_json_len) {
  try {
    const std::string_view json = config_json == nullptr
                                      ? std::string_view("{}")
                                      : std::string_view(config_json, config_json_len);
    auto c = kvdepot::lmcache::Create(json);
    return c.ok() ? static_cast<ConnectorHandle>(c->release()) : nullptr;
  } catch (...) {
    return nullptr;
  }
}

void connector_destroy(ConnectorHandle handle) {
  delete static_cast<Connector*>(handle);
}

int32_t connector_exists(ConnectorHandle handle, const char* key) {
  const int32_t rc = Guard(handle, [&](Connector& c) -> int32_t {
    const std::string k = StoredKey(c, key);
    if (k.empty()) return 0;
    const std::string keys[] = {k};
    auto r = c.client->Lookup(keys);
    return r.ok() && r->prefix_length == 1 ? 1 : 0;
  });
  return rc == 1 ? 1 : 0;
}

int32_t connector_put(ConnectorHandle handle, const char* key, const uint8_t* data,
                      size_t data_len) {
  return Guard(handle, [&](Connector& c) -> int32_t {
    const std::string k = StoredKey(c, key);
    if (k.empty() || (data == nullptr && data_len != 0)) return -1;
    std::byte head[lm::kValueHeaderBytes];
    lm::EncodeValueHeader(lm::ValueHeader{}, head);
    const std::span<const std::byte> parts[] = {
        head, std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), data_len)};
    return c.client->PutParts(k, parts).ok() ? 0 : -1;
  });
}

int32_t connector_get(ConnectorHandle handle, const char* key, uint8_t* out_buf, size_t out_cap,
                      size_t* out_len) {
  return Guard(handle, [&](Connector& c) -> int32_t {
    const std::string k = StoredKey(c, key);
    if (k.empty() || out_len == nullptr || (out_buf == nullptr && out_cap != 0)) return -1;
    std::byte head[lm::kValueHeaderBytes];
    auto r = c.client->GetInto(
        k, head, std::span<std::byte>(reinterpret_cast<std::byte*>(out_buf), out_cap));
    if (!r.ok()) return -1;
    if (!r->has_value()) return 1;
    if (!lm::DecodeValueHeader(std::span<const std::byte>(head, std::min(**r, sizeof(head))))
             .ok()) {
      return -1;  // not a value stored through an LMCache front end
    }
    *out_len = **r - lm::kValueHeaderBytes;
    return 0;
  });
}

int32_t connector_remove(ConnectorHandle handle, const char* key) {
  return Guard(handle, [&](Connector& c) -> int32_t {
    const std::string k = StoredKey(c, key);
    if (k.empty()) return -1;
    const std::string keys[] = {k};
    auto r = c.client->Delete(keys);
    if (!r.ok() || r->size() != 1) return -1;
    return (*r)[0] == kvdepot::StatusCode::kOk ? 1 : 0;
  });
}

int32_t connector_file_size(ConnectorHandle handle, const char* key, uint64_t* out_size) {
  return Guard(handle, [&](Connector& c) -> int32_t {
    const std::string k = StoredKey(c, key);
    if (k.empty() || out_size == nullptr) return -1;
    kvdepot::protocol::ScanRequest q;
    q.limit = 1;
    q.prefix = k;
    auto r = c.client->Scan(q);
    if (!r.ok()) return -1;
    if (r->entries.empty() || r->entries[0].key != k) return 1;
    if (r->entries[0].value_bytes < lm::kValueHeaderBytes) return -1;
    *out_size = r->entries[0].value_bytes - lm::kValueHeaderBytes;
    return 0;
  });
}

int32_t connector_list_keys(ConnectorHandle handle, char* out_buf, size_t out_cap,
                            size_t* out_len) {
  return Guard(handle, [&](Connector& c) -> int32_t {
    if (out_len == nullptr || (out_buf == nullptr && out_cap != 0)) return -1;
    std::string all;
    kvdepot::protocol::ScanRequest q;
    q.limit = 4096;
    q.prefix = c.prefix;
    for (;;) {
      auto r = c.client->Scan(q);
      if (!r.ok()) return -1;
      for (const auto& e : r->entries) {
        if (!all.empty()) all += '\n';
        all.append(e.key, c.prefix.size());
      }
      if (r->next_cursor.empty() || r->entries.empty()) break;
      q.cursor = r->next_cursor;
    }
    *out_len = all.size();
    if (all.size() > out_cap) return -1;
    if (!all.empty()) std::memcpy(out_buf, all.data(), all.size());
    return 0;
  });
}

}  // extern "C"
