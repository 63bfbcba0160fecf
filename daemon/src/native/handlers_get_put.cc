// Connection<Socket>: PUT (items read straight into their final buffers), GET and GET_AS.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::StartPut(const FrameHeader& h) {
  put_ = PutState{};
  put_.results = std::make_shared<PutResults>();
  put_.header = h;
  put_.remaining = h.body_length;
  if ((h.flags & protocol::kFlagPlacement) != 0) return ReadPutPlacement();
  ReadPutCount();
}

template <typename Socket>
void Connection<Socket>::ReadPutPlacement() {
  if (put_.remaining < protocol::kPlacementSectionLengthBytes) {
    return RefusePut(InvalidArgument("put: the body (" + std::to_string(put_.remaining) +
                                     " bytes) is shorter than the placement section's length"));
  }
  ReadSmall(protocol::kPlacementSectionLengthBytes, [this] {
    const auto section = LoadLE<std::uint32_t>(small_.data());
    if (Status s = protocol::CheckPlacementSectionLength(section, put_.remaining, limits_);
        !s.ok()) {
      return RefusePut(s);
    }
    put_.remaining -= section;
    put_.placement_section.resize(section);
    asio::async_read(socket_, asio::buffer(put_.placement_section),
                     [self = this->shared_from_this()](auto ec, std::size_t n) {
                       self->Received(n);
                       if (ec) return self->Close();
                       auto keys = protocol::DecodePlacementEntries(self->put_.placement_section,
                                                                    self->limits_);
                       if (!keys.ok()) return self->RefusePut(keys.status());
                       self->put_.placement = std::move(*keys);
                       self->ReadPutCount();
                     });
  });
}

template <typename Socket>
void Connection<Socket>::ReadPutCount() {
  ReadSmall(protocol::kPutCountBytes, [this] {
    put_.count = LoadLE<std::uint32_t>(small_.data());
    if (put_.count == 0 || put_.count > limits_.max_batch) {
      // A well-formed request over a limit: answered as a whole, its body skipped, the
      // connection kept (docs/protocol.md).
      return RefusePut(OutOfRange("put: count " + std::to_string(put_.count) +
                                  " is out of range [1, " + std::to_string(limits_.max_batch) +
                                  "] (limits.max_batch)"));
    }
    if ((put_.header.flags & protocol::kFlagPlacement) != 0) {
      if (Status s = protocol::CheckPlacementCount(Op::kPut, put_.placement.size(), put_.count);
          !s.ok()) {
        return RefusePut(s);
      }
    }
    put_.results->codes.reserve(put_.count);
    PutNextItem();
  });
}

template <typename Socket>
void Connection<Socket>::RefusePut(const Status& status) {
  RequestError(put_.header, status);
  Discard(std::exchange(put_.remaining, 0), [this] {
    RequestRead();
    ReadHeader();
  });
}

template <typename Socket>
void Connection<Socket>::SkipItem(StatusCode code, std::uint64_t bytes) {
  put_.results->codes.push_back(code);
  Discard(bytes, [this] {
    ++put_.index;
    PutNextItem();
  });
}

