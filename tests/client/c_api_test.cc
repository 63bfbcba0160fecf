// The C API against an in-process daemon; the calls themselves are made from C (c_api_smoke.c).
#include <gtest/gtest.h>
#include <unistd.h>

#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/kvdepot.h"

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

TEST(CApiTest, TokenThroughOpenEx) {
  daemon::HostTier tier(daemon::HostTierOptions::With(64ull << 20, daemon::EvictionPolicy::kLru));
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  auto auth = daemon::Authenticator::Parse("c-api-token-0123456789 *\n", "tokens");
  ASSERT_TRUE(auth.ok());
  o.auth = *auth;
  daemon::Store store(tier, nullptr);
  daemon::Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  const std::string addr = "127.0.0.1:" + std::to_string(server.tcp_port());
  kvdepot_options options{};
  options.token = "c-api-token-0123456789";
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open_ex(addr.c_str(), 5000, &options, &c), KVDEPOT_OK);
  EXPECT_EQ(kvdepot_ping(c), KVDEPOT_OK) << kvdepot_last_error(c);
  kvdepot_close(c);
  ASSERT_EQ(kvdepot_open(addr.c_str(), 5000, &c), KVDEPOT_OK);  // no token
  EXPECT_EQ(kvdepot_ping(c), KVDEPOT_UNAUTHENTICATED) << kvdepot_last_error(c);
  kvdepot_close(c);
  options.token = nullptr;
  options.token_file = "/nonexistent/token-file";
  EXPECT_EQ(kvdepot_open_ex(addr.c_str(), 5000, &options, &c), KVDEPOT_NOT_FOUND);
  server.Stop();
}

TEST(CApiTest, UnreachableDaemonIsAnErrorNotACrash) {
  EXPECT_NE(kvdepot_c_api_smoke("127.0.0.1:1"), 0);
}

}  // namespace
}  // namespace kvdepot
