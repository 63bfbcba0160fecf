#include "kvdepot/client/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "kvdepot/base/socket_io.h"
#include "kvdepot/base/tls_peer_name.h"
#include "kvdepot/client/cluster_routes.h"

namespace kvdepot::client {
namespace {

using protocol::FrameHeader;
using protocol::Op;

Result<int> ConnectSocket(const ClientOptions& options) {
  const std::string& address = options.address;
  if (address.rfind("unix:", 0) == 0) {
    const std::string path = address.substr(5);
    sockaddr_un sa{};
    if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
      return InvalidArgument("address '" + address + "': bad socket path");
    }
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return StatusFromErrno(errno, "socket");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      const int err = errno;
      ::close(fd);
      return Status(StatusCode::kUnavailable, StatusFromErrno(err, "connect " + address).message());
    }
    return fd;
  }
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("address '" + address + "' is not HOST:PORT or unix:PATH");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Unavailable("address '" + address + "': " + gai_strerror(rc));
  }
  int fd = -1;
  int last_errno = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    last_errno = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    return Status(StatusCode::kUnavailable,
                  StatusFromErrno(last_errno, "connect " + address).message());
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The last OpenSSL error queue entries as text (the queue is cleared).
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

// OpenSSL writes to the socket with write(), which raises SIGPIPE on a closed peer: block it in
// this thread for the duration and swallow one that became pending, like MSG_NOSIGNAL does.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigpending(&pending_before_);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeGuard() {
    if (!sigismember(&pending_before_, SIGPIPE)) {
      sigset_t pipe, now;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      sigpending(&now);
      if (sigismember(&now, SIGPIPE)) {
        const timespec zero{};
        sigtimedwait(&pipe, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_{}, pending_before_{};
};

Status FromWire(std::uint16_t code, std::span<const std::byte> body) {
  std::string message(reinterpret_cast<const char*>(body.data()), body.size());
  if (message.empty())
    message = "server returned " + std::string(StatusCodeName(static_cast<StatusCode>(code)));
  return Status(static_cast<StatusCode>(code), "server: " + message);
}

}  // namespace

struct Connection::Tls {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }
};

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("token file " + path + ": cannot be opened");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string token;
    if (!(words >> token) || token[0] == '#') continue;
    return token;
  }
  return InvalidArgument("token file " + path + ": no token in it");
}

Connection::Connection(int fd, const ClientOptions& options) : fd_(fd), options_(options) {}

