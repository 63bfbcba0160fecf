// Client's multi-key requests in a cluster (docs/cluster.md, "Smart clients"): split by owner,
// sent to every owner before any answer is read, re-sent to the next target when an owner fails.
#include <algorithm>
#include <future>
#include <numeric>
#include <utility>

#include "kvdepot/client/client.h"
#include "kvdepot/client/cluster_routes.h"

namespace kvdepot::client {
namespace {

using protocol::Op;

std::string_view PlacementKeyAt(std::span<const std::string> placement_keys, std::size_t i) {
  return i < placement_keys.size() ? std::string_view(placement_keys[i]) : std::string_view();
}

// Where each key of a multi-key request goes: its targets (ClusterRoutes::Targets) and which of
// them is next; `fresh` when the next attempt must not use a pooled connection.
class KeyRoutes {
 public:
  KeyRoutes(const ClusterRoutes& routes, const cluster::Topology& view,
            std::span<const std::string_view> keys, std::span<const std::string> placement_keys)
      : targets_(keys.size()), cursor_(keys.size(), 0), fresh_(keys.size(), false) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      targets_[i] = routes.Targets(view, keys[i], PlacementKeyAt(placement_keys, i));
    }
  }

  struct Group {
    std::string address;
    bool fresh = false;
    std::vector<std::size_t> keys;  // ascending
  };
  // `keys` (ascending) grouped by where they go now, in order of first key. Keys with no target
  // left are put in `exhausted` instead.
  std::vector<Group> Split(const std::vector<std::size_t>& keys,
                           std::vector<std::size_t>* exhausted) const {
    std::vector<Group> groups;
    for (std::size_t i : keys) {
      if (cursor_[i] >= targets_[i].size()) {
        exhausted->push_back(i);
        continue;
      }
      const std::string& address = targets_[i][cursor_[i]];
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.address == address && g.fresh == fresh_[i];
      });
      if (it == groups.end()) {
        groups.push_back(Group{address, fresh_[i], {}});
        it = groups.end() - 1;
      }
      it->keys.push_back(i);
    }
    return groups;
  }
  void Advance(std::size_t i) {
    ++cursor_[i];
    fresh_[i] = false;
  }
  void RetryFresh(std::size_t i) { fresh_[i] = true; }

 private:
  std::vector<std::vector<std::string>> targets_;
  std::vector<std::size_t> cursor_;
  std::vector<bool> fresh_;
};

// The keys of one request (or one pipelined run of requests) to one address on one connection.
struct Leg {
  std::string address;
  bool fresh = false;             // opened fresh after a stale pooled connection
  std::vector<std::size_t> keys;  // indices into the caller's keys, ascending
  std::unique_ptr<Connection> conn;
  bool reused = false;             // conn came from the pool
  std::vector<std::uint64_t> ids;  // request ids sent on conn
  std::size_t next = 0;            // GET: keys[next] is the next item to read
};

Status OpenLeg(ClusterRoutes& routes, Leg& leg) {
  KVD_ASSIGN_OR_RETURN(leg.conn, routes.Acquire(leg.address, &leg.reused, leg.fresh));
  return Status::Ok();
}

// Whether a leg's failure `s` sends its keys elsewhere (the member is down, its connection broke,
// or it answered `unavailable`) rather than being the request's answer.
bool Reroutable(const Leg& leg, const Status& s) {
  return leg.conn == nullptr || leg.conn->broken() || s.code() == StatusCode::kUnavailable;
}

// Moves a failed leg's `unfinished` keys on, appending them to `pending`: a pooled connection
// that broke before any answer was likely closed by the server while idle, so the same address is
// tried once more on a fresh connection; otherwise the address is reported and the keys go to
// their next targets.
void MoveOn(ClusterRoutes& routes, KeyRoutes& key_routes, const Leg& leg, bool answered,
            std::span<const std::size_t> unfinished, std::vector<std::size_t>& pending) {
  const bool stale =
      leg.conn != nullptr && leg.conn->broken() && leg.reused && !leg.fresh && !answered;
  if (!stale) routes.ReportFailure(leg.address);
  for (std::size_t i : unfinished) {
    if (stale) {
      key_routes.RetryFresh(i);
    } else {
      key_routes.Advance(i);
    }
    pending.push_back(i);
  }
}