template <typename Socket>
void Connection<Socket>::PutNextItem() {
  if (put_.index == put_.count) {
    if (put_.remaining != 0) {
      return ProtocolError(&put_.header, Corruption("put: " + std::to_string(put_.remaining) +
                                                    " trailing body bytes"));
    }
    RequestRead();
    put_.results->all_read = true;
    put_.results->slot = ReserveSlot();
    MaybeFinishPut(put_.header, *put_.results);
    return ReadHeader();
  }
  ReadSmall(protocol::kPutKeyLengthBytes, [this] {
    const auto key_len = LoadLE<std::uint16_t>(small_.data());
    if (key_len == 0 || key_len > limits_.max_key_bytes) {
      // Over the key limit: this item is out_of_range, the others go on. Its key is skipped,
      // then its value length read and its value skipped.
      if (key_len > put_.remaining) return BodyEndsInsideItem();
      put_.remaining -= key_len;
      return Discard(key_len, [this] {
        ReadSmall(protocol::kPutValueLengthBytes, [this] {
          const auto value_length = LoadLE<std::uint64_t>(small_.data());
          if (value_length > put_.remaining) return ValuePastBody();
          put_.remaining -= value_length;
          SkipItem(StatusCode::kOutOfRange, value_length);
        });
      });
    }
    ReadSmall(key_len + protocol::kPutValueLengthBytes, [this, key_len] {
      put_.key.assign(reinterpret_cast<const char*>(small_.data()), key_len);
      put_.value_length = LoadLE<std::uint64_t>(small_.data() + key_len);
      if (put_.value_length > put_.remaining) return ValuePastBody();
      put_.remaining -= put_.value_length;
      if (!scope_->AllowsKey(put_.key)) {  // decided before the store is touched
        return SkipItem(StatusCode::kPermissionDenied, put_.value_length);
      }
      if (put_.value_length > limits_.max_value_bytes) {
        return SkipItem(StatusCode::kOutOfRange, put_.value_length);
      }
      auto value = server_.store().Allocate(put_.key, put_.value_length);
      if (!value.ok()) return SkipItem(value.status().code(), put_.value_length);
      put_.value = std::move(*value);
      asio::async_read(socket_, asio::buffer(put_.value->mutable_bytes().data(), put_.value_length),
                       TransferAllInLargeSteps,
                       [self = this->shared_from_this()](auto ec, std::size_t n) {
                         self->Received(n);
                         if (ec) return self->Close();
                         self->StoreItem();
                         ++self->put_.index;
                         self->PutNextItem();
                       });
    });
  });
}

template <typename Socket>
void Connection<Socket>::BodyEndsInsideItem() {
  ProtocolError(&put_.header,
                Corruption("put: frame body ends inside item " + std::to_string(put_.index)));
}

template <typename Socket>
void Connection<Socket>::ValuePastBody() {
  ProtocolError(&put_.header, Corruption("put: value " + std::to_string(put_.index) +
                                         " runs past the frame body"));
}

template <typename Socket>
void Connection<Socket>::StoreItem() {
  const std::size_t item = put_.results->codes.size();
  put_.results->codes.push_back(StatusCode::kOk);
  ++put_.results->pending;
  ++store_ops_;
  server_.store().Put(
      put_.key, std::move(put_.value),
      [self = this->shared_from_this(), results = put_.results, header = put_.header,
       item](Status status) {
        self->OnOwnThread([self, results, header, item, status] {
          self->StoreDone();
          results->codes[item] = status.code();
          --results->pending;
          self->MaybeFinishPut(header, *results);
        });
      },
      RouteOf(put_.header), PlacementOf(put_.placement, item));
}

template <typename Socket>
void Connection<Socket>::MaybeFinishPut(const FrameHeader& header, const PutResults& results) {
  if (!results.all_read || results.pending != 0) return;
  FillSlot(results.slot,
           BodyFrame(header, StatusCode::kOk, protocol::EncodeStatusList(results.codes)));
}

template <typename Socket>
void Connection<Socket>::HandleGetAs(const FrameHeader& h) {
  auto placed = SplitBody(h);
  if (!placed.ok()) return RequestError(h, placed.status());
  auto q = protocol::DecodeGetAsRequest(placed->rest, limits_);
  if (!q.ok()) return RequestError(h, q.status());
  if (Status s = MatchPlacement(h, *placed, q->keys.size()); !s.ok()) return RequestError(h, s);
  if (Status s = CheckKeys(q->keys); !s.ok()) return RequestError(h, s);
  for (std::uint32_t i = 0; i < q->keys.size(); ++i) {
    get_backlog_.push_back({h, std::string(q->keys[i]), i, i + 1 == q->keys.size(), ReserveSlot(),
                            static_cast<int>(q->codec), nullptr,
                            std::string(PlacementOf(placed->placement_keys, i))});
  }
  PumpGets();
}

template <typename Socket>
void Connection<Socket>::Transcode(const PendingGet& g, Found found) {
  const protocol::Tier tier = found.tier;
  server_.transcoder().Submit(
      std::move(found.value), static_cast<CodecId>(g.target_codec),
      [self = this->shared_from_this(), work = asio::make_work_guard(socket_.get_executor()),
       h = g.header, i = g.index, last = g.last, slot = g.slot,
       tier](Result<std::vector<std::byte>> out) {
        asio::post(work.get_executor(),
                   [self, h, i, last, slot, tier, out = std::move(out)]() mutable {
                     --self->outstanding_gets_;
                     self->StoreDone();
                     self->FillSlot(slot, TranscodedFrame(h, i, last, tier, std::move(out)));
                     self->PumpGets();
                   });
      });
}

