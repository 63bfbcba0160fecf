/* libkvdepot C API: a thin C interface to the kvdepot client library, for engines and bindings
 * in other languages (Python ctypes/cffi, Rust, Go).
 *
 * Every function returns a kvdepot status code (0 = KVDEPOT_OK; the values are those of the
 * protocol, docs/protocol.md). After a failure, kvdepot_last_error(client) describes it until the
 * next call on that client. A kvdepot_client may be used from one thread at a time; open one per
 * thread (each holds a small connection pool and reconnects after a broken connection).
 * A failed GET never hands out partial bytes. */
#ifndef KVDEPOT_KVDEPOT_H_
#define KVDEPOT_KVDEPOT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KVDEPOT_OK = 0,
  KVDEPOT_INVALID_ARGUMENT = 1,
  KVDEPOT_NOT_FOUND = 2,
  KVDEPOT_CORRUPTION = 3,
  KVDEPOT_OUT_OF_RANGE = 4,
  KVDEPOT_RESOURCE_EXHAUSTED = 5,
  KVDEPOT_IO_ERROR = 6,
  KVDEPOT_UNAVAILABLE = 7,
  KVDEPOT_UNIMPLEMENTED = 8,
  KVDEPOT_INTERNAL = 9,
  KVDEPOT_UNAUTHENTICATED = 13,  /* no or a refused AUTH token (docs/security.md) */
  KVDEPOT_PERMISSION_DENIED = 14 /* the token may not use that key's namespace */
};

/* Tiers reported by kvdepot_lookup. */
enum { KVDEPOT_TIER_NONE = 0, KVDEPOT_TIER_GPU = 1, KVDEPOT_TIER_HOST = 2, KVDEPOT_TIER_SSD = 3 };

typedef struct kvdepot_client kvdepot_client;

/* address: "HOST:PORT" or "unix:/path". timeout_ms: per send/receive (0: 30 s).
 * On success *out is a client to release with kvdepot_close; a client is returned even when the
 * daemon is unreachable (connections are made on demand), so configuration errors surface here
 * and availability errors at the first call. */
int kvdepot_open(const char* address, int timeout_ms, kvdepot_client** out);
void kvdepot_close(kvdepot_client* client);

/* kvdepot_options.cluster_routing (docs/cluster.md, "Smart clients"). */
enum {
  /* Default. At the first call, ask the daemon at `address` for its cluster view (CLUSTER_INFO);
   * in a cluster, send each key's requests straight to the key's owner (a LOOKUP is split by owner
   * and sent to all owners at once), refresh the view every 5 s and at once after a failure, and
   * route around members that are down. A daemon not in a cluster: as OFF. */
  KVDEPOT_CLUSTER_ROUTING_AUTO = 0,
  KVDEPOT_CLUSTER_ROUTING_OFF = 1 /* every request to `address` (members forward) */
};

/* Options for kvdepot_open_ex; NULL, "" or 0 leaves a field at its default. Zero-initialize it
 * (`kvdepot_options o = {0};`) so that fields added later keep their defaults. */
typedef struct kvdepot_options {
  const char* token;           /* AUTH token sent on every connection */
  const char* token_file;      /* or: a file whose first token is sent */
  int tls;                     /* non-zero: TLS (TCP only) */
  const char* tls_ca_file;     /* CA to verify the server (NULL: system CAs) */
  const char* tls_cert_file;   /* client certificate (mutual TLS) */
  const char* tls_key_file;    /* its key */
  const char* tls_server_name; /* name to verify (NULL: the address's host) */
  int cluster_routing;         /* KVDEPOT_CLUSTER_ROUTING_AUTO (0) or _OFF */
} kvdepot_options;

/* kvdepot_open with authentication, TLS and cluster routing (options may be NULL: same as
 * kvdepot_open). A cluster_routing value other than AUTO and OFF is KVDEPOT_INVALID_ARGUMENT. A
 * token_file that cannot be read fails here with KVDEPOT_NOT_FOUND or KVDEPOT_INVALID_ARGUMENT
 * and *out stays NULL; a refused token or TLS failure surfaces at the first call. */
int kvdepot_open_ex(const char* address, int timeout_ms, const kvdepot_options* options,
                    kvdepot_client** out);
/* The last failure's message ("" after a success). Owned by the client. */
const char* kvdepot_last_error(const kvdepot_client* client);

int kvdepot_ping(kvdepot_client* client);
int kvdepot_put(kvdepot_client* client, const void* key, size_t key_len, const void* value,
                size_t value_len);
/* On success *value points to a kvdepot_free-able buffer of *value_len bytes.
 * KVDEPOT_NOT_FOUND on a miss (*value = NULL). */
int kvdepot_get(kvdepot_client* client, const void* key, size_t key_len, void** value,
                size_t* value_len);
void kvdepot_free(void* buffer);
/* Keys in prefix order. *prefix_length: how many leading keys are cached; tiers (may be NULL):
 * count entries, one KVDEPOT_TIER_* per key. One round trip. */
int kvdepot_lookup(kvdepot_client* client, const void* const* keys, const size_t* key_lens,
                   size_t count, size_t* prefix_length, uint8_t* tiers);