Result<std::unique_ptr<Connection>> Connection::Connect(const ClientOptions& options) {
  if (options.tls && options.address.rfind("unix:", 0) == 0) {
    return InvalidArgument("address '" + options.address + "': TLS is for TCP addresses only");
  }
  KVD_ASSIGN_OR_RETURN(int fd, ConnectSocket(options));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(options.timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((options.timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::unique_ptr<Connection> c(new Connection(fd, options));
  if (options.tls) KVD_RETURN_IF_ERROR(c->StartTls());
  if (!options.token.empty()) KVD_RETURN_IF_ERROR(c->Authenticate());
  return c;
}

Status Connection::StartTls() {
  ERR_clear_error();
  tls_ = std::make_unique<Tls>();
  const auto fail = [this](const std::string& what) {
    return Broken(Unavailable("tls: " + what + " (" + options_.address + "): " + OpenSslErrors()));
  };
  tls_->ctx = SSL_CTX_new(TLS_client_method());
  if (tls_->ctx == nullptr) return fail("cannot create a context");
  SSL_CTX_set_min_proto_version(tls_->ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(tls_->ctx, SSL_VERIFY_PEER, nullptr);
  const int ca_ok =
      options_.tls_ca_file.empty()
          ? SSL_CTX_set_default_verify_paths(tls_->ctx)
          : SSL_CTX_load_verify_locations(tls_->ctx, options_.tls_ca_file.c_str(), nullptr);
  if (ca_ok != 1) return fail("cannot load CA file '" + options_.tls_ca_file + "'");
  if (!options_.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(tls_->ctx, options_.tls_cert_file.c_str()) != 1) {
      return fail("cannot load certificate '" + options_.tls_cert_file + "'");
    }
    const std::string& key =
        options_.tls_key_file.empty() ? options_.tls_cert_file : options_.tls_key_file;
    if (SSL_CTX_use_PrivateKey_file(tls_->ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail("cannot load private key '" + key + "'");
    }
  }
  tls_->ssl = SSL_new(tls_->ctx);
  if (tls_->ssl == nullptr || SSL_set_fd(tls_->ssl, fd_) != 1) {
    return fail("cannot create a session");
  }
  const std::string host =
      options_.tls_server_name.empty() ? TlsHostOf(options_.address) : options_.tls_server_name;
  if (!ExpectTlsPeerName(tls_->ssl, host))
    return fail("cannot check the server's name '" + host + "'");
  SigpipeGuard guard;
  if (SSL_connect(tls_->ssl) != 1) {
    const long verify = SSL_get_verify_result(tls_->ssl);
    if (verify != X509_V_OK) {
      ERR_clear_error();
      return Broken(Unavailable(
          "tls: handshake with " + options_.address +
          " failed: server certificate not trusted: " + X509_verify_cert_error_string(verify)));
    }
    return fail("handshake failed");
  }
  return Status::Ok();
}

Status Connection::Authenticate() {
  const std::vector<std::byte> body = protocol::EncodeAuthRequest(options_.token);
  auto response = Call(Op::kAuth, body);
  if (!response.ok()) return Broken(response.status());
  return Status::Ok();
}

Connection::~Connection() {
  static_cast<void>(Broken(Status::Ok()));
}

Status Connection::Broken(Status status) {
  tls_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return status;
}

Status Connection::SendAll(std::span<const std::span<const std::byte>> parts) {
  if (fd_ < 0) return Unavailable("connection is closed");
  std::vector<iovec> iov;
  for (auto p : parts) {
    if (!p.empty()) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  if (tls_) return SendTls(iov);
  if (Status s = SendAllIov(fd_, iov, "send"); !s.ok()) {
    return Broken(Status(StatusCode::kUnavailable, s.message()));
  }
  return Status::Ok();
}

Status Connection::RecvAll(std::byte* out, std::size_t n) {
  if (fd_ < 0) return Unavailable("connection is closed");
  std::size_t done = 0;
  while (tls_ && done < n) {
    const int chunk = static_cast<int>(std::min<std::size_t>(n - done, 1 << 30));
    const int r = SSL_read(tls_->ssl, out + done, chunk);
    if (r <= 0) {
      const int err = SSL_get_error(tls_->ssl, r);
      const std::string why = err == SSL_ERROR_ZERO_RETURN ? "connection closed by the server"
                              : err == SSL_ERROR_SYSCALL && errno == EAGAIN
                                  ? "receive (timeout)"
                                  : "tls receive failed: " + OpenSslErrors();
      return Broken(Unavailable(why));
    }
    done += static_cast<std::size_t>(r);
  }
  while (done < n) {
    const ssize_t r = ::recv(fd_, out + done, n - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return Broken(
          Status(StatusCode::kUnavailable,
                 StatusFromErrno(err, err == EAGAIN ? "receive (timeout)" : "receive").message()));
    }
    if (r == 0) return Broken(Unavailable("connection closed by the server"));
    done += static_cast<std::size_t>(r);
  }
  return Status::Ok();
}

// TLS: small pieces are joined so that a request goes out as one record; large values are
// written as they are.
Status Connection::SendTls(const std::vector<iovec>& iov) {
  SigpipeGuard guard;
  std::vector<std::byte> joined;
  const auto write = [this](const void* data, std::size_t len) -> Status {
    const auto* p = static_cast<const std::byte*>(data);
    while (len > 0) {
      const int chunk = static_cast<int>(std::min<std::size_t>(len, 1 << 30));
      const int w = SSL_write(tls_->ssl, p, chunk);
      if (w <= 0) return Broken(Unavailable("tls send failed: " + OpenSslErrors()));
      p += w;
      len -= static_cast<std::size_t>(w);
    }
    return Status::Ok();
  };
  for (const iovec& v : iov) {
    if (v.iov_len < 16384) {
      const auto* p = static_cast<const std::byte*>(v.iov_base);
      joined.insert(joined.end(), p, p + v.iov_len);
      continue;
    }
    if (!joined.empty()) KVD_RETURN_IF_ERROR(write(joined.data(), joined.size()));
    joined.clear();
    KVD_RETURN_IF_ERROR(write(v.iov_base, v.iov_len));
  }
  if (!joined.empty()) return write(joined.data(), joined.size());
  return Status::Ok();
}

Result<std::uint64_t> Connection::SendRequest(Op op, std::span<const std::byte> body) {
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(op);
  h.request_id = next_id_++;
  h.body_length = static_cast<std::uint32_t>(body.size());
  std::byte head[protocol::kFrameHeaderBytes];
  protocol::EncodeFrameHeader(h, head);
  const std::span<const std::byte> parts[] = {head, body};
  KVD_RETURN_IF_ERROR(SendAll(parts));
  return h.request_id;
}

namespace {

// Placement keys as views, checked against the request's item count (empty: none).
Result<std::vector<std::string_view>> PlacementViews(protocol::Op op, std::size_t items,
                                                     std::span<const std::string> placement_keys) {
  if (placement_keys.empty()) return std::vector<std::string_view>();
  KVD_RETURN_IF_ERROR(protocol::CheckPlacementCount(op, placement_keys.size(), items));
  return std::vector<std::string_view>(placement_keys.begin(), placement_keys.end());
}

}  // namespace

Result<std::uint64_t> Connection::SendPlaced(Op op, std::span<const std::byte> body,
                                             std::span<const std::string_view> placement_keys) {
  if (placement_keys.empty()) return SendRequest(op, body);
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> section,
                       protocol::EncodePlacementSection(placement_keys));
  if (std::uint64_t{section.size()} + body.size() > 0xffffffffu) {
    return OutOfRange("protocol: the placement section and the body of " +
                      std::string(protocol::OpName(op)) + " are over a frame's 4 GiB");
  }
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(op);
  h.flags = protocol::kFlagPlacement;
  h.request_id = next_id_++;
  h.body_length = static_cast<std::uint32_t>(section.size() + body.size());
  std::byte head[protocol::kFrameHeaderBytes];
  protocol::EncodeFrameHeader(h, head);
  const std::span<const std::byte> parts[] = {head, section, body};
  KVD_RETURN_IF_ERROR(SendAll(parts));
  return h.request_id;
}

Result<std::uint64_t> Connection::SendPut(std::string_view key, std::span<const std::byte> value,
                                          std::string_view placement_key) {
  const std::span<const std::byte> parts[] = {value};
  return SendPutParts(key, parts, placement_key);
}

Result<std::uint64_t> Connection::SendPutParts(std::string_view key,
                                               std::span<const std::span<const std::byte>> parts,
                                               std::string_view placement_key) {
  std::uint64_t total = 0;
  for (auto p : parts) total += p.size();
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> prefix,
                       protocol::EncodeSinglePutHead(key, total));
  std::vector<std::byte> section;
  if (!placement_key.empty()) {
    KVD_ASSIGN_OR_RETURN(section, protocol::EncodePlacementSection(std::span(&placement_key, 1)));
  }
  if (std::uint64_t{section.size()} + prefix.size() + total > 0xffffffffu) {
    return OutOfRange("protocol: the PUT of '" + std::string(key) + "' is over a frame's 4 GiB");
  }
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(Op::kPut);
  h.flags = section.empty() ? 0 : protocol::kFlagPlacement;
  h.request_id = next_id_++;
  h.body_length = static_cast<std::uint32_t>(section.size() + prefix.size() + total);
  std::byte head[protocol::kFrameHeaderBytes];
  protocol::EncodeFrameHeader(h, head);
  std::vector<std::span<const std::byte>> all = {head, section, prefix};
  all.insert(all.end(), parts.begin(), parts.end());
  KVD_RETURN_IF_ERROR(SendAll(all));
  return h.request_id;
}

Status Connection::ReadPutAnswer(std::uint64_t id, std::string_view key) {
  std::vector<std::byte> response;
  KVD_ASSIGN_OR_RETURN(FrameHeader h, ReadResponse(response));
  if (h.request_id != id) return Broken(Corruption("protocol: response id mismatch"));
  if (h.status != 0) return FromWire(h.status, response);
  KVD_ASSIGN_OR_RETURN(auto codes, protocol::DecodeStatusList(response));
  if (codes.size() != 1) return Broken(Corruption("protocol: put response count"));
  if (codes[0] != StatusCode::kOk) {
    return Status(codes[0], "server refused the value for '" + std::string(key) + "'");
  }
  return Status::Ok();
}

Result<FrameHeader> Connection::ReadResponse(std::vector<std::byte>& body) {
  std::byte head[protocol::kFrameHeaderBytes];
  KVD_RETURN_IF_ERROR(RecvAll(head, sizeof(head)));
  protocol::Limits limits = options_.limits;
  limits.max_body_bytes =
      std::max<std::uint64_t>(limits.max_body_bytes, limits.max_value_bytes + 4096);
  auto h = protocol::DecodeFrameHeader(head, limits, /*expect_response=*/true);
  if (!h.ok()) return Broken(h.status());
  body.resize(h->body_length);
  KVD_RETURN_IF_ERROR(RecvAll(body.data(), body.size()));
  return h;
}

Result<std::vector<std::byte>> Connection::Call(Op op, std::span<const std::byte> body,
                                                std::span<const std::string_view> placement_keys) {
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendPlaced(op, body, placement_keys));
  std::vector<std::byte> response;
  KVD_ASSIGN_OR_RETURN(FrameHeader h, ReadResponse(response));
  if (h.request_id != id || h.op() != op || (h.flags & protocol::kFlagMore) != 0) {
    if (h.status == static_cast<std::uint16_t>(StatusCode::kCorruption)) {
      return Broken(FromWire(h.status, response));
    }
    return Broken(Corruption("protocol: unexpected response to request " + std::to_string(id)));
  }
  if (h.status != 0) return FromWire(h.status, response);
  return response;
}

Status Connection::Ping() {
  return Call(Op::kPing, {}).status();
}

Status Connection::SetEventOrigin(const protocol::EventOrigin& origin) {
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body,
                       protocol::EncodeEventOriginRequest(origin));
  return Call(Op::kEventOrigin, body).status();
}

Result<std::vector<StatusCode>> Connection::Put(std::span<const protocol::PutItemView> items) {
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, protocol::EncodePutBody(items));
  std::vector<std::string_view> placement;
  const bool placed = std::any_of(items.begin(), items.end(), [](const protocol::PutItemView& i) {
    return !i.placement_key.empty();
  });
  if (placed) {
    for (const protocol::PutItemView& i : items) placement.push_back(i.placement_key);
  }
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kPut, body, placement));
  return protocol::DecodeStatusList(response);
}

