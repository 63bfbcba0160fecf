#include "kvdepot/daemon/cluster_router.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "cluster/peer_pool.h"

namespace kvdepot::daemon {

using cluster::Member;
using cluster::Topology;
using cluster_peer::PeerRequest;
using cluster_peer::PeerResponse;
using protocol::Op;
using protocol::Tier;

struct ClusterRouter::Counters {
  std::array<std::atomic<std::uint64_t>, protocol::kMaxOp + 1> forwarded{};
  std::array<std::atomic<std::uint64_t>, protocol::kMaxOp + 1> forward_errors{};
  std::atomic<std::uint64_t> handoff_hits{0}, handoff_bytes{0}, replica_writes{0};
};

// A key's owners as this node sees them, as addresses (the views may be replaced meanwhile).
struct ClusterRouter::Placement {
  bool local_only = false;            // no view yet: this node answers alone, as a single daemon
  bool self_owns = false;             // this node is an owner (and not fenced)
  std::vector<std::string> others;    // the other current owners' native addresses, best first
  std::vector<std::string> previous;  // previous owners that are no longer owners (hand-off)
};

namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

ClusterRouter::Placement ClusterRouter::Place(std::string_view key,
                                              std::string_view placement_key) const {
  const cluster::TopologySource& source = source_;
  Placement p;
  const std::shared_ptr<const Topology> current = source.Current();
  if (current->empty()) {
    p.local_only = !source.Fenced();
    return p;
  }
  const std::string self = source.SelfId();
  const bool fenced = source.Fenced();
  // An explicit placement key follows the same hash-tag rule as a key, so that a group's anchor
  // chunk is placed alike with or without one.
  const std::string_view placed_by =
      cluster::PlacementKey(placement_key.empty() ? key : placement_key);
  std::vector<std::string> current_ids;
  for (const Member* m : current->Owners(placed_by)) {
    current_ids.push_back(m->id);
    if (m->id == self) {
      p.self_owns = !fenced;
    } else {
      p.others.push_back(m->native_addr);
    }
  }
  if (const std::shared_ptr<const Topology> previous = source.Previous(); previous != nullptr) {
    for (const Member* m : previous->Owners(placed_by)) {
      if (m->id == self || Contains(current_ids, m->id)) continue;
      p.previous.push_back(m->native_addr);
    }
  }
  return p;
}

namespace {

StatusCode FirstItemStatus(const Result<PeerResponse>& r) {
  if (!r.ok()) return r.status().code();
  if (r->status != StatusCode::kOk) return r->status;
  auto codes = protocol::DecodeStatusList(r->body);
  if (!codes.ok() || codes->size() != 1) return StatusCode::kCorruption;
  return (*codes)[0];
}

nlohmann::json MembersJson(const Topology& t) {
  nlohmann::json members = nlohmann::json::array();
  for (const Member& m : t.members()) {
    members.push_back({{"id", m.id},
                       {"addr", m.native_addr},
                       {"lm_addr", m.lm_addr},
                       {"metrics_addr", m.metrics_addr},
                       {"incarnation", m.incarnation},
                       {"capacity_bytes", m.capacity_bytes},
                       {"used_bytes", m.used_bytes},
                       {"state", "up"}});
  }
  return members;
}

}  // namespace

ClusterRouter::ClusterRouter(Store& store, const cluster::TopologySource& source,
                             ClusterRouterOptions options)
    : store_(store),
      source_(source),
      options_(std::move(options)),
      counters_(std::make_shared<Counters>()) {
  cluster_peer::PeerPoolOptions o;
  o.token = options_.peer_token;
  o.timeout = options_.peer_timeout;
  o.connections_per_peer = options_.connections_per_peer;
  o.max_queued_per_peer = options_.max_queued_per_peer;
  o.limits = options_.limits;
  o.tls = options_.peer_tls;
  o.tls_trust = options_.peer_tls_trust;
  peers_ = std::make_unique<cluster_peer::PeerPool>(std::move(o));
}

// The pool's last callbacks may call back into the router (the next peer of a GET): it is shut
// down while every member is still alive.
ClusterRouter::~ClusterRouter() {
  peers_->Shutdown();
}

// ---- GET ----------------------------------------------------------------------------------------

struct ClusterRouter::GetPlan {
  std::string key;
  Store::GetCallback done;
  Placement placement;
  std::size_t next = 0;  // into others, then previous
};

void ClusterRouter::Get(std::string_view key, std::string_view placement_key,
                        Store::GetCallback done) {
  auto plan = std::make_shared<GetPlan>();
  plan->key = std::string(key);
  plan->done = std::move(done);
  plan->placement = Place(key, placement_key);
  // Held here (an owner's copy, or any copy): answered without a hop.
  store_.Get(
      key,
      [this, plan](Result<Found> found) {
        if (found.ok() || found.status().code() != StatusCode::kNotFound) {
          return plan->done(std::move(found));
        }
        AskNextForGet(plan);
      },
      Route::kLocal);
}

void ClusterRouter::AskNextForGet(const std::shared_ptr<GetPlan>& plan) {
  const Placement& p = plan->placement;
  if (plan->next >= p.others.size() + p.previous.size()) {
    return plan->done(NotFound("key not found"));
  }
  const bool handoff = plan->next >= p.others.size();
  const std::string& address =
      handoff ? p.previous[plan->next - p.others.size()] : p.others[plan->next];
  ++plan->next;
  auto body = protocol::EncodeKeyList(std::span<const std::string>(&plan->key, 1));
  if (!body.ok()) return plan->done(body.status());
  PeerRequest request;
  request.op = Op::kGet;
  request.body = std::move(*body);
  request.allocate = [this, key = plan->key](std::size_t size) {
    return store_.Allocate(key, size);
  };
  ++counters_->forwarded[static_cast<std::size_t>(Op::kGet)];
  peers_->Call(address, std::move(request), [this, plan, handoff](Result<PeerResponse> r) {
    if (!r.ok()) ++counters_->forward_errors[static_cast<std::size_t>(Op::kGet)];
    if (!r.ok() || r->status != StatusCode::kOk || r->value == nullptr) {
      return AskNextForGet(plan);  // a miss, or a peer that cannot answer: the next one
    }
    if (handoff) CopyToOwners(plan->key, plan->placement, r->value);
    plan->done(Found{std::move(r->value), r->tier});
  });
}

// A hand-off hit: the chunk found at a previous owner is stored at the current owners.
void ClusterRouter::CopyToOwners(const std::string& key, const Placement& placement,
                                 const ValueRef& value) {
  ++counters_->handoff_hits;
  counters_->handoff_bytes += value->bytes().size();
  if (placement.self_owns)
    store_.Put(
        key, value, [](Status) {}, Route::kLocal);
  for (const std::string& address : placement.others) SendPut(address, key, value, nullptr);
}

// ---- PUT ----------------------------------------------------------------------------------------

void ClusterRouter::SendPut(const std::string& address, const std::string& key,
                            const ValueRef& value, std::function<void(StatusCode)> done) {
  auto head = protocol::EncodeSinglePutHead(key, value->bytes().size());
  if (!head.ok()) {
    if (done) done(head.status().code());
    return;
  }
  PeerRequest request;
  request.op = Op::kPut;
  request.body = std::move(*head);
  request.value = value;
  ++counters_->forwarded[static_cast<std::size_t>(Op::kPut)];
  peers_->Call(address, std::move(request), [this, done](Result<PeerResponse> r) {
    const StatusCode code = FirstItemStatus(r);
    if (code != StatusCode::kOk) ++counters_->forward_errors[static_cast<std::size_t>(Op::kPut)];
    if (done) done(code);
  });
}

namespace {
// The answers of a request sent to several nodes; the last one calls `finish`.
template <typename T>
struct Fanout {
  std::mutex mu;
  std::size_t pending = 0;
  T result{};
};
}  // namespace

void ClusterRouter::Put(std::string_view key, std::string_view placement_key, ValueRef value,
                        Store::PutCallback done) {
  const Placement p = Place(key, placement_key);
  if (p.local_only) return store_.Put(key, std::move(value), std::move(done), Route::kLocal);
  if (!p.self_owns && p.others.empty()) {
    return done(
        Unavailable("put: this node is fenced (its cluster lease lapsed, or etcd was "
                    "unreachable since it started: see /healthz) and owns no keys until it has "
                    "registered; send the write to another member"));
  }
  struct Outcome {
    bool self_owns = false;
    Status local = Status::Ok();
    bool any_ok = false;
    StatusCode first_error = StatusCode::kOk;
  };
  auto state = std::make_shared<Fanout<Outcome>>();
  state->pending = p.others.size() + (p.self_owns ? 1 : 0);
  state->result.self_owns = p.self_owns;
  auto finish_one = [state, done = std::move(done)](const Status* local, StatusCode peer) {
    Outcome o;
    {
      std::lock_guard lock(state->mu);
      if (local != nullptr) {
        state->result.local = *local;
      } else if (peer == StatusCode::kOk) {
        state->result.any_ok = true;
      } else if (state->result.first_error == StatusCode::kOk) {
        state->result.first_error = peer;
      }
      if (--state->pending != 0) return;
      o = state->result;
    }
    if (o.self_owns) return done(o.local);
    if (o.any_ok) return done(Status::Ok());
    done(Status(o.first_error,
                "put: no owner of the key stored it (first error from a peer; "
                "see kvdepot_cluster_forward_errors_total)"));
  };
  const std::string k(key);
  for (const std::string& address : p.others) {
    if (p.self_owns) ++counters_->replica_writes;
    SendPut(address, k, value, [finish_one](StatusCode code) { finish_one(nullptr, code); });
  }
  if (p.self_owns) {
    store_.Put(
        key, std::move(value), [finish_one](Status s) { finish_one(&s, StatusCode::kOk); },
        Route::kLocal);
  }
}

// ---- DELETE -------------------------------------------------------------------------------------

void ClusterRouter::Delete(std::string_view key, std::string_view placement_key,
                           std::function<void(bool found)> done) {
  const Placement p = Place(key, placement_key);
  const bool here = store_.Erase(key);
  std::vector<std::string> targets = p.others;
  targets.insert(targets.end(), p.previous.begin(), p.previous.end());
  if (targets.empty()) return done(here);
  auto state = std::make_shared<Fanout<bool>>();
  state->pending = targets.size();
  state->result = here;
  auto body = protocol::EncodeKeyList(std::span<const std::string>(std::vector{std::string(key)}));
  if (!body.ok()) return done(here);
  for (const std::string& address : targets) {
    PeerRequest request;
    request.op = Op::kDelete;
    request.body = *body;
    ++counters_->forwarded[static_cast<std::size_t>(Op::kDelete)];
    peers_->Call(address, std::move(request), [this, state, done](Result<PeerResponse> r) {
      const StatusCode code = FirstItemStatus(r);
      if (code != StatusCode::kOk && code != StatusCode::kNotFound) {
        ++counters_->forward_errors[static_cast<std::size_t>(Op::kDelete)];
      }
      bool found = false;
      {
        std::lock_guard lock(state->mu);
        state->result = state->result || code == StatusCode::kOk;
        if (--state->pending != 0) return;
        found = state->result;
      }
      done(found);
    });
  }
}

// ---- LOOKUP -------------------------------------------------------------------------------------

// The keys of one LOOKUP that this node neither holds nor owns, asked of peers in rounds. Round
// one asks each key's first other owner (and, during a hand-off, its first previous owner), every
// peer at once. A peer that cannot answer (down, hung past the timeout, a garbled reply) passes
// its keys on to their next owner in another round, so that with cluster.replicas > 1 an owner
// that died before its lease expired costs a round trip, not a miss.
struct ClusterRouter::LocatePlan {
  struct Ask {
    std::size_t index;  // into the LOOKUP's keys
    bool owner;         // asked as a current owner (passed on when it fails), not a previous one
  };
  using Round = std::map<std::string, std::vector<Ask>>;  // by peer address

