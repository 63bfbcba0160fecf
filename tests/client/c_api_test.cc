// The C API against an in-process daemon; the calls themselves are made from C (c_api_smoke.c).
#include <gtest/gtest.h>
#include <unistd.h>

#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

extern "C" int kvdepot_c_api_smoke(const char* address);

namespace kvdepot {
namespace {

TEST(CApiTest, EveryCallWorksFromC) {
  daemon::HostTier tier(daemon::HostTierOptions::With(64ull << 20, daemon::EvictionPolicy::kLru));
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  daemon::Store store(tier, nullptr);
  daemon::Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  const std::string addr = "127.0.0.1:" + std::to_string(server.tcp_port());
  EXPECT_EQ(kvdepot_c_api_smoke(addr.c_str()), 0) << "failed check at c_api_smoke.c line";
  server.Stop();
}

TEST(CApiTest, UnreachableDaemonIsAnErrorNotACrash) {
  EXPECT_NE(kvdepot_c_api_smoke("127.0.0.1:1"), 0);
}

}  // namespace
}  // namespace kvdepot