Status Connection::Put(std::string_view key, std::span<const std::byte> value,
                       std::string_view placement_key) {
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendPut(key, value, placement_key));
  return ReadPutAnswer(id, key);
}

Status Connection::Get(std::span<const std::string> keys, const GetCallback& on_item,
                       std::span<const std::string> placement_keys) {
  KVD_ASSIGN_OR_RETURN(const auto placement, PlacementViews(Op::kGet, keys.size(), placement_keys));
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, protocol::EncodeKeyList(keys));
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendPlaced(Op::kGet, body, placement));
  return ReadGetFrames(id, Op::kGet, keys.size(), on_item);
}

Status Connection::GetAs(std::span<const std::string> keys, CodecId codec,
                         const GetCallback& on_item, std::span<const std::string> placement_keys) {
  KVD_ASSIGN_OR_RETURN(const auto placement,
                       PlacementViews(Op::kGetAs, keys.size(), placement_keys));
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body,
                       protocol::EncodeGetAsRequest(static_cast<std::uint8_t>(codec), keys));
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendPlaced(Op::kGetAs, body, placement));
  return ReadGetFrames(id, Op::kGetAs, keys.size(), on_item);
}

Status Connection::ReadGetFrames(std::uint64_t id, Op op, std::size_t keys,
                                 const GetCallback& on_item) {
  std::vector<std::byte> frame;
  for (std::uint32_t index = 0; index < keys; ++index) {
    KVD_RETURN_IF_ERROR(ReadGetItem(id, op, index, keys, frame, on_item));
  }
  return Status::Ok();
}

