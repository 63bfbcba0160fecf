/* Compiled as C: loads libkvdepot_lmcache.so with dlopen, as LMCache's native remote backend
 * does, resolves every connector_* symbol and drives each one against a running daemon.
 * Returns 0 on success, otherwise the line number of the failed check. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*create_fn)(const char*, size_t);
typedef void (*destroy_fn)(void*);
typedef int32_t (*exists_fn)(void*, const char*);
typedef int32_t (*put_fn)(void*, const char*, const uint8_t*, size_t);
typedef int32_t (*get_fn)(void*, const char*, uint8_t*, size_t, size_t*);
typedef int32_t (*remove_fn)(void*, const char*);
typedef int32_t (*size_fn)(void*, const char*, uint64_t*);
typedef int32_t (*list_fn)(void*, char*, size_t, size_t*);

#define CHECK(cond)  \
  do {               \
    if (!(cond)) {   \
      rc = __LINE__; \
      goto done;     \
    }                \
  } while (0)

int kvdepot_lmcache_so_smoke(const char* so_path, const char* address) {
  int rc = 0;
  void* lib = NULL;
  void* h = NULL;
  void* other = NULL;
  uint8_t* big = NULL;
  uint8_t* out = NULL;
  char cfg[512];
  char list[4096];
  char long_key[300];
  size_t len = 0, i;
  uint64_t size = 0;
  create_fn create;
  destroy_fn destroy;
  exists_fn exists;
  put_fn put;
  get_fn get;
  remove_fn remove_key;
  size_fn file_size;
  list_fn list_keys;
  const size_t big_len = 5u << 20; /* a 5 MiB chunk */

  lib = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(lib != NULL);
  /* Casting dlsym's void* to a function pointer, as POSIX requires dlsym users to do. */
  *(void**)(&create) = dlsym(lib, "connector_create");
  *(void**)(&destroy) = dlsym(lib, "connector_destroy");
  *(void**)(&exists) = dlsym(lib, "connector_exists");
  *(void**)(&put) = dlsym(lib, "connector_put");
  *(void**)(&get) = dlsym(lib, "connector_get");
  *(void**)(&remove_key) = dlsym(lib, "connector_remove");
  *(void**)(&file_size) = dlsym(lib, "connector_file_size");
  *(void**)(&list_keys) = dlsym(lib, "connector_list_keys");
  CHECK(create && destroy && exists && put && get && remove_key && file_size && list_keys);
  /* Only the ABI is exported: the client library's symbols stay inside the .so. */
  CHECK(dlsym(lib, "kvdepot_open") == NULL);

  /* Malformed configurations give NULL, never a crash. */
  CHECK(create("{", 1) == NULL);
  CHECK(create("[1,2]", 5) == NULL);
  CHECK(create("{\"pool_size\": \"x\"}", 18) == NULL);
  CHECK(create("{\"namespace\": \"\"}", 17) == NULL);

  snprintf(cfg, sizeof(cfg),
           "{\"address\": \"%s\", \"namespace\": \"so-test\", \"timeout_ms\": \"5000\","
           " \"pool_size\": 4, \"use_odirect\": true, \"nested\": {\"a\": [1, \"}\"]}}",
           address);
  h = create(cfg, strlen(cfg));
  CHECK(h != NULL);

  big = (uint8_t*)malloc(big_len);
  out = (uint8_t*)malloc(big_len);
  CHECK(big != NULL && out != NULL);
  for (i = 0; i < big_len; ++i) big[i] = (uint8_t)(i * 131 + 7);

  CHECK(exists(h, "model@1@0@abc") == 0);
  CHECK(get(h, "model@1@0@abc", out, big_len, &len) == 1);
  CHECK(file_size(h, "model@1@0@abc", &size) == 1);
  CHECK(remove_key(h, "model@1@0@abc") == 0);

  CHECK(put(h, "model@1@0@abc", big, big_len) == 0);
  CHECK(put(h, "model@1@0@def", (const uint8_t*)"tiny", 4) == 0);
  CHECK(put(h, "model@1@0@empty", NULL, 0) == 0);
  CHECK(exists(h, "model@1@0@abc") == 1);
  CHECK(file_size(h, "model@1@0@abc", &size) == 0 && size == big_len);
  CHECK(file_size(h, "model@1@0@ab", &size) == 1); /* a prefix of a key is not the key */
  memset(out, 0, big_len);
  CHECK(get(h, "model@1@0@abc", out, big_len, &len) == 0);
  CHECK(len == big_len && memcmp(out, big, big_len) == 0);
  CHECK(get(h, "model@1@0@abc", out, big_len - 1, &len) == -1); /* buffer too small */
  CHECK(get(h, "model@1@0@def", out, big_len, &len) == 0 && len == 4 && memcmp(out, "tiny", 4) == 0);
  CHECK(get(h, "model@1@0@empty", out, 0, &len) == 0 && len == 0);

  CHECK(list_keys(h, list, sizeof(list), &len) == 0);
  CHECK(len == strlen("model@1@0@abc\nmodel@1@0@def\nmodel@1@0@empty"));
  CHECK(memcmp(list, "model@1@0@abc\nmodel@1@0@def\nmodel@1@0@empty", len) == 0);
  CHECK(list_keys(h, list, 5, &len) == -1 &&
        len == strlen("model@1@0@abc\nmodel@1@0@def\nmodel@1@0@empty"));

  /* Another namespace sees none of it. */
  snprintf(cfg, sizeof(cfg), "{\"address\": \"%s\", \"namespace\": \"elsewhere\"}", address);
  other = create(cfg, strlen(cfg));
  CHECK(other != NULL);
  CHECK(exists(other, "model@1@0@abc") == 0);
  CHECK(list_keys(other, list, sizeof(list), &len) == 0 && len == 0);

  CHECK(remove_key(h, "model@1@0@abc") == 1);
  CHECK(remove_key(h, "model@1@0@abc") == 0);
  CHECK(exists(h, "model@1@0@abc") == 0);

  /* Bad arguments are errors. */
  memset(long_key, 'k', sizeof(long_key) - 1);
  long_key[sizeof(long_key) - 1] = '\0';
  CHECK(put(h, long_key, big, 1) == -1);
  CHECK(put(h, "", big, 1) == -1);
  CHECK(put(h, NULL, big, 1) == -1);
  CHECK(exists(NULL, "k") == 0);
  CHECK(get(h, "model@1@0@def", out, big_len, NULL) == -1);
  CHECK(list_keys(NULL, list, sizeof(list), &len) == -1);
  destroy(NULL);

