/* The C ABI of LMCache's native remote backend (LMCache: rust/remote_backend/include/
 * connector_api.h; pinned in docs/lmcache.md), as libkvdepot_lmcache.so implements it over the
 * kvdepot client library.
 *
 * kvdepot's implementation: every function is thread-safe (a pool of connections); no function
 * throws or aborts; a NULL handle or key is an error. Keys are NUL-terminated, 1..240 bytes, and
 * are stored as `namespace id (16 bytes) || key` with a 32-byte metadata header in front of the
 * value (kvdepot/protocol/lm_value.h), so chunks are shared with the lm:// listener and the Python
 * adapter under the same namespace name. */
#ifndef KVDEPOT_LMCACHE_CONNECTOR_API_H_
#define KVDEPOT_LMCACHE_CONNECTOR_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* ConnectorHandle;

/* config_json: a JSON object, not NUL-terminated. Keys used (others are ignored):
 * "address" ("HOST:PORT" or "unix:PATH", default "127.0.0.1:7600"), "namespace" (default
 * "lmcache"), "timeout_ms" (default 30000), "pool_size" (default 8), "cluster_routing" ("auto",
 * the default: in a kvdepot cluster each key goes straight to its owner; "off"); numbers may be
 * given as strings. NULL on a malformed document or a bad value (the daemon need not be up yet).
 * In a cluster, connector_list_keys lists the keys held by the node at "address" only. */
ConnectorHandle connector_create(const char* config_json, size_t config_json_len);
void connector_destroy(ConnectorHandle handle);
/* 1 when present, 0 when absent or on any error. */
int32_t connector_exists(ConnectorHandle handle, const char* key);
/* 0 stored; -1 refused or failed (e.g. larger than the daemon accepts, daemon unreachable). */
int32_t connector_put(ConnectorHandle handle, const char* key, const uint8_t* data,
                      size_t data_len);
/* 0 and *out_len = size on a hit; 1 on a miss; -1 on an error, including a value larger than
 * out_cap. */
int32_t connector_get(ConnectorHandle handle, const char* key, uint8_t* out_buf, size_t out_cap,
                      size_t* out_len);
/* 1 removed, 0 absent, -1 error. */
int32_t connector_remove(ConnectorHandle handle, const char* key);
/* 0 and *out_size on a hit; 1 on a miss; -1 on an error. */
int32_t connector_file_size(ConnectorHandle handle, const char* key, uint64_t* out_size);
/* The namespace's keys joined by '\n' (no trailing newline), *out_len bytes, return 0. When they
 * do not fit in out_cap: -1 with *out_len set to the size needed. */
int32_t connector_list_keys(ConnectorHandle handle, char* out_buf, size_t out_cap, size_t* out_len);

#ifdef __cplusplus
}
#endif

#endif /* KVDEPOT_LMCACHE_CONNECTOR_API_H_ */