  std::mutex mu;
  std::vector<Tier> tiers;
  std::vector<std::string> keys;         // the keys asked of peers (the others stay empty)
  std::vector<Placement> placements;     // by index, for the keys asked of peers
  std::vector<std::size_t> owner_asked;  // by index: which of placements[i].others was asked
  Round round, next_round;
  std::size_t pending = 0;  // peers of the round in flight
  std::function<void(std::vector<Tier>)> done;
};

void ClusterRouter::LocateMany(std::span<const std::string_view> keys,
                               std::span<const std::string_view> placement_keys,
                               std::function<void(std::vector<Tier>)> done) {
  auto plan = std::make_shared<LocatePlan>();
  plan->tiers.assign(keys.size(), Tier::kNone);
  plan->done = std::move(done);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    plan->tiers[i] = store_.Locate(keys[i]);
    if (plan->tiers[i] != Tier::kNone) continue;
    Placement p =
        Place(keys[i], i < placement_keys.size() ? placement_keys[i] : std::string_view());
    const bool ask_owner = !p.self_owns && !p.others.empty();
    if (!ask_owner && p.previous.empty()) continue;
    if (plan->keys.empty()) {
      plan->keys.resize(keys.size());
      plan->placements.resize(keys.size());
      plan->owner_asked.assign(keys.size(), 0);
    }
    plan->keys[i] = std::string(keys[i]);
    if (ask_owner) plan->round[p.others.front()].push_back({i, true});
    if (!p.previous.empty()) plan->round[p.previous.front()].push_back({i, false});
    plan->placements[i] = std::move(p);
  }
  if (plan->round.empty()) return plan->done(std::move(plan->tiers));
  AskLocateRound(plan);
}