Status NoTargetLeft(std::size_t key_index, const Status& last) {
  return Status(StatusCode::kUnavailable,
                "cluster routing: no member could serve key #" + std::to_string(key_index) +
                    " (its owners, other members and the configured address were tried); last "
                    "error: " +
                    last.message());
}

// A request-response exchange per leg: `send` writes the leg's requests, `read` reads their
// answers, marking finished keys in `done` and listing keys answered `unavailable` in `refused`.
struct Exchange {
  std::function<Status(Leg&)> send;
  std::function<Status(Leg&, std::vector<std::uint8_t>& done, std::vector<std::size_t>& refused)>
      read;
};

// Runs `exchange` over one leg per address until every key is done: all legs are sent before any
// answer is read (or, with `parallel`, each leg sends and reads on its own thread). Failed legs'
// keys go to their next targets in another round.
Status Scatter(ClusterRoutes& routes, KeyRoutes& key_routes, std::size_t n,
               const Exchange& exchange, bool parallel) {
  std::vector<std::uint8_t> done(n, 0);  // bytes, not vector<bool>: written from several threads
  std::vector<std::size_t> pending(n);
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  Status last = Unavailable("no member reachable");
  while (!pending.empty()) {
    std::vector<std::size_t> exhausted;
    const std::vector<KeyRoutes::Group> groups = key_routes.Split(pending, &exhausted);
    if (!exhausted.empty()) return NoTargetLeft(exhausted.front(), last);
    pending.clear();
    std::vector<Leg> legs(groups.size());
    std::vector<Status> results(groups.size());
    std::vector<std::vector<std::size_t>> refused(groups.size());
    const auto send = [&](std::size_t k) {
      legs[k].address = groups[k].address;
      legs[k].fresh = groups[k].fresh;
      legs[k].keys = groups[k].keys;
      results[k] = OpenLeg(routes, legs[k]);
      if (results[k].ok()) results[k] = exchange.send(legs[k]);
    };
    const auto read = [&](std::size_t k) {
      if (results[k].ok()) results[k] = exchange.read(legs[k], done, refused[k]);
    };
    if (parallel && legs.size() > 1) {
      std::vector<std::future<void>> others;
      for (std::size_t k = 1; k < legs.size(); ++k) {
        others.push_back(std::async(std::launch::async, [&, k] {
          send(k);
          read(k);
        }));
      }
      send(0);
      read(0);
      for (auto& f : others) f.get();
    } else {
      for (std::size_t k = 0; k < legs.size(); ++k) send(k);
      for (std::size_t k = 0; k < legs.size(); ++k) read(k);
    }
    Status refusal = Status::Ok();
    for (std::size_t k = 0; k < legs.size(); ++k) {
      Leg& leg = legs[k];
      if (results[k].ok()) {
        if (!refused[k].empty()) {
          last = Unavailable(leg.address + " refused some keys (unavailable)");
          MoveOn(routes, key_routes, leg, /*answered=*/true, refused[k], pending);
        }
      } else if (Reroutable(leg, results[k])) {
        last = results[k];
        std::vector<std::size_t> unfinished;
        for (std::size_t i : leg.keys) {
          if (done[i] == 0) unfinished.push_back(i);
        }
        const bool answered = unfinished.size() != leg.keys.size();
        MoveOn(routes, key_routes, leg, answered, unfinished, pending);
      } else if (refusal.ok()) {
        refusal = results[k];  // the request itself was refused (e.g. permission_denied)
      }
      routes.Release(leg.address, std::move(leg.conn));
    }
    if (!refusal.ok()) return refusal;
    std::sort(pending.begin(), pending.end());
  }
  return Status::Ok();
}

