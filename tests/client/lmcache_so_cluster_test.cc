// libkvdepot_lmcache.so as a smart client (docs/cluster.md, "Smart clients"): loaded with dlopen
// as LMCache loads it, against three in-process daemons.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "../daemon/in_process_cluster.h"

namespace kvdepot {
namespace {

using Create = void* (*)(const char*, size_t);
using Destroy = void (*)(void*);
using Put = std::int32_t (*)(void*, const char*, const std::uint8_t*, size_t);
using Get = std::int32_t (*)(void*, const char*, std::uint8_t*, size_t, size_t*);
using Exists = std::int32_t (*)(void*, const char*);

struct So {
  So() : handle(::dlopen(KVDEPOT_LMCACHE_SO, RTLD_NOW | RTLD_LOCAL)) {}
  ~So() {
    if (handle != nullptr) ::dlclose(handle);
  }
  template <typename Fn>
  Fn Sym(const char* name) {
    return reinterpret_cast<Fn>(::dlsym(handle, name));
  }
  void* handle;
};

std::uint64_t Forwarded(daemon::InProcessCluster& cluster) {
  std::uint64_t sum = 0;
  for (std::size_t n = 0; n < cluster.size(); ++n) {
    for (std::uint64_t f : cluster.node(n).router->stats().forwarded) sum += f;
  }
  return sum;
}

TEST(LmcacheSoClusterTest, TheConnectorRoutesByOwnerAndHonoursTheSwitch) {
  So so;
  ASSERT_NE(so.handle, nullptr) << ::dlerror();
  auto create = so.Sym<Create>("connector_create");
  auto destroy = so.Sym<Destroy>("connector_destroy");
  auto put = so.Sym<Put>("connector_put");
  auto get = so.Sym<Get>("connector_get");
  auto exists = so.Sym<Exists>("connector_exists");
  ASSERT_TRUE(create && destroy && put && get && exists);

  daemon::InProcessCluster cluster;
  cluster.Start(3, {.replicas = 1, .group_chunks = 1});
  const auto config = [&](const std::string& routing) {
    return R"({"address":")" + cluster.node(0).addr + R"(","cluster_routing":")" + routing +
           R"(","timeout_ms":"5000"})";
  };
  std::string json = config("auto");
  void* c = create(json.data(), json.size());
  ASSERT_NE(c, nullptr);
  const std::string payload(3000, 'v');
  for (int i = 0; i < 20; ++i) {
    const std::string key = "model@1@0@" + std::to_string(i);
    ASSERT_EQ(
        put(c, key.c_str(), reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()),
        0)
        << key;
  }
  std::string out(4096, '\0');
  for (int i = 0; i < 20; ++i) {
    const std::string key = "model@1@0@" + std::to_string(i);
    size_t len = 0;
    ASSERT_EQ(get(c, key.c_str(), reinterpret_cast<std::uint8_t*>(out.data()), out.size(), &len), 0)
        << key;
    EXPECT_EQ(out.substr(0, len), payload);
    EXPECT_EQ(exists(c, key.c_str()), 1);
  }
  EXPECT_EQ(Forwarded(cluster), 0u) << "a request reached a node that does not own its key";
  std::size_t nodes_used = 0;
  for (std::size_t n = 0; n < 3; ++n) {
    if (!cluster.node(n).store->Scan("", "", 1000, protocol::Tier::kNone).entries.empty()) {
      ++nodes_used;
    }
  }
  EXPECT_EQ(nodes_used, 3u);
  destroy(c);

  json = config("off");  // through node 0, which forwards what it does not own
  c = create(json.data(), json.size());
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(exists(c, ("model@1@0@" + std::to_string(i)).c_str()), 1);
  }
  EXPECT_GT(Forwarded(cluster), 0u);
  destroy(c);
  json = config("sideways");
  EXPECT_EQ(create(json.data(), json.size()), nullptr);
}

}  // namespace
}  // namespace kvdepot