Status Connection::ReadGetItem(std::uint64_t id, Op op, std::uint32_t index, std::size_t keys,
                               std::vector<std::byte>& frame, const GetCallback& on_item) {
  KVD_ASSIGN_OR_RETURN(FrameHeader h, ReadResponse(frame));
  if (h.request_id != id || h.op() != op) {
    if (h.status == static_cast<std::uint16_t>(StatusCode::kCorruption)) {
      return Broken(FromWire(h.status, frame));
    }
    return Broken(Corruption("protocol: unexpected response to " +
                             std::string(protocol::OpName(op)) + " " + std::to_string(id)));
  }
  // A refused request (its error message) vs. a failed item (exactly the 8-byte prefix).
  if (index == 0 && h.status != 0 && frame.size() != protocol::kGetItemPrefixBytes) {
    return FromWire(h.status, frame);  // the request itself was refused
  }
  KVD_ASSIGN_OR_RETURN(auto prefix, protocol::DecodeGetItemPrefix(frame));
  if (prefix.index != index || index >= keys) {
    return Broken(Corruption("protocol: GET items out of order"));
  }
  GetItem item;
  item.index = prefix.index;
  item.tier = prefix.tier;
  item.status = h.status == 0
                    ? Status::Ok()
                    : Status(static_cast<StatusCode>(h.status),
                             "key " + std::to_string(prefix.index) + ": " +
                                 std::string(StatusCodeName(static_cast<StatusCode>(h.status))));
  item.value = std::span<const std::byte>(frame).subspan(protocol::kGetItemPrefixBytes);
  on_item(item);
  const bool more = (h.flags & protocol::kFlagMore) != 0;
  if (more != (index + 1 < keys)) {
    return Broken(
        Corruption(more ? "protocol: GET items out of order" : "protocol: GET ended early"));
  }
  return Status::Ok();
}

