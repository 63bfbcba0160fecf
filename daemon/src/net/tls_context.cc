#include "net/tls_context.h"

#include <openssl/err.h>

#include <system_error>

namespace kvdepot::daemon {
namespace asio = boost::asio;

namespace {

// Why a certificate, key or CA did not load. asio's text for OpenSSL 3's system errors (a missing
// or unreadable file) is only "asio.ssl error"; their reason is the errno.
std::string Why(const boost::system::error_code& error) {
#if defined(ERR_SYSTEM_ERROR)
  const auto e = static_cast<unsigned long>(static_cast<unsigned int>(error.value()));
  if (error.category() == asio::error::get_ssl_category() && ERR_SYSTEM_ERROR(e)) {
    return std::system_category().message(static_cast<int>(ERR_GET_REASON(e)));
  }
#endif
  return error.message();
}

}  // namespace

Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(TlsRole role, const TlsOptions& own,
                                                           const std::string& peer_ca_file,
                                                           const std::string& peer_ca_setting) {
  boost::system::error_code ec;
  auto tls = std::make_shared<asio::ssl::context>(
      role == TlsRole::kServer ? asio::ssl::context::tls_server : asio::ssl::context::tls_client);
  tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                   ec);
  if (tls->use_certificate_chain_file(own.cert_file, ec); ec) {
    return InvalidArgument("tls.cert_file " + own.cert_file + ": " + Why(ec));
  }
  if (tls->use_private_key_file(own.key_file, asio::ssl::context::pem, ec); ec) {
    return InvalidArgument("tls.key_file " + own.key_file + ": " + Why(ec));
  }
  const bool verify = role == TlsRole::kPeerClient || !own.client_ca_file.empty();
  if (!verify) return tls;
  const std::string& ca = role == TlsRole::kServer ? own.client_ca_file : peer_ca_file;
  const std::string setting = role == TlsRole::kServer ? "tls.client_ca_file" : peer_ca_setting;
  if (tls->load_verify_file(ca, ec); ec)
    return InvalidArgument(setting + " " + ca + ": " + Why(ec));
  tls->set_verify_mode(role == TlsRole::kServer
                           ? asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert
                           : asio::ssl::verify_peer,
                       ec);
  return tls;
}

}  // namespace kvdepot::daemon