// Reads the single answer frame to request `id` (op `op`) on `leg`; a mismatched frame closes the
// connection (it is dropped, and the keys move on).
Result<std::vector<std::byte>> ReadAnswer(Leg& leg, Op op, std::uint64_t id) {
  std::vector<std::byte> body;
  KVD_ASSIGN_OR_RETURN(protocol::FrameHeader h, leg.conn->ReadResponse(body));
  if (h.request_id != id || h.op() != op || (h.flags & protocol::kFlagMore) != 0) {
    leg.conn.reset();
    return Corruption("protocol: unexpected response to " + std::string(protocol::OpName(op)) +
                      " " + std::to_string(id) + " from " + leg.address);
  }
  if (h.status != 0) {
    return Status(static_cast<StatusCode>(h.status),
                  std::string(reinterpret_cast<const char*>(body.data()), body.size()));
  }
  return body;
}

std::vector<std::string_view> Views(std::span<const std::string> keys) {
  return {keys.begin(), keys.end()};
}

std::vector<std::string> Subset(std::span<const std::string> keys,
                                std::span<const std::size_t> indices) {
  std::vector<std::string> out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(keys[i]);
  return out;
}

// The placement keys of the keys at `indices`, for a request carrying those keys; empty when the
// caller gave none (the request then has no placement section).
std::vector<std::string_view> PlacementSubset(std::span<const std::string> placement_keys,
                                              std::span<const std::size_t> indices) {
  std::vector<std::string_view> out;
  if (placement_keys.empty()) return out;
  out.reserve(indices.size());
  for (std::size_t i : indices) out.push_back(placement_keys[i]);
  return out;
}

// LOOKUP and DELETE: one key-list request per leg, all sent at once; `absorb` takes a leg's
// decoded answer.
Exchange KeyListExchange(Op op, std::span<const std::string> keys,
                         std::span<const std::string> placement_keys,
                         std::function<Status(const Leg&, std::span<const std::byte>)> absorb) {
  Exchange e;
  e.send = [op, keys, placement_keys](Leg& leg) -> Status {
    KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body,
                         protocol::EncodeKeyList(Subset(keys, leg.keys)));
    KVD_ASSIGN_OR_RETURN(const std::uint64_t id,
                         leg.conn->SendPlaced(op, body, PlacementSubset(placement_keys, leg.keys)));
    leg.ids = {id};
    return Status::Ok();
  };
  e.read = [op, absorb = std::move(absorb)](Leg& leg, std::vector<std::uint8_t>& done,
                                            std::vector<std::size_t>&) -> Status {
    KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body, ReadAnswer(leg, op, leg.ids[0]));
    if (Status s = absorb(leg, body); !s.ok()) {
      leg.conn.reset();  // an answer that does not fit the request: do not trust the connection
      return s;
    }
    for (std::size_t i : leg.keys) done[i] = 1;
    return Status::Ok();
  };
  return e;
}

}  // namespace

Client::Client(ClientOptions options) : options_(std::move(options)) {
  if (options_.cluster_routing == ClusterRouting::kAuto) {
    routes_ = std::make_unique<ClusterRoutes>(options_);
  }
}

Client::~Client() = default;

std::shared_ptr<const cluster::Topology> Client::RouteView() {
  return routes_ != nullptr ? routes_->View() : nullptr;
}

Result<protocol::LookupResult> Client::RoutedLookup(const cluster::Topology& view,
                                                    std::span<const std::string> keys,
                                                    std::span<const std::string> placement_keys) {
  const std::vector<std::string_view> views = Views(keys);
  KeyRoutes key_routes(*routes_, view, views, placement_keys);
  protocol::LookupResult out;
  out.tiers.assign(keys.size(), protocol::Tier::kNone);
  const Exchange exchange = KeyListExchange(
      Op::kLookup, keys, placement_keys,
      [&out](const Leg& leg, std::span<const std::byte> body) -> Status {
        KVD_ASSIGN_OR_RETURN(const protocol::LookupResult r, protocol::DecodeLookupResult(body));
        if (r.tiers.size() != leg.keys.size()) {
          return Corruption("protocol: LOOKUP answer from " + leg.address + " has " +
                            std::to_string(r.tiers.size()) + " tiers for " +
                            std::to_string(leg.keys.size()) + " keys");
        }
        for (std::size_t j = 0; j < leg.keys.size(); ++j) out.tiers[leg.keys[j]] = r.tiers[j];
        return Status::Ok();
      });
  KVD_RETURN_IF_ERROR(Scatter(*routes_, key_routes, keys.size(), exchange, /*parallel=*/false));
  while (out.prefix_length < out.tiers.size() &&
         out.tiers[out.prefix_length] != protocol::Tier::kNone) {
    ++out.prefix_length;
  }
  return out;
}