done:
  if (other != NULL) destroy(other);
  if (h != NULL) destroy(h);
  free(big);
  free(out);
  if (lib != NULL) dlclose(lib);
  return rc;
}

/* Against an unreachable daemon: every call fails cleanly. */
int kvdepot_lmcache_so_unreachable(const char* so_path) {
  int rc = 0;
  void* lib = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  void* h = NULL;
  uint8_t buf[8];
  size_t len = 0;
  uint64_t size = 0;
  const char* unreachable_cfg = "{\"address\": \"127.0.0.1:1\", \"timeout_ms\": 1000}";
  create_fn create;
  destroy_fn destroy;
  exists_fn exists;
  put_fn put;
  get_fn get;
  size_fn file_size;
  list_fn list_keys;
  CHECK(lib != NULL);
  *(void**)(&create) = dlsym(lib, "connector_create");
  *(void**)(&destroy) = dlsym(lib, "connector_destroy");
  *(void**)(&exists) = dlsym(lib, "connector_exists");
  *(void**)(&put) = dlsym(lib, "connector_put");
  *(void**)(&get) = dlsym(lib, "connector_get");
  *(void**)(&file_size) = dlsym(lib, "connector_file_size");
  *(void**)(&list_keys) = dlsym(lib, "connector_list_keys");
  h = create(unreachable_cfg, strlen(unreachable_cfg));
  CHECK(h != NULL);
  CHECK(exists(h, "k") == 0);
  CHECK(put(h, "k", buf, sizeof(buf)) == -1);
  CHECK(get(h, "k", buf, sizeof(buf), &len) == -1);
  CHECK(file_size(h, "k", &size) == -1);
  CHECK(list_keys(h, (char*)buf, sizeof(buf), &len) == -1);
done:
  if (h != NULL) destroy(h);
  if (lib != NULL) dlclose(lib);
  return rc;
}