Result<Connection::MapResult> Connection::Map() {
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendRequest(Op::kMap, {}));
  // The descriptor rides on the first byte of the response: read the header with recvmsg.
  std::byte head[protocol::kFrameHeaderBytes];
  MapResult result;
  std::size_t got = 0;
  while (got < sizeof(head)) {
    iovec iov{head + got, sizeof(head) - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Broken(Unavailable(StatusFromErrno(errno, "map: recvmsg").message()));
    if (r == 0) return Broken(Unavailable("connection closed by the server"));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int)) && result.host_fd < 0) {
        std::memcpy(&result.host_fd, CMSG_DATA(c), sizeof(int));
      }
    }
    got += static_cast<std::size_t>(r);
  }
  auto close_fd = [&result] {
    if (result.host_fd >= 0) ::close(result.host_fd);
    result.host_fd = -1;
  };
  auto h = protocol::DecodeFrameHeader(head, options_.limits, /*expect_response=*/true);
  if (!h.ok()) {
    close_fd();
    return Broken(h.status());
  }
  std::vector<std::byte> body(h->body_length);
  if (Status s = RecvAll(body.data(), body.size()); !s.ok()) {
    close_fd();
    return s;
  }
  if (h->request_id != id || h->op() != Op::kMap) {
    close_fd();
    return Broken(Corruption("protocol: unexpected response to MAP " + std::to_string(id)));
  }
  if (h->status != 0) {
    close_fd();
    return FromWire(h->status, body);
  }
  auto info = protocol::DecodeMapInfo(body);
  if (!info.ok()) {
    close_fd();
    return Broken(info.status());
  }
  result.info = *info;
  if (result.info.host_arena_bytes != 0 && result.host_fd < 0) {
    return Broken(Corruption("map: the daemon announced a host arena but sent no descriptor"));
  }
  return result;
}

Result<std::vector<protocol::Lease>> Connection::LeaseGet(std::span<const std::string> keys,
                                                          protocol::Tier tier) {
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body,
                       protocol::EncodeLeaseGetRequest(tier, keys));
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kLeaseGet, body));
  KVD_ASSIGN_OR_RETURN(auto leases, protocol::DecodeLeases(response));
  if (leases.size() != keys.size()) return Broken(Corruption("protocol: lease_get count"));
  return leases;
}

Result<std::vector<StatusCode>> Connection::Release(std::span<const std::uint64_t> lease_ids) {
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kRelease, protocol::EncodeLeaseIds(lease_ids)));
  return protocol::DecodeStatusList(response);
}

Result<std::unique_ptr<SharedArena>> SharedArena::Map(Connection& connection) {
  KVD_ASSIGN_OR_RETURN(Connection::MapResult m, connection.Map());
  return Adopt(std::move(m));
}

Result<std::unique_ptr<SharedArena>> SharedArena::Adopt(Connection::MapResult m) {
  if (m.host_fd < 0) return Unavailable("map: the daemon has no shared host arena");
  void* p = ::mmap(nullptr, m.info.host_arena_bytes, PROT_READ, MAP_SHARED, m.host_fd, 0);
  const int err = errno;
  ::close(m.host_fd);
  if (p == MAP_FAILED) return StatusFromErrno(err, "map: mmap of the host arena");
  std::unique_ptr<SharedArena> a(new SharedArena());
  a->base_ = static_cast<const std::byte*>(p);
  a->size_ = m.info.host_arena_bytes;
  a->info_ = m.info;
  return a;
}

SharedArena::~SharedArena() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
}

Result<std::span<const std::byte>> SharedArena::View(const protocol::Lease& lease) const {
  if (lease.status != StatusCode::kOk || lease.tier != protocol::Tier::kHost) {
    return InvalidArgument("shared arena: not an ok host-tier lease");
  }
  if (lease.offset > size_ || lease.length > size_ - lease.offset) {
    return OutOfRange("shared arena: lease [" + std::to_string(lease.offset) + ", +" +
                      std::to_string(lease.length) + ") lies outside the arena of " +
                      std::to_string(size_) + " bytes");
  }
  return std::span<const std::byte>(base_ + lease.offset, lease.length);
}