template <typename Socket>
Outgoing Connection<Socket>::TranscodedFrame(const FrameHeader& h, std::uint32_t index, bool last,
                                             protocol::Tier tier,
                                             Result<std::vector<std::byte>> out) {
  Outgoing frame;
  FrameHeader r;
  r.type = h.type | protocol::kResponseBit;
  r.request_id = h.request_id;
  r.flags = last ? 0 : protocol::kFlagMore;
  r.status = static_cast<std::uint16_t>(out.ok() ? StatusCode::kOk : out.status().code());
  if (out.ok()) frame.body = std::move(*out);
  r.body_length = static_cast<std::uint32_t>(protocol::kGetItemPrefixBytes + frame.body.size());
  protocol::EncodeFrameHeader(r, frame.head.data());
  protocol::EncodeGetItemPrefix(index, out.ok() ? tier : protocol::Tier::kNone,
                                frame.head.data() + protocol::kFrameHeaderBytes);
  frame.head_len = protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes;
  return frame;
}

template <typename Socket>
void Connection<Socket>::HandleGet(const FrameHeader& h) {
  auto placed = SplitBody(h);
  if (!placed.ok()) return RequestError(h, placed.status());
  auto keys = protocol::DecodeKeyList(placed->rest, limits_);
  if (!keys.ok()) return RequestError(h, keys.status());
  if (Status s = MatchPlacement(h, *placed, keys->size()); !s.ok()) return RequestError(h, s);
  if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
  for (std::uint32_t i = 0; i < keys->size(); ++i) {
    get_backlog_.push_back({h, std::string((*keys)[i]), i, i + 1 == keys->size(), ReserveSlot(), -1,
                            nullptr, std::string(PlacementOf(placed->placement_keys, i))});
  }
  PumpGets();
}

template <typename Socket>
void Connection<Socket>::PumpGets() {
  if (pumping_) return;  // an inline answer inside the loop below; the loop continues
  pumping_ = true;
  while (!get_backlog_.empty() && outstanding_gets_ < kMaxOutstandingGets &&
         queued_bytes_ < server_.options().max_output_bytes && !closed_) {
    PendingGet g = std::move(get_backlog_.front());
    get_backlog_.pop_front();
    ++outstanding_gets_;
    ++store_ops_;
    const Route route = g.lease ? Route::kLocal : RouteOf(g.header);  // leases: this node's
    server_.store().Get(
        g.key,
        [self = this->shared_from_this(), g](Result<Found> found) {
          self->OnOwnThread([self, g, found = std::move(found)]() mutable {
            if (g.lease) return self->OnLeaseRead(g, std::move(found));
            // A transcode keeps the store operation open until its answer (Transcode).
            if (g.target_codec >= 0 && found.ok()) return self->Transcode(g, std::move(*found));
            --self->outstanding_gets_;
            self->StoreDone();
            self->FillSlot(g.slot, GetItemFrame(g.header, g.index, g.last, std::move(found)));
            self->PumpGets();
          });
        },
        route, g.placement_key);
  }
  pumping_ = false;
}

template <typename Socket>
Outgoing Connection<Socket>::GetItemFrame(const FrameHeader& h, std::uint32_t index, bool last,
                                          Result<Found> found) {
  Outgoing out;
  FrameHeader r;
  r.type = h.type | protocol::kResponseBit;
  r.request_id = h.request_id;
  r.flags = last ? 0 : protocol::kFlagMore;
  r.status = static_cast<std::uint16_t>(found.ok() ? StatusCode::kOk : found.status().code());
  r.body_length = static_cast<std::uint32_t>(protocol::kGetItemPrefixBytes +
                                             (found.ok() ? found->value->bytes().size() : 0));
  protocol::EncodeFrameHeader(r, out.head.data());
  protocol::EncodeGetItemPrefix(index, found.ok() ? found->tier : protocol::Tier::kNone,
                                out.head.data() + protocol::kFrameHeaderBytes);
  out.head_len = protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes;
  if (found.ok()) out.value = std::move(found->value);
  return out;
}

template class Connection<TcpSocket>;
template class Connection<UnixSocket>;
template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
