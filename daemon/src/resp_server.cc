// kvdepotd's resp:// listener (kvdepot/daemon/resp_server.h): binding, the I/O threads, accepting
// connections, Stop and its drain, stats. A connection's transport is resp/resp_connection.cc;
// the command handlers are resp/handlers_*.cc.
#include "kvdepot/daemon/resp_server.h"

#include <algorithm>

#include "resp/resp_connection.h"
#include "resp/resp_server_impl.h"

namespace kvdepot::daemon {

using resp::Counters;
using resp::RespConnection;
using resp::Socket;

Status RespServer::Impl::Start() {
  if (started_) return Status::Ok();
  KVD_ASSIGN_OR_RETURN(const auto endpoint,
                       ParseListenAddress("resp listen address", options_.listen));
  KVD_ASSIGN_OR_RETURN(acceptor_, core_.ListenTcp(endpoint, "resp://" + options_.listen));
  port_ = acceptor_->local_endpoint().port();
  Accept();
  core_.Run();
  started_ = true;
  return Status::Ok();
}

void RespServer::Impl::Accept() {
  core_.AcceptTcp(*acceptor_, [this](Socket socket) {
    auto conn = std::make_shared<RespConnection>(std::move(socket), *this);
    conn->set_registration(core_.Register(conn));
    conn->Start();
  });
}

void RespServer::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  core_.Stop(options_.drain_timeout, [this] {
    boost::system::error_code ec;
    acceptor_->close(ec);
  });
}

RespServerStats RespServer::Impl::stats() const {
  const Counters& c = *counters_;
  RespServerStats s;
  s.connections_open = core_.open();
  s.connections_total = core_.total();
  s.commands = c.commands.load();
  s.command_errors = c.command_errors.load();
  s.gets = c.gets.load();
  s.get_hits = c.get_hits.load();
  s.sets = c.sets.load();
  s.values_oversized = c.values_oversized.load();
  s.auth_failures = c.auth_failures.load();
  s.protocol_errors = c.protocol_errors.load();
  s.request_timeouts = c.request_timeouts.load();
  s.idle_timeouts = c.idle_timeouts.load();
  s.bytes_in = c.bytes_in.load();
  s.bytes_out = c.bytes_out.load();
  return s;
}

RespServer::RespServer(const RespServerOptions& options, Store& store)
    : impl_(std::make_unique<Impl>(options, store)) {}
RespServer::~RespServer() {
  Stop();
}
Status RespServer::Start() {
  return impl_->Start();
}
std::uint16_t RespServer::port() const {
  return impl_->port();
}
void RespServer::Stop() {
  impl_->Stop();
}
RespServerStats RespServer::stats() const {
  return impl_->stats();
}
void RespServer::SetTimeouts(std::chrono::milliseconds request_timeout,
                             std::chrono::milliseconds idle_timeout) {
  impl_->SetTimeouts(request_timeout, idle_timeout);
}

}  // namespace kvdepot::daemon
