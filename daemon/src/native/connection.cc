// Connection<Socket>: reading frames, dispatch, the response slot queue, writing, timeouts.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::ReadHeader() {
  if (draining_ && !stop_reading_) {
    boost::system::error_code ec;
    if (socket_.lowest_layer().available(ec) == 0 || ec) stop_reading_ = true;  // nothing more
  }
  if (stop_reading_ || closed_) {
    MaybeClose();
    return;
  }
  if (queued_bytes_ > server_.options().max_output_bytes) {
    read_paused_ = true;  // resumed by the writer once the client has read enough
    return;
  }
  awaiting_header_ = true;
  // What is there of the header (usually all of it); the request's clock starts with its first
  // byte, before that the connection is idle.
  socket_.async_read_some(
      asio::buffer(header_), [self = this->shared_from_this()](auto ec, std::size_t n) {
        self->Received(n);
        if (ec) return self->HeaderFailed();
        self->request_started_ = std::chrono::steady_clock::now();
        if (n == self->header_.size()) {
          self->awaiting_header_ = false;
          return self->OnHeader();
        }
        asio::async_read(self->socket_,
                         asio::buffer(self->header_.data() + n, self->header_.size() - n),
                         [self](auto ec2, std::size_t m) {
                           self->Received(m);
                           if (ec2) return self->HeaderFailed();
                           self->awaiting_header_ = false;
                           self->OnHeader();
                         });
      });
}

template <typename Socket>
void Connection<Socket>::HeaderFailed() {
  awaiting_header_ = false;
  stop_reading_ = true;
  MaybeClose();
}

template <typename Socket>
void Connection<Socket>::Received(std::size_t n) {
  server_.bytes_in_ += n;
  if (n > 0) last_progress_ = std::chrono::steady_clock::now();
}

template <typename Socket>
void Connection<Socket>::OnHeader() {
  auto h = protocol::DecodeFrameHeader(header_, limits_, /*expect_response=*/false);
  if (!h.ok()) {
    ProtocolError(nullptr, h.status());
    return;
  }
  ++server_.requests_;
  if (server_.observer() != nullptr) {
    pending_.push_back({h->op(), std::chrono::steady_clock::now(), StatusCode::kOk});
  }
  if (scope_ == nullptr && h->op() != Op::kAuth) {
    // Nothing but AUTH before authentication; the body, if any, is not read.
    server_.OnAuthFailure(PeerName(), "request before auth");
    return Refuse(*h, Unauthenticated(std::string(protocol::OpName(h->op())) +
                                      " before auth: this server requires an AUTH token first"));
  }
  if (h->op() == Op::kPut) {
    StartPut(*h);
    return;
  }
  const std::uint64_t max_body = protocol::MaxRequestBody(h->op(), limits_, h->flags);
  if (h->body_length > max_body) {
    ProtocolError(&*h, Corruption(std::string(protocol::OpName(h->op())) + " body of " +
                                  std::to_string(h->body_length) + " bytes exceeds the " +
                                  std::to_string(max_body) + " that any valid request can have"));
    return;
  }
  body_.resize(h->body_length);
  asio::async_read(socket_, asio::buffer(body_),
                   [self = this->shared_from_this(), hdr = *h](auto ec, std::size_t n) {
                     self->Received(n);
                     if (ec) {
                       self->Close();
                       return;
                     }
                     self->RequestRead();
                     self->Dispatch(hdr);
                     self->ReadHeader();
                   });
}

template <typename Socket>
void Connection<Socket>::Dispatch(const FrameHeader& h) {
  switch (h.op()) {
    case Op::kPing: return SendBody(h, StatusCode::kOk, {});
    case Op::kGet: return HandleGet(h);
    case Op::kLookup: return HandleLookup(h);
    case Op::kDelete: return HandleDelete(h);
    case Op::kStats: {
      const std::string json = server_.StatsJson(scope_->all ? nullptr : scope_);
      const auto* p = reinterpret_cast<const std::byte*>(json.data());
      return SendBody(h, StatusCode::kOk, std::vector<std::byte>(p, p + json.size()));
    }
    case Op::kScan: return HandleScan(h);
    case Op::kAuth: return HandleAuth(h);
    case Op::kMap: return HandleMap(h);
    case Op::kLeaseGet: return HandleLeaseGet(h);
    case Op::kRelease: return HandleRelease(h);
    case Op::kGetAs: return HandleGetAs(h);
    case Op::kEventOrigin: return HandleEventOrigin(h);
    case Op::kClusterInfo: {
      const ClusterRouter* router = server_.store().router();
      const std::string json = router != nullptr ? router->InfoJson() : NotClusteredInfoJson();
      const auto* p = reinterpret_cast<const std::byte*>(json.data());
      return SendBody(h, StatusCode::kOk, std::vector<std::byte>(p, p + json.size()));
    }
    case Op::kPut: break;  // handled while reading
  }
}