Result<std::vector<StatusCode>> Client::RoutedDelete(const cluster::Topology& view,
                                                     std::span<const std::string> keys,
                                                     std::span<const std::string> placement_keys) {
  const std::vector<std::string_view> views = Views(keys);
  KeyRoutes key_routes(*routes_, view, views, placement_keys);
  std::vector<StatusCode> out(keys.size(), StatusCode::kNotFound);
  const Exchange exchange = KeyListExchange(
      Op::kDelete, keys, placement_keys,
      [&out](const Leg& leg, std::span<const std::byte> body) -> Status {
        KVD_ASSIGN_OR_RETURN(const std::vector<StatusCode> codes, protocol::DecodeStatusList(body));
        if (codes.size() != leg.keys.size()) {
          return Corruption("protocol: DELETE answer from " + leg.address + " has " +
                            std::to_string(codes.size()) + " statuses for " +
                            std::to_string(leg.keys.size()) + " keys");
        }
        for (std::size_t j = 0; j < leg.keys.size(); ++j) out[leg.keys[j]] = codes[j];
        return Status::Ok();
      });
  KVD_RETURN_IF_ERROR(Scatter(*routes_, key_routes, keys.size(), exchange, /*parallel=*/false));
  return out;
}

Result<std::vector<StatusCode>> Client::RoutedPut(const cluster::Topology& view,
                                                  std::span<const protocol::PutItemView> items) {
  std::vector<std::string_view> keys;
  keys.reserve(items.size());
  for (const auto& item : items) keys.push_back(item.key);
  std::vector<std::string> placement_keys;  // empty unless an item has one
  if (std::any_of(items.begin(), items.end(),
                  [](const auto& i) { return !i.placement_key.empty(); })) {
    for (const auto& item : items) placement_keys.emplace_back(item.placement_key);
  }
  KeyRoutes key_routes(*routes_, view, keys, placement_keys);
  std::vector<StatusCode> out(items.size(), StatusCode::kOk);
  Exchange exchange;
  // One single-item PUT per key, pipelined on the owner's connection (values are sent from the
  // caller's memory, never joined into one body); each owner's leg runs on its own thread.
  exchange.send = [items](Leg& leg) -> Status {
    for (std::size_t i : leg.keys) {
      KVD_ASSIGN_OR_RETURN(const std::uint64_t id,
                           leg.conn->SendPut(items[i].key, items[i].value, items[i].placement_key));
      leg.ids.push_back(id);
    }
    return Status::Ok();
  };
  exchange.read = [&out](Leg& leg, std::vector<std::uint8_t>& done,
                         std::vector<std::size_t>& refused) -> Status {
    for (std::size_t j = 0; j < leg.keys.size(); ++j) {
      const std::size_t i = leg.keys[j];
      Result<std::vector<std::byte>> body = ReadAnswer(leg, Op::kPut, leg.ids[j]);
      StatusCode code = StatusCode::kOk;
      if (!body.ok()) {
        if (leg.conn == nullptr || leg.conn->broken()) return body.status();
        code = body.status().code();  // this item's request was refused
      } else {
        auto codes = protocol::DecodeStatusList(*body);
        if (!codes.ok() || codes->size() != 1) {
          leg.conn.reset();
          return Corruption("protocol: PUT answer from " + leg.address + " is not one status");
        }
        code = (*codes)[0];
      }
      if (code == StatusCode::kUnavailable) {
        refused.push_back(i);  // e.g. a fenced member: the next target takes it
      } else {
        out[i] = code;
        done[i] = 1;
      }
    }
    return Status::Ok();
  };
  KVD_RETURN_IF_ERROR(Scatter(*routes_, key_routes, items.size(), exchange, /*parallel=*/true));
  return out;
}

