// The in-process daemon the server tests talk to: a host tier, the Store over it and a Server
// listening on an ephemeral loopback port (and a Unix socket when asked), stopped at TearDown.
// Fixtures derive from InProcessServerTest and call StartServerWith from SetUp or from a test.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "kvdepot/client/client.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/metrics.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

class InProcessServerTest : public ::testing::Test {
 protected:
  // Starts host tier + store + server; the server listens on an ephemeral loopback port
  // (`o.listen` is overridden) and on `o.unix_path` when set.
  // `metrics`, when given, receives the server's request counts and the host tier's statistics.
  void StartServerWith(const HostTierOptions& host, ServerOptions o, Metrics* metrics = nullptr) {
    o.listen = "127.0.0.1:0";
    host_ = std::make_unique<HostTier>(host);
    store_ = std::make_unique<Store>(*host_, nullptr);
    server_ = std::make_unique<Server>(o, *store_, metrics);
    if (metrics != nullptr) {
      metrics->AddTier("host", [this] { return ToTierStats(host_->stats()); });
      metrics->SetServerSource([this] { return server_->stats(); });
    }
    const Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  // Client options for the server's TCP port.
  client::ClientOptions TcpOptions(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    client::ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server_->tcp_port());
    o.timeout = timeout;
    return o;
  }

  // A connection, or nullptr with a test failure naming why.
  static std::unique_ptr<client::Connection> ConnectOrFail(const client::ClientOptions& o) {
    auto c = client::Connection::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<HostTier> host_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

}  // namespace kvdepot::daemon