void ClusterRouter::AskLocateRound(const std::shared_ptr<LocatePlan>& plan) {
  LocatePlan::Round round;
  {
    std::lock_guard lock(plan->mu);
    round = std::move(plan->round);
    plan->round.clear();
    plan->pending = round.size();  // before the first call: an answer may come at once
  }
  for (auto& [address, asks] : round) {
    std::vector<std::string> subset;
    subset.reserve(asks.size());
    for (const LocatePlan::Ask& a : asks) subset.push_back(plan->keys[a.index]);
    auto body = protocol::EncodeKeyList(subset);
    PeerRequest request;
    request.op = Op::kLookup;
    if (body.ok()) request.body = std::move(*body);
    ++counters_->forwarded[static_cast<std::size_t>(Op::kLookup)];
    peers_->Call(address, std::move(request),
                 [this, plan, asks = std::move(asks)](Result<PeerResponse> r) {
                   Result<protocol::LookupResult> result =
                       !r.ok()                        ? Result<protocol::LookupResult>(r.status())
                       : r->status != StatusCode::kOk ? Status(r->status, "peer lookup failed")
                                                      : protocol::DecodeLookupResult(r->body);
                   const bool usable = result.ok() && result->tiers.size() == asks.size();
                   if (!usable) ++counters_->forward_errors[static_cast<std::size_t>(Op::kLookup)];
                   bool another_round = false;
                   std::vector<Tier> out;
                   {
                     std::lock_guard lock(plan->mu);
                     for (std::size_t j = 0; j < asks.size(); ++j) {
                       const LocatePlan::Ask& a = asks[j];
                       Tier& t = plan->tiers[a.index];
                       if (usable) {
                         if (t == Tier::kNone) t = result->tiers[j];
                         continue;
                       }
                       if (!a.owner) continue;  // a previous owner has no stand-in
                       const std::vector<std::string>& owners = plan->placements[a.index].others;
                       const std::size_t next = ++plan->owner_asked[a.index];
                       if (next < owners.size()) plan->next_round[owners[next]].push_back(a);
                     }
                     if (--plan->pending != 0) return;
                     // Keys found meanwhile (at a previous owner) need no other round.
                     for (auto it = plan->next_round.begin(); it != plan->next_round.end();) {
                       std::erase_if(it->second, [&](const LocatePlan::Ask& a) {
                         return plan->tiers[a.index] != Tier::kNone;
                       });
                       it = it->second.empty() ? plan->next_round.erase(it) : std::next(it);
                     }
                     another_round = !plan->next_round.empty();
                     if (another_round) {
                       plan->round = std::move(plan->next_round);
                       plan->next_round.clear();
                     } else {
                       out = std::move(plan->tiers);
                     }
                   }
                   // A peer that failed, with no owner left to ask, counts as a miss for its keys.
                   if (another_round) return AskLocateRound(plan);
                   plan->done(std::move(out));
                 });
  }
}