Status Client::RoutedGet(const cluster::Topology& view, Op op, CodecId codec,
                         std::span<const std::string> keys,
                         std::span<const std::string> placement_keys, const GetCallback& on_item) {
  const std::size_t n = keys.size();
  const std::vector<std::string_view> views = Views(keys);
  KeyRoutes key_routes(*routes_, view, views, placement_keys);
  std::vector<std::unique_ptr<Leg>> legs;
  std::vector<Leg*> leg_of(n, nullptr);
  Status last = Unavailable("no member reachable");

  // Sends the not yet delivered keys `pending` (ascending) on new legs, one request per address;
  // keys whose address cannot be reached move on to their next targets.
  const auto send = [&](std::vector<std::size_t> pending) -> Status {
    while (!pending.empty()) {
      std::vector<std::size_t> exhausted;
      const std::vector<KeyRoutes::Group> groups = key_routes.Split(pending, &exhausted);
      if (!exhausted.empty()) return NoTargetLeft(exhausted.front(), last);
      pending.clear();
      for (const KeyRoutes::Group& g : groups) {
        auto leg = std::make_unique<Leg>();
        leg->address = g.address;
        leg->fresh = g.fresh;
        leg->keys = g.keys;
        const std::vector<std::string> subset = Subset(keys, g.keys);
        KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> body,
                             op == Op::kGetAs ? protocol::EncodeGetAsRequest(
                                                    static_cast<std::uint8_t>(codec), subset)
                                              : protocol::EncodeKeyList(subset));
        Status s = OpenLeg(*routes_, *leg);
        if (s.ok()) {
          Result<std::uint64_t> id =
              leg->conn->SendPlaced(op, body, PlacementSubset(placement_keys, g.keys));
          if (id.ok()) leg->ids = {*id};
          s = id.status();
        }
        if (!s.ok()) {
          if (!Reroutable(*leg, s)) return s;
          last = s;
          MoveOn(*routes_, key_routes, *leg, /*answered=*/false, leg->keys, pending);
          continue;
        }
        for (std::size_t i : leg->keys) leg_of[i] = leg.get();
        legs.push_back(std::move(leg));
      }
      std::sort(pending.begin(), pending.end());
    }
    return Status::Ok();
  };

  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  KVD_RETURN_IF_ERROR(send(std::move(all)));
  // Items are read in key order, each from its owner's connection when it is its turn: every
  // owner answers its keys in order, and the socket buffers let all owners send meanwhile.
  std::vector<std::byte> frame;
  for (std::size_t i = 0; i < n; ++i) {
    for (;;) {
      Leg& leg = *leg_of[i];
      bool delivered = false;
      const Status s = leg.conn->ReadGetItem(leg.ids[0], op, static_cast<std::uint32_t>(leg.next),
                                             leg.keys.size(), frame, [&](const GetItem& item) {
                                               delivered = true;
                                               GetItem routed = item;
                                               routed.index = static_cast<std::uint32_t>(i);
                                               on_item(routed);
                                             });
      if (s.ok()) {
        ++leg.next;
        break;
      }
      if (!Reroutable(leg, s)) return s;  // the request itself was refused
      last = s;
      const std::size_t first_unfinished = leg.next + (delivered ? 1 : 0);
      const std::vector<std::size_t> unfinished(
          leg.keys.begin() + static_cast<std::ptrdiff_t>(first_unfinished), leg.keys.end());
      std::vector<std::size_t> pending;
      MoveOn(*routes_, key_routes, leg, /*answered=*/leg.next > 0 || delivered, unfinished,
             pending);
      leg.conn.reset();
      KVD_RETURN_IF_ERROR(send(std::move(pending)));
      if (delivered) break;
    }
  }
  for (auto& leg : legs) {
    if (leg->conn != nullptr && leg->next == leg->keys.size()) {
      routes_->Release(leg->address, std::move(leg->conn));
    }
  }
  return Status::Ok();
}

}  // namespace kvdepot::client
