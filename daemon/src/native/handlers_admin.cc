// Connection<Socket>: AUTH, EVENT_ORIGIN and the peer name for logs.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::HandleEventOrigin(const FrameHeader& h) {
  auto origin = protocol::DecodeEventOriginRequest(body_);
  if (!origin.ok()) return RequestError(h, origin.status());
  if (!scope_->all && !scope_->AllowsNamespace(origin->namespace_id)) {
    return RequestError(h, PermissionDenied("event_origin: the namespace is outside the "
                                            "token's namespaces"));
  }
  if (KvEventPublisher* events = server_.store().events(); events != nullptr) {
    events->SetOrigin(origin->namespace_id, origin->instance, origin->model);
  }
  SendBody(h, StatusCode::kOk, {});
}

template <typename Socket>
void Connection<Socket>::HandleAuth(const FrameHeader& h) {
  auto token = protocol::DecodeAuthRequest(body_);
  if (!token.ok()) {
    if (scope_ == nullptr) server_.OnAuthFailure(PeerName(), "malformed auth");
    if (scope_ == nullptr) return Refuse(h, Unauthenticated(token.status().message()));
    return RequestError(h, token.status());
  }
  const Authenticator* auth = server_.options().auth.get();
  if (auth == nullptr) return SendBody(h, StatusCode::kOk, {});  // auth off: any token is fine
  const AuthScope* scope = auth->Check(*token);
  if (scope == nullptr) {
    server_.OnAuthFailure(PeerName(), "wrong token");
    return Refuse(h, Unauthenticated("auth: token not accepted"));
  }
  scope_ = scope;  // a later AUTH may switch to another token's scope
  SendBody(h, StatusCode::kOk, {});
}

template <typename Socket>
void Connection<Socket>::Refuse(const FrameHeader& h, const Status& status) {
  SendBody(h, status.code(), protocol::EncodeErrorBody(status.message()));
  stop_reading_ = true;
  MaybeClose();
}

template <typename Socket>
Status Connection<Socket>::CheckKeys(const std::vector<std::string_view>& keys) const {
  if (scope_->all) return Status::Ok();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!scope_->AllowsKey(keys[i])) {
      return PermissionDenied("key " + std::to_string(i) +
                              " is outside the namespaces this token may use");
    }
  }
  return Status::Ok();
}

template <typename Socket>
std::string Connection<Socket>::PeerName() {
  boost::system::error_code ec;
  if constexpr (std::is_same_v<typename Socket::lowest_layer_type::protocol_type, asio::ip::tcp>) {
    const auto ep = socket_.lowest_layer().remote_endpoint(ec);
    if (!ec) return ep.address().to_string() + ":" + std::to_string(ep.port());
    return "tcp:?";
  } else {
    return "unix";
  }
}

template class Connection<TcpSocket>;
template class Connection<UnixSocket>;
template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
