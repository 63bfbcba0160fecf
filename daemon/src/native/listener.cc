// The native protocol's listener: Server's facade, binding TCP (optionally TLS) and the Unix
// socket, accepting connections onto the I/O threads (net/listener_core.h), Stop, the refusal log
// and the STATS document. The connections themselves are native/connection.h.
#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "listen_address.h"
#include "native/connection.h"
#include "native/server_impl.h"
#include "net/tls_context.h"
#include "unix_socket.h"

namespace kvdepot::daemon {
namespace asio = boost::asio;

Server::Impl::Impl(const ServerOptions& options, Store& store, RequestObserver* observer,
                   TranscoderHooks hooks)
    : options_(options),
      timeouts_(options.request_timeout, options.idle_timeout),
      store_(store),
      observer_(observer),
      core_(options.io_threads),
      transcoder_(std::make_unique<Transcoder>(options.transcode_threads, std::move(hooks))) {}

Server::Impl::~Impl() {
  Stop();
  transcoder_.reset();  // finishes queued jobs; their callbacks post to the core's contexts
  tcp_.reset();
  unix_.reset();
}

ServerStats Server::Impl::stats() const {
  ServerStats s;
  s.connections_open = core_.open();
  s.connections_total = core_.total();
  s.requests = requests_.load();
  s.protocol_errors = protocol_errors_.load();
  s.auth_failures = auth_failures_.load();
  s.tls_handshake_failures = tls_failures_.load();
  s.bytes_in = bytes_in_.load();
  s.bytes_out = bytes_out_.load();
  s.request_timeouts = request_timeouts_.load();
  s.idle_timeouts = idle_timeouts_.load();
  return s;
}

template <typename Acceptor>
void Server::Impl::Accept(Acceptor& acceptor) {
  using SocketType = typename Acceptor::protocol_type::socket::template rebind_executor<
      asio::io_context::executor_type>::other;
  acceptor.async_accept(
      core_.NextExecutor(), [this, &acceptor](boost::system::error_code ec, SocketType socket) {
        if (ec) {
          if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
          Accept(acceptor);  // e.g. EMFILE: keep serving the connections we have
          return;
        }
        if constexpr (std::is_same_v<typename Acceptor::protocol_type, asio::ip::tcp>) {
          boost::system::error_code ignored;
          socket.set_option(asio::ip::tcp::no_delay(true), ignored);
          if (tls_) {
            using TlsStream = asio::ssl::stream<SocketType>;
            auto conn = std::make_shared<native::Connection<TlsStream>>(
                TlsStream(std::move(socket), *tls_), *this);
            conn->set_registration(core_.Register(conn));
            conn->Start();
            Accept(acceptor);
            return;
          }
        }
        auto conn = std::make_shared<native::Connection<SocketType>>(std::move(socket), *this);
        conn->set_registration(core_.Register(conn));
        conn->Start();
        Accept(acceptor);
      });
}

Status Server::Impl::SetUpTls() {
  KVD_ASSIGN_OR_RETURN(tls_, MakeTlsContext(TlsRole::kServer, options_.tls));
  return Status::Ok();
}

Status Server::Impl::Start() {
  boost::system::error_code ec;
  if (options_.tls.enabled()) KVD_RETURN_IF_ERROR(SetUpTls());
  if (!options_.listen.empty()) {
    KVD_ASSIGN_OR_RETURN(const asio::ip::tcp::endpoint endpoint,
                         ParseListenAddress("listen address", options_.listen));
    tcp_ = std::make_unique<asio::ip::tcp::acceptor>(core_.control());
    if (tcp_->open(endpoint.protocol(), ec); !ec) {
      tcp_->set_option(asio::socket_base::reuse_address(true), ec);
      tcp_->bind(endpoint, ec);
    }
    if (!ec) tcp_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("cannot listen on " + options_.listen + ": " + ec.message());
    tcp_port_ = tcp_->local_endpoint().port();
    Accept(*tcp_);
  }
  if (!options_.unix_path.empty()) {
    // A stale socket from a previous run is replaced; a live daemon's is never taken over.
    KVD_RETURN_IF_ERROR(ClaimUnixSocketPath(options_.unix_path));
    unix_ = std::make_unique<asio::local::stream_protocol::acceptor>(core_.control());
    const asio::local::stream_protocol::endpoint endpoint(options_.unix_path);
    if (unix_->open(endpoint.protocol(), ec); !ec) unix_->bind(endpoint, ec);
    if (!ec) unix_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("cannot listen on unix:" + options_.unix_path + ": " + ec.message());
    KVD_RETURN_IF_ERROR(SetUnixSocketAccess(options_.unix_path, options_.unix_mode,
                                            options_.unix_group, &unix_inode_));
    Accept(*unix_);
  }
  if (!tcp_ && !unix_) return InvalidArgument("no listener configured (listen and unix are empty)");
  core_.Run();
  return Status::Ok();
}

void Server::Impl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  core_.Stop(options_.drain_timeout, [this] {
    boost::system::error_code ec;
    if (tcp_) tcp_->close(ec);
    if (unix_) unix_->close(ec);
  });
  if (unix_inode_ != 0) RemoveOwnUnixSocket(options_.unix_path, unix_inode_);
}

bool Server::Impl::TakeRefusalLogTurn(std::uint64_t& not_logged) {
  std::lock_guard lock(log_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ < std::chrono::seconds(1)) {
    ++refusals_not_logged_;
    return false;
  }
  last_refusal_log_ = now;
  not_logged = std::exchange(refusals_not_logged_, 0);
  return true;
}

