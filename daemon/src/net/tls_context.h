// The daemon's TLS contexts (PEM files, TLS 1.2 or later): one builder for the native listener's
// server side and for the client side of its connections to the other members of its cluster
// (cluster/peer_pool.h), so that both load certificates the same way and fail with the same
// messages (the setting and file named, the OS reason for a file that cannot be read).
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/server.h"

namespace kvdepot::daemon {

enum class TlsRole {
  // The listener: presents tls.cert_file; with tls.client_ca_file, requires a client certificate
  // signed by it.
  kServer,
  // A connection to another member: verifies the member's certificate against `peer_ca_file`
  // and presents tls.cert_file as its client certificate (a listener with tls.client_ca_file
  // requires one).
  kPeerClient,
};

// `own` is the listener's TlsOptions (cert_file and key_file set). `peer_ca_file` is used for
// kPeerClient only and `peer_ca_setting` names the setting it came from in errors (e.g.
// "cluster.tls_ca_file"). Errors are invalid_argument naming the setting and the file.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    TlsRole role, const TlsOptions& own, const std::string& peer_ca_file = "",
    const std::string& peer_ca_setting = "");

}  // namespace kvdepot::daemon