Result<std::optional<std::vector<std::byte>>> Connection::Get(std::string_view key) {
  // Received straight into the vector returned (one allocation, no frame buffer to copy from).
  std::vector<std::byte> out;
  KVD_ASSIGN_OR_RETURN(const std::optional<std::size_t> size,
                       GetInto(key, {}, [&out](std::size_t value_size) {
                         out.resize(value_size);
                         return std::span<std::byte>(out);
                       }));
  std::optional<std::vector<std::byte>> value;
  if (size) value = std::move(out);  // empty for an empty value
  return value;
}

Status Connection::PutParts(std::string_view key, std::span<const std::span<const std::byte>> parts,
                            std::string_view placement_key) {
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendPutParts(key, parts, placement_key));
  return ReadPutAnswer(id, key);
}

Status Connection::Drain(std::uint64_t n) {
  std::byte sink[64 * 1024];
  while (n > 0) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof(sink)));
    KVD_RETURN_IF_ERROR(RecvAll(sink, step));
    n -= step;
  }
  return Status::Ok();
}

Result<std::optional<std::size_t>> Connection::GetInto(std::string_view key,
                                                       std::span<std::byte> head,
                                                       std::span<std::byte> out) {
  bool fits = true;
  auto r = GetInto(key, head, [&](std::size_t size) {
    fits = size - head.size() <= out.size();
    return out;
  });
  if (r.ok() && !fits) {
    return OutOfRange("get: value exceeds the " + std::to_string(head.size() + out.size()) +
                      "-byte buffer");
  }
  return r;
}

Result<std::optional<std::size_t>> Connection::GetInto(std::string_view key,
                                                       std::span<std::byte> head,
                                                       const OutChooser& choose_out) {
  const std::string keys[] = {std::string(key)};
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> request, protocol::EncodeKeyList(keys));
  KVD_ASSIGN_OR_RETURN(std::uint64_t id, SendRequest(Op::kGet, request));
  std::byte raw[protocol::kFrameHeaderBytes];
  KVD_RETURN_IF_ERROR(RecvAll(raw, sizeof(raw)));
  protocol::Limits limits = options_.limits;
  limits.max_body_bytes =
      std::max<std::uint64_t>(limits.max_body_bytes, limits.max_value_bytes + 4096);
  auto h = protocol::DecodeFrameHeader(raw, limits, /*expect_response=*/true);
  if (!h.ok()) return Broken(h.status());
  if (h->request_id != id || h->op() != Op::kGet || (h->flags & protocol::kFlagMore) != 0 ||
      (h->status != 0 && h->body_length != protocol::kGetItemPrefixBytes)) {
    std::vector<std::byte> body(h->body_length);
    KVD_RETURN_IF_ERROR(RecvAll(body.data(), body.size()));
    if (h->status != 0 && h->request_id == id) return FromWire(h->status, body);
    return Broken(Corruption("protocol: unexpected response to GET " + std::to_string(id)));
  }
  if (h->body_length < protocol::kGetItemPrefixBytes) {
    return Broken(Corruption("protocol: GET item frame too short"));
  }
  std::byte prefix_bytes[protocol::kGetItemPrefixBytes];
  KVD_RETURN_IF_ERROR(RecvAll(prefix_bytes, sizeof(prefix_bytes)));
  const std::uint64_t size = h->body_length - protocol::kGetItemPrefixBytes;
  if (h->status == static_cast<std::uint16_t>(StatusCode::kNotFound)) {
    KVD_RETURN_IF_ERROR(Drain(size));
    return std::optional<std::size_t>();
  }
  if (h->status != 0) {
    KVD_RETURN_IF_ERROR(Drain(size));
    return Status(
        static_cast<StatusCode>(h->status),
        "get: server returned " + std::string(StatusCodeName(static_cast<StatusCode>(h->status))));
  }
  const std::size_t in_head = static_cast<std::size_t>(std::min<std::uint64_t>(size, head.size()));
  KVD_RETURN_IF_ERROR(RecvAll(head.data(), in_head));
  const std::uint64_t rest = size - in_head;
  if (rest == 0) return std::optional<std::size_t>(static_cast<std::size_t>(size));
  const std::span<std::byte> out = choose_out(static_cast<std::size_t>(size));
  if (out.size() < rest) {  // no room (or dropped on purpose): read past it
    KVD_RETURN_IF_ERROR(Drain(rest));
    return std::optional<std::size_t>();
  }
  KVD_RETURN_IF_ERROR(RecvAll(out.data(), static_cast<std::size_t>(rest)));
  return std::optional<std::size_t>(static_cast<std::size_t>(size));
}