template <typename Socket>
void Connection<Socket>::RequestError(const FrameHeader& h, const Status& status) {
  if (status.code() == StatusCode::kCorruption) return ProtocolError(&h, status);
  SendBody(h, status.code(), protocol::EncodeErrorBody(status.message()));
}

template <typename Socket>
void Connection<Socket>::ProtocolError(const FrameHeader* request, const Status& status) {
  ++server_.protocol_errors_;
  FrameHeader h;
  h.type = request != nullptr ? request->type : static_cast<std::uint8_t>(Op::kPing);
  h.request_id = request != nullptr ? request->request_id : 0;
  SendBody(h, StatusCode::kCorruption, protocol::EncodeErrorBody(status.message()));
  stop_reading_ = true;
  MaybeClose();
}

template <typename Socket>
void Connection<Socket>::SendBody(const FrameHeader& request, StatusCode status,
                                  std::vector<std::byte> body) {
  Enqueue(BodyFrame(request, status, std::move(body)));
}

template <typename Socket>
Outgoing Connection<Socket>::BodyFrame(const FrameHeader& request, StatusCode status,
                                       std::vector<std::byte> body) {
  Outgoing out;
  FrameHeader r;
  r.type = request.type | protocol::kResponseBit;
  r.request_id = request.request_id;
  r.status = static_cast<std::uint16_t>(status);
  r.body_length = static_cast<std::uint32_t>(body.size());
  protocol::EncodeFrameHeader(r, out.head.data());
  out.body = std::move(body);
  return out;
}

template <typename Socket>
void Connection<Socket>::Enqueue(Outgoing out) {
  if (closed_) return;
  queued_bytes_ += out.size();
  queue_.push_back(std::move(out));
  if (!writing_) WriteSome();
}

template <typename Socket>
std::uint64_t Connection<Socket>::ReserveSlot() {
  Outgoing placeholder;
  placeholder.ready = false;
  placeholder.slot = ++last_slot_;
  if (!closed_) queue_.push_back(std::move(placeholder));
  return last_slot_;
}

template <typename Socket>
void Connection<Socket>::FillSlot(std::uint64_t slot, Outgoing out) {
  for (Outgoing& o : queue_) {
    if (o.ready || o.slot != slot) continue;
    o = std::move(out);
    queued_bytes_ += o.size();
    if (!writing_) WriteSome();
    return;
  }
}

template <typename Socket>
void Connection<Socket>::WriteSome() {
  if (queue_.empty() || !queue_.front().ready || closed_) {
    writing_ = false;
    MaybeClose();
    return;
  }
  writing_ = true;
  if (queue_.front().pass_fd >= 0) return SendWithFd();
  // Gather up to 64 queued frames into one write.
  buffers_.clear();
  in_flight_ = 0;
  for (auto it = queue_.begin();
       it != queue_.end() && it->ready && it->pass_fd < 0 && in_flight_ < 64; ++it, ++in_flight_) {
    buffers_.emplace_back(it->head.data(), it->head_len);
    if (!it->body.empty()) buffers_.emplace_back(it->body.data(), it->body.size());
    if (it->value && !it->value->bytes().empty()) {
      buffers_.emplace_back(it->value->bytes().data(), it->value->bytes().size());
    }
  }
  asio::async_write(socket_, buffers_, TransferAllInLargeSteps,
                    [self = this->shared_from_this()](auto ec, std::size_t n) {
                      self->server_.bytes_out_ += n;
                      if (ec || self->closed_) return self->WriteEnded();
                      self->last_progress_ = std::chrono::steady_clock::now();
                      for (std::size_t i = 0; i < self->in_flight_; ++i) {
                        if (!self->pending_.empty()) self->ObserveWritten(self->queue_.front());
                        self->queued_bytes_ -= self->queue_.front().size();
                        self->queue_.pop_front();
                      }
                      self->PumpGets();
                      if (self->read_paused_ &&
                          self->queued_bytes_ <= self->server_.options().max_output_bytes / 2) {
                        self->read_paused_ = false;
                        self->ReadHeader();
                      }
                      self->WriteSome();
                    });
}