/* KVDEPOT_NOT_FOUND when the key was absent. */
int kvdepot_delete(kvdepot_client* client, const void* key, size_t key_len);

/* Placement keys (docs/cluster.md, "Prefix locality in requests"): in a cluster, a key sent with
 * a placement key is placed by it instead of by itself: its owners are the placement key's, and
 * the request carries it to them (kFlagPlacement). A prompt's chunks are stored in groups of G
 * consecutive chunks, each placed by its group's first chunk's key, its anchor (G: the cluster's
 * cluster.group_chunks); kvdepot_put_prefix and kvdepot_lookup_prefix below compute the anchors
 * themselves. A NULL or empty (length 0) placement key: placed by the key itself, exactly as the
 * calls above. A single daemon ignores placement keys. Otherwise as the calls without _placed. */
int kvdepot_put_placed(kvdepot_client* client, const void* key, size_t key_len, const void* value,
                       size_t value_len, const void* placement_key, size_t placement_key_len);
int kvdepot_get_placed(kvdepot_client* client, const void* key, size_t key_len,
                       const void* placement_key, size_t placement_key_len, void** value,
                       size_t* value_len);
/* placement_keys and placement_key_lens: NULL (every key placed by itself) or count entries. */
int kvdepot_lookup_placed(kvdepot_client* client, const void* const* keys, const size_t* key_lens,
                          const void* const* placement_keys, const size_t* placement_key_lens,
                          size_t count, size_t* prefix_length, uint8_t* tiers);
int kvdepot_delete_placed(kvdepot_client* client, const void* key, size_t key_len,
                          const void* placement_key, size_t placement_key_len);

/* A chunk-key namespace (docs/format.md section 2). dtype: 1 fp16, 2 bf16, 3 fp32; codec: 0 raw,
 * 1 cachegen, 2 hack-int2; chunk_tokens 0 means 256. tenant may be NULL; salt may be NULL. */
typedef struct kvdepot_namespace {
  const char* model;
  uint32_t tp_world_size;
  uint32_t tp_rank;
  uint8_t dtype;
  uint8_t codec;
  const char* tenant;
  const void* salt;
  size_t salt_len;
  uint32_t chunk_tokens;
} kvdepot_namespace;

#define KVDEPOT_CHUNK_KEY_BYTES 48

/* Writes the 48-byte keys of the chunks of `tokens` (the last partial chunk included when
 * include_partial) into keys_out (capacity keys_capacity keys); *n_keys receives the count.
 * KVDEPOT_OUT_OF_RANGE when keys_capacity is too small (*n_keys says how many are needed).
 * Needs no client: pure computation. */
int kvdepot_chunk_keys(const kvdepot_namespace* ns, const uint32_t* tokens, size_t n_tokens,
                       int include_partial, uint8_t* keys_out, size_t keys_capacity,
                       size_t* n_keys);

/* Prompt-level calls: a prompt's chunks are the full chunks of ns->chunk_tokens tokens of
 * `tokens` (a partial last chunk is neither stored nor looked up), keyed as kvdepot_chunk_keys
 * keys them and placed in groups of G by their group's anchor, exactly as the C++
 * Client::PutPrefix / LookupPrefix and Python's put_prefix / lookup_prefix place them, so that
 * each finds what the others stored. group_chunks (G): 0 takes the cluster's G from the client's
 * view of the cluster (KVDEPOT_CLUSTER_ROUTING_AUTO; with _OFF or a daemon not in a cluster,
 * every chunk is placed by its own key); > 0 overrides it (the same G must be used to store and
 * to look up). */

/* Stores chunk i as values[i] (value_lens[i] bytes); n_values must be the number of full chunks
 * (n_tokens / chunk_tokens), else KVDEPOT_INVALID_ARGUMENT before anything is sent. In a cluster
 * the chunks are sent to their owners in parallel. statuses (may be NULL): n_values entries, the
 * KVDEPOT_* status of each chunk's store. Returns KVDEPOT_OK when every chunk was stored; else
 * the request's error, or the first refused chunk's status (kvdepot_last_error names it). */
int kvdepot_put_prefix(kvdepot_client* client, const kvdepot_namespace* ns, const uint32_t* tokens,
                       size_t n_tokens, const void* const* values, const size_t* value_lens,
                       size_t n_values, uint32_t group_chunks, int* statuses);
/* One LOOKUP round trip for the prompt's chunks. *prefix_length: how many leading chunks are
 * cached; *n_chunks (may be NULL): how many full chunks the prompt has; tiers (may be NULL):
 * tiers_capacity entries, the first min(n_chunks, tiers_capacity) receive a KVDEPOT_TIER_* per
 * chunk. */
int kvdepot_lookup_prefix(kvdepot_client* client, const kvdepot_namespace* ns,
                          const uint32_t* tokens, size_t n_tokens, uint32_t group_chunks,
                          size_t* prefix_length, size_t* n_chunks, uint8_t* tiers,
                          size_t tiers_capacity);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVDEPOT_KVDEPOT_H_ */
