// The name a TLS client checks the server's certificate against, shared by the client library
// (client/src/client.cc) and the daemon's connections to other members (cluster/peer_pool.cc).
// Header-only: kvdepot_base itself does not link OpenSSL; its includers do.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <string>

namespace kvdepot {

// The host part of "HOST:PORT" ("[v6]:PORT" without its brackets).
inline std::string TlsHostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// Makes the handshake on `ssl` verify that the server's certificate names `host`: an IP literal
// must be one of its IP subjectAltNames; a DNS name must match a DNS subjectAltName (or the CN
// without any), and is sent as SNI. Returns false when OpenSSL refuses the name.
inline bool ExpectTlsPeerName(SSL* ssl, const std::string& host) {
  in6_addr ip{};
  const bool is_ip =
      ::inet_pton(AF_INET, host.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), &ip) == 1;
  if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  return SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 && SSL_set1_host(ssl, host.c_str()) == 1;
}

}  // namespace kvdepot