template <typename Socket>
void Connection<Socket>::SendWithFd() {
  Outgoing& f = queue_.front();
  fd_frame_.assign(f.head.begin(), f.head.begin() + static_cast<std::ptrdiff_t>(f.head_len));
  fd_frame_.insert(fd_frame_.end(), f.body.begin(), f.body.end());
  iovec iov{fd_frame_.data(), fd_frame_.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &f.pass_fd, sizeof(int));
  auto& raw = socket_.lowest_layer();  // only Unix sockets pass descriptors
  const ssize_t n = ::sendmsg(raw.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    raw.async_wait(asio::socket_base::wait_write, [self = this->shared_from_this()](auto ec) {
      if (ec || self->closed_) return self->WriteEnded();
      self->SendWithFd();
    });
    return;
  }
  if (n < 0) return WriteEnded();
  server_.bytes_out_ += static_cast<std::uint64_t>(n);
  f.pass_fd = -1;
  auto finish = [self = this->shared_from_this()](auto ec, std::size_t written) {
    self->server_.bytes_out_ += written;
    if (ec || self->closed_) return self->WriteEnded();
    if (!self->pending_.empty()) self->ObserveWritten(self->queue_.front());
    self->queued_bytes_ -= self->queue_.front().size();
    self->queue_.pop_front();
    self->WriteSome();
  };
  const std::size_t sent = static_cast<std::size_t>(n);
  if (sent == fd_frame_.size()) return finish(boost::system::error_code{}, 0);
  asio::async_write(socket_, asio::buffer(fd_frame_.data() + sent, fd_frame_.size() - sent),
                    std::move(finish));
}

template <typename Socket>
void Connection<Socket>::ObserveWritten(const Outgoing& frame) {
  PendingRequest& r = pending_.front();
  const std::byte* head = frame.head.data();
  const auto flags = LoadLE<std::uint16_t>(head + 6);
  const auto status = static_cast<StatusCode>(LoadLE<std::uint16_t>(head + 20));
  if (r.status == StatusCode::kOk) r.status = status;
  const Op op = static_cast<Op>(static_cast<std::uint8_t>(head[5]) & ~protocol::kResponseBit);
  if (r.status == StatusCode::kOk && (op == Op::kPut || op == Op::kDelete) &&
      frame.body.size() >= 4) {
    for (std::size_t at = 4; at + 2 <= frame.body.size(); at += 2) {  // u32 count, u16 codes
      const auto code = static_cast<StatusCode>(LoadLE<std::uint16_t>(frame.body.data() + at));
      if (code != StatusCode::kOk) {
        r.status = code;
        break;
      }
    }
  }
  if ((flags & protocol::kFlagMore) != 0) return;
  server_.observer()->OnRequest(r.op, r.status, std::chrono::steady_clock::now() - r.start);
  pending_.pop_front();
}

template <typename Socket>
void Connection<Socket>::StoreDone() {
  --store_ops_;
  last_progress_ = std::chrono::steady_clock::now();
}

template <typename Socket>
void Connection<Socket>::ArmWatchdog() {
  if (closed_) return;
  watchdog_.expires_after(server_.timeouts().Tick());
  watchdog_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->closed_) self->CheckTimeouts();
  });
}

template <typename Socket>
void Connection<Socket>::CheckTimeouts() {
  using Expired = ConnectionTimeouts::Expired;
  switch (server_.timeouts().Check(std::chrono::steady_clock::now(), request_started_,
                                   last_progress_, store_ops_ != 0)) {
    case Expired::kRequest: ++server_.request_timeouts_; return Close();
    case Expired::kIdle: ++server_.idle_timeouts_; return Close();
    case Expired::kNone: break;
  }
  ArmWatchdog();
}

template <typename Socket>
void Connection<Socket>::WriteEnded() {
  writing_ = false;
  queue_.clear();
  Close();
}

template <typename Socket>
void Connection<Socket>::MaybeClose() {
  if (stop_reading_ && !writing_ && queue_.empty() && !awaiting_header_) Close();
}

template <typename Socket>
void Connection<Socket>::Close() {
  if (closed_) return;
  closed_ = true;
  if (!writing_) queue_.clear();
  watchdog_.cancel();
  boost::system::error_code ec;
  socket_.lowest_layer().shutdown(asio::socket_base::shutdown_both, ec);
  socket_.lowest_layer().close(ec);
}

template class Connection<TcpSocket>;
template class Connection<UnixSocket>;
template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