void Server::Impl::OnAuthFailure(const std::string& peer, std::string_view reason) {
  ++auth_failures_;
  std::uint64_t not_logged = 0;
  if (!TakeRefusalLogTurn(not_logged)) return;
  Log(LogLevel::kWarn, "connection refused: authentication failed",
      {{"peer", peer},
       {"reason", std::string(reason)},
       {"refusals_not_logged", std::to_string(not_logged)}});
}

void Server::Impl::OnTlsFailure(const std::string& peer, const std::string& error) {
  ++tls_failures_;
  std::uint64_t not_logged = 0;
  if (!TakeRefusalLogTurn(not_logged)) return;
  Log(LogLevel::kWarn, "connection refused: TLS handshake failed",
      {{"peer", peer}, {"error", error}, {"refusals_not_logged", std::to_string(not_logged)}});
}

std::string Server::Impl::StatsJson(const AuthScope* scope) const {
  using Json = nlohmann::ordered_json;  // members in the order docs/protocol.md lists them
  const HostTierStats h = store_.host().stats();
  const ServerStats s = stats();
  const auto uptime =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  // version and pid: what `kvdepot stats` shows in its server section.
  Json out = {{"version", KVDEPOT_VERSION},
              {"pid", static_cast<std::int64_t>(::getpid())},
              {"uptime_s", static_cast<std::uint64_t>(uptime)},
              {"connections_open", s.connections_open},
              {"connections_total", s.connections_total},
              {"requests", s.requests},
              {"protocol_errors", s.protocol_errors},
              {"auth_failures", s.auth_failures},
              {"tls_handshake_failures", s.tls_handshake_failures},
              {"bytes_in", s.bytes_in},
              {"bytes_out", s.bytes_out},
              {"request_timeouts", s.request_timeouts},
              {"idle_timeouts", s.idle_timeouts}};
  // The limits a client meets (docs/protocol.md): the CLI quotes them when a PUT is refused.
  out["limits"] = {{"max_key_bytes", options_.limits.max_key_bytes},
                   {"max_value_bytes", options_.limits.max_value_bytes},
                   {"max_batch", options_.limits.max_batch},
                   {"max_body_bytes", options_.limits.max_body_bytes}};
  // Each tier: the shared TierStats columns (the same figures as the kvdepot_tier_* series),
  // then what only that tier has.
  Json tiers = Json::object();
  for (const Tier tier : store_.Tiers()) {
    const TierStats t = store_.TierStatsOf(tier);
    Json j = {{"bytes", t.bytes},         {"capacity", t.capacity},     {"chunks", t.chunks},
              {"hits", t.hits},           {"misses", t.misses},         {"evictions", t.evictions},
              {"demotions", t.demotions}, {"promotions", t.promotions}, {"inserts", t.inserts},
              {"rejected", t.rejected}};
    if (tier == Tier::kHost) {
      if (h.arena_bytes != 0) {
        j["arena_bytes"] = h.arena_bytes;
        j["arena_used"] = h.arena_used;
        j["arena_fallbacks"] = h.arena_fallbacks;
      }
      j["policy"] = EvictionPolicyName(store_.host().policy());
    } else if (tier == Tier::kSsd) {
      const SsdTier& ssd = *store_.ssd();
      const SsdTierStats d = ssd.stats();
      j["live_bytes"] = d.live_bytes;
      j["segments"] = d.segments;
      j["demotions_written"] = d.demotions;
      j["demotions_dropped"] = d.demotions_dropped;
      j["demotions_refused"] = d.demotions_refused;
      j["reads"] = d.reads;
      j["writes"] = d.writes;
      j["read_errors"] = d.read_errors;
      j["write_errors"] = d.write_errors;
      j["checksum_failures"] = d.checksum_failures;
      j["write_buffer_bytes"] = d.write_buffer_bytes;
      j["recovered_chunks"] = d.recovered_chunks;
      j["durability"] = SsdDurabilityName(ssd.options().durability);
      j["io_path"] = d.io_path;
    } else if (tier == Tier::kGpu) {
      j["device"] = store_.device()->stats().device;
    }
    tiers[std::string(protocol::TierName(tier))] = std::move(j);
  }
  out["tiers"] = std::move(tiers);
  Json namespaces = Json::array();
  for (const auto& ns : h.namespaces) {
    if (scope != nullptr && !scope->AllowsNamespace(ns.id)) continue;
    namespaces.push_back({{"id", HexLower(ns.id)}, {"bytes", ns.bytes}, {"quota", ns.quota}});
  }
  out["namespaces"] = std::move(namespaces);
  std::lock_guard lock(sections_mu_);
  for (const auto& [name, source] : sections_) {
    Json section = Json::parse(source(), nullptr, /*allow_exceptions=*/false);
    if (section.is_object()) out[name] = std::move(section);
  }
  return out.dump();
}

Server::Server(const ServerOptions& options, Store& store, RequestObserver* observer,
               TranscoderHooks hooks)
    : impl_(std::make_unique<Impl>(options, store, observer, std::move(hooks))) {}
Server::~Server() {
  Stop();
}
Status Server::Start() {
  return impl_->Start();
}
std::uint16_t Server::tcp_port() const {
  return impl_->tcp_port();
}
void Server::Stop() {
  impl_->Stop();
}
ServerStats Server::stats() const {
  return impl_->stats();
}
void Server::AddStatsSection(std::string name, std::function<std::string()> object_json) {
  impl_->AddStatsSection(std::move(name), std::move(object_json));
}
void Server::Probe(std::function<void()> done) {
  impl_->Probe(std::move(done));
}
void Server::SetTimeouts(std::chrono::milliseconds request_timeout,
                         std::chrono::milliseconds idle_timeout) {
  impl_->SetTimeouts(request_timeout, idle_timeout);
}

}  // namespace kvdepot::daemon