Result<protocol::LookupResult> Connection::Lookup(std::span<const std::string> keys,
                                                  std::span<const std::string> placement_keys) {
  KVD_ASSIGN_OR_RETURN(const auto placement,
                       PlacementViews(Op::kLookup, keys.size(), placement_keys));
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, protocol::EncodeKeyList(keys));
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kLookup, body, placement));
  return protocol::DecodeLookupResult(response);
}

Result<std::vector<StatusCode>> Connection::Delete(std::span<const std::string> keys,
                                                   std::span<const std::string> placement_keys) {
  KVD_ASSIGN_OR_RETURN(const auto placement,
                       PlacementViews(Op::kDelete, keys.size(), placement_keys));
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, protocol::EncodeKeyList(keys));
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kDelete, body, placement));
  return protocol::DecodeStatusList(response);
}

Result<std::string> Connection::Stats() {
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kStats, {}));
  return std::string(reinterpret_cast<const char*>(response.data()), response.size());
}

Result<std::string> Connection::ClusterInfo() {
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kClusterInfo, {}));
  return std::string(reinterpret_cast<const char*>(response.data()), response.size());
}

Result<protocol::ScanResult> Connection::Scan(const protocol::ScanRequest& request) {
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, protocol::EncodeScanRequest(request));
  KVD_ASSIGN_OR_RETURN(auto response, Call(Op::kScan, body));
  return protocol::DecodeScanResult(response);
}

// ---- Client -----------------------------------------------------------------------------------

template <typename Fn>
auto Client::WithConnection(Fn&& fn, bool retry) -> decltype(fn(std::declval<Connection&>())) {
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn;
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        conn = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    const bool reused = conn != nullptr;
    if (!conn) {
      auto fresh = Connection::Connect(options_);
      if (!fresh.ok()) return fresh.status();
      conn = std::move(*fresh);
    }
    auto result = fn(*conn);
    if (conn->broken()) {
      if (retry && reused && attempt == 0) continue;  // stale pooled connection: once more
      return result;
    }
    std::lock_guard lock(mu_);
    if (idle_.size() < options_.pool_size) idle_.push_back(std::move(conn));
    return result;
  }
}

namespace {

StatusCode CodeOf(const Status& s) {
  return s.code();
}
template <typename T>
StatusCode CodeOf(const Result<T>& r) {
  return r.ok() ? StatusCode::kOk : r.status().code();
}

}  // namespace

template <typename Fn>
auto Client::WithRoute(std::string_view key, std::string_view placement_key, Fn&& fn,
                       const bool* delivered) -> decltype(fn(std::declval<Connection&>())) {
  using R = decltype(fn(std::declval<Connection&>()));
  const std::shared_ptr<const cluster::Topology> view = RouteView();
  if (view == nullptr) return WithConnection(fn, /*retry=*/delivered == nullptr);
  std::optional<R> last;
  for (const std::string& address : routes_->Targets(*view, key, placement_key)) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool reused = false;
      auto conn = routes_->Acquire(address, &reused, /*fresh=*/attempt > 0);
      if (!conn.ok()) {
        last.emplace(conn.status());
        break;
      }
      R result = fn(**conn);
      const bool broken = (*conn)->broken();
      routes_->Release(address, std::move(*conn));
      if (delivered != nullptr && *delivered) return result;  // must not be repeated
      if (broken && reused && attempt == 0) continue;  // a stale pooled connection: once more
      if (!broken && CodeOf(result) != StatusCode::kUnavailable) return result;
      last.emplace(std::move(result));
      break;
    }
    routes_->ReportFailure(address);  // down, or it refuses (fenced): next target
  }
  return std::move(*last);
}