// ---- CLUSTER_INFO and counters ------------------------------------------------------------------

std::string ClusterRouter::InfoJson() const {
  const std::shared_ptr<const Topology> current = source_.Current();
  nlohmann::json j;
  j["clustered"] = true;
  j["self"] = source_.SelfId();
  j["fenced"] = source_.Fenced();
  j["revision"] = current->revision();
  j["placement"] = {{"replicas", current->options().replicas},
                    {"group_chunks", current->options().group_chunks}};
  j["members"] = MembersJson(*current);
  if (const auto previous = source_.Previous(); previous != nullptr) {
    j["previous"] = {{"revision", previous->revision()}, {"members", MembersJson(*previous)}};
  } else {
    j["previous"] = nullptr;
  }
  return j.dump();
}

std::string NotClusteredInfoJson() {
  nlohmann::json j;
  j["clustered"] = false;
  j["self"] = "";
  j["fenced"] = false;
  j["revision"] = 0;
  j["placement"] = {{"replicas", 1}, {"group_chunks", 1}};
  j["members"] = nlohmann::json::array();
  j["previous"] = nullptr;
  return j.dump();
}

ClusterRouterStats ClusterRouter::stats() const {
  ClusterRouterStats s;
  for (std::size_t i = 0; i < s.forwarded.size(); ++i) {
    s.forwarded[i] = counters_->forwarded[i].load();
    s.forward_errors[i] = counters_->forward_errors[i].load();
  }
  s.handoff_hits = counters_->handoff_hits.load();
  s.handoff_bytes = counters_->handoff_bytes.load();
  s.replica_writes = counters_->replica_writes.load();
  return s;
}

}  // namespace kvdepot::daemon
