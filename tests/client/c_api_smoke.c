/* Compiled as C: proves kvdepot.h is valid C and exercises the C API against a running daemon.
 * Returns 0 on success, otherwise the line number of the failed check. */
#include <stdlib.h>
#include <string.h>

#include "kvdepot/kvdepot.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) {  \
      rc = __LINE__; \
      goto done;    \
    }               \
  } while (0)

int kvdepot_c_api_smoke(const char* address) {
  int rc = 0;
  kvdepot_client* c = NULL;
  void* value = NULL;
  size_t len = 0, prefix = 0, n_keys = 0;
  uint8_t tiers[3];
  uint8_t keys[3 * KVDEPOT_CHUNK_KEY_BYTES];
  uint32_t tokens[600];
  const void* key_ptrs[3];
  size_t key_lens[3];
  kvdepot_namespace ns;
  size_t i;
  const void* chunk_values[3];
  size_t chunk_lens[3];
  int statuses[2];

  CHECK(kvdepot_open(address, 5000, &c) == KVDEPOT_OK);
  CHECK(kvdepot_ping(c) == KVDEPOT_OK);
  CHECK(kvdepot_put(c, "c-key", 5, "hello", 5) == KVDEPOT_OK);
  CHECK(kvdepot_get(c, "c-key", 5, &value, &len) == KVDEPOT_OK);
  CHECK(len == 5 && memcmp(value, "hello", 5) == 0);
  kvdepot_free(value);
  value = NULL;
  CHECK(kvdepot_get(c, "absent", 6, &value, &len) == KVDEPOT_NOT_FOUND && value == NULL);
  CHECK(strlen(kvdepot_last_error(c)) > 0);

  memset(&ns, 0, sizeof(ns));
  ns.model = "meta-llama/Llama-3.1-8B-Instruct";
  ns.tp_world_size = 1;
  ns.dtype = 1;
  ns.tenant = "acme";
  for (i = 0; i < 600; ++i) tokens[i] = (uint32_t)(i * 7 + 1);
  CHECK(kvdepot_chunk_keys(&ns, tokens, 600, 1, keys, 1, &n_keys) == KVDEPOT_OUT_OF_RANGE);
  CHECK(n_keys == 3);
  CHECK(kvdepot_chunk_keys(&ns, tokens, 600, 1, keys, 3, &n_keys) == KVDEPOT_OK);
  for (i = 0; i < 3; ++i) {
    key_ptrs[i] = keys + i * KVDEPOT_CHUNK_KEY_BYTES;
    key_lens[i] = KVDEPOT_CHUNK_KEY_BYTES;
  }
  CHECK(kvdepot_put(c, key_ptrs[0], KVDEPOT_CHUNK_KEY_BYTES, "chunk0", 6) == KVDEPOT_OK);
  CHECK(kvdepot_put(c, key_ptrs[1], KVDEPOT_CHUNK_KEY_BYTES, "chunk1", 6) == KVDEPOT_OK);
  CHECK(kvdepot_lookup(c, key_ptrs, key_lens, 3, &prefix, tiers) == KVDEPOT_OK);
  CHECK(prefix == 2 && tiers[0] == KVDEPOT_TIER_HOST && tiers[2] == KVDEPOT_TIER_NONE);
  CHECK(kvdepot_delete(c, "c-key", 5) == KVDEPOT_OK);
  CHECK(kvdepot_delete(c, "c-key", 5) == KVDEPOT_NOT_FOUND);
  CHECK(kvdepot_put(NULL, "k", 1, "v", 1) == KVDEPOT_INVALID_ARGUMENT);

  /* The prompt-level calls: 600 tokens are 2 full chunks of 256 (the partial third is not
   * stored); G 0 takes the cluster's (none here: placed per key). */
  chunk_values[0] = "prompt-chunk0";
  chunk_values[1] = "prompt-chunk1";
  chunk_values[2] = "unused";
  chunk_lens[0] = chunk_lens[1] = 13;
  chunk_lens[2] = 6;
  CHECK(kvdepot_put_prefix(c, &ns, tokens, 600, chunk_values, chunk_lens, 3, 0, NULL) ==
        KVDEPOT_INVALID_ARGUMENT);
  CHECK(kvdepot_put_prefix(c, &ns, tokens, 600, chunk_values, chunk_lens, 2, 0, statuses) ==
        KVDEPOT_OK);
  CHECK(statuses[0] == KVDEPOT_OK && statuses[1] == KVDEPOT_OK);
  CHECK(kvdepot_lookup_prefix(c, &ns, tokens, 600, 0, &prefix, &n_keys, tiers, 3) == KVDEPOT_OK);
  CHECK(prefix == 2 && n_keys == 2 && tiers[1] == KVDEPOT_TIER_HOST);
  CHECK(kvdepot_put_placed(c, "c-placed", 8, "v", 1, "anchor", 6) == KVDEPOT_OK);
  CHECK(kvdepot_get_placed(c, "c-placed", 8, "anchor", 6, &value, &len) == KVDEPOT_OK);
  CHECK(len == 1);
  CHECK(kvdepot_delete_placed(c, "c-placed", 8, NULL, 0) == KVDEPOT_OK);
done:
  kvdepot_free(value);
  kvdepot_close(c);
  return rc;
}
