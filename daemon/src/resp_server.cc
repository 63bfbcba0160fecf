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
  boost::system::error_code ec;
  acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(core_.control());
  if (acceptor_->open(endpoint.protocol(), ec); !ec) {
    acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_->bind(endpoint, ec);
  }
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on resp://" + options_.listen + ": " + ec.message());
  port_ = acceptor_->local_endpoint().port();
  Accept();
  core_.Run();
  started_ = true;
  return Status::Ok();
}

void RespServer::Impl::Accept() {
  acceptor_->async_accept(core_.NextExecutor(),
                          [this](boost::system::error_code ec, Socket socket) {
                            if (ec) {
                              if (ec == asio::error::operation_aborted || !acceptor_->is_open())
                                return;
                              return Accept();  // e.g. EMFILE: keep serving the connections we have
                            }
                            boost::system::error_code ignored;
                            socket.set_option(asio::ip::tcp::no_delay(true), ignored);
                            auto conn = std::make_shared<RespConnection>(std::move(socket), *this);
                            conn->set_registration(core_.Register(conn));
                            conn->Start();
                            Accept();
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