Status Client::Ping() {
  return WithConnection([](Connection& c) { return c.Ping(); });
}
Status Client::SetEventOrigin(const protocol::EventOrigin& origin) {
  return WithConnection([&](Connection& c) { return c.SetEventOrigin(origin); });
}
Status Client::Put(std::string_view key, std::span<const std::byte> value,
                   std::string_view placement_key) {
  return WithRoute(key, placement_key,
                   [&](Connection& c) { return c.Put(key, value, placement_key); });
}
Result<std::vector<StatusCode>> Client::Put(std::span<const protocol::PutItemView> items) {
  if (const auto view = RouteView(); view != nullptr) return RoutedPut(*view, items);
  return WithConnection([&](Connection& c) { return c.Put(items); });
}
Result<std::optional<std::vector<std::byte>>> Client::Get(std::string_view key,
                                                          std::string_view placement_key) {
  if (placement_key.empty()) {
    return WithRoute(key, placement_key, [&](Connection& c) { return c.Get(key); });
  }
  // With a placement key: a one-key GET carrying it (the owner then asks the group's replicas and
  // previous owners as it would for a request placed by the group).
  const std::string keys[] = {std::string(key)};
  const std::string placement[] = {std::string(placement_key)};
  return WithRoute(key, placement_key,
                   [&](Connection& c) -> Result<std::optional<std::vector<std::byte>>> {
                     std::optional<std::vector<std::byte>> out;
                     Status item_status = Status::Ok();
                     KVD_RETURN_IF_ERROR(c.Get(
                         keys,
                         [&](const GetItem& item) {
                           if (item.status.ok()) out.emplace(item.value.begin(), item.value.end());
                           if (!item.status.ok() && item.status.code() != StatusCode::kNotFound) {
                             item_status = item.status;
                           }
                         },
                         placement));
                     KVD_RETURN_IF_ERROR(item_status);
                     return out;
                   });
}
Status Client::Get(std::span<const std::string> keys, const GetCallback& on_item,
                   std::span<const std::string> placement_keys) {
  if (const auto view = RouteView(); view != nullptr) {
    return RoutedGet(*view, protocol::Op::kGet, CodecId{}, keys, placement_keys, on_item);
  }
  // Not retried: items may already have been delivered to the callback.
  return WithConnection([&](Connection& c) { return c.Get(keys, on_item, placement_keys); },
                        /*retry=*/false);
}
Status Client::GetAs(std::span<const std::string> keys, CodecId codec, const GetCallback& on_item,
                     std::span<const std::string> placement_keys) {
  if (const auto view = RouteView(); view != nullptr) {
    return RoutedGet(*view, protocol::Op::kGetAs, codec, keys, placement_keys, on_item);
  }
  return WithConnection(
      [&](Connection& c) { return c.GetAs(keys, codec, on_item, placement_keys); },
      /*retry=*/false);
}
Status Client::PutParts(std::string_view key, std::span<const std::span<const std::byte>> parts,
                        std::string_view placement_key) {
  return WithRoute(key, placement_key,
                   [&](Connection& c) { return c.PutParts(key, parts, placement_key); });
}
Result<std::optional<std::size_t>> Client::GetInto(std::string_view key, std::span<std::byte> head,
                                                   std::span<std::byte> out,
                                                   std::string_view placement_key) {
  return WithRoute(key, placement_key, [&](Connection& c) { return c.GetInto(key, head, out); });
}
Result<std::optional<std::size_t>> Client::GetInto(std::string_view key, std::span<std::byte> head,
                                                   const Connection::OutChooser& choose_out,
                                                   std::string_view placement_key) {
  // Not repeated once choose_out was called.
  bool delivered = false;
  const Connection::OutChooser chooser = [&](std::size_t size) {
    delivered = true;
    return choose_out(size);
  };
  return WithRoute(
      key, placement_key, [&](Connection& c) { return c.GetInto(key, head, chooser); }, &delivered);
}
Result<protocol::LookupResult> Client::Lookup(std::span<const std::string> keys,
                                              std::span<const std::string> placement_keys) {
  if (const auto view = RouteView(); view != nullptr && !keys.empty()) {
    return RoutedLookup(*view, keys, placement_keys);
  }
  return WithConnection([&](Connection& c) { return c.Lookup(keys, placement_keys); });
}
Result<std::vector<StatusCode>> Client::Delete(std::span<const std::string> keys,
                                               std::span<const std::string> placement_keys) {
  if (const auto view = RouteView(); view != nullptr && !keys.empty()) {
    return RoutedDelete(*view, keys, placement_keys);
  }
  return WithConnection([&](Connection& c) { return c.Delete(keys, placement_keys); });
}
Result<std::string> Client::Stats() {
  return WithConnection([](Connection& c) { return c.Stats(); });
}
Result<std::string> Client::ClusterInfo() {
  return WithConnection([](Connection& c) { return c.ClusterInfo(); });
}
Result<protocol::ScanResult> Client::Scan(const protocol::ScanRequest& request) {
  return WithConnection([&](Connection& c) { return c.Scan(request); });
}

std::future<Status> Client::PutAsync(std::string key, std::vector<std::byte> value) {
  return std::async(std::launch::async, [this, key = std::move(key), value = std::move(value)] {
    return Put(key, value);
  });
}

std::future<Status> Client::GetAsync(std::vector<std::string> keys, GetCallback on_item) {
  return std::async(
      std::launch::async,
      [this, keys = std::move(keys), on_item = std::move(on_item)] { return Get(keys, on_item); });
}

}  // namespace kvdepot::client
