#include "kvdepot/daemon/store.h"

#include <algorithm>
#include <utility>

#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/ssd_tier.h"

namespace kvdepot::daemon {

Store::Store(HostTier& host, SsdTier* ssd) : host_(host), ssd_(ssd) {
  InstallEvictionListener();
}

Store::~Store() {
  if (ssd_ != nullptr || events_ != nullptr) host_.SetEvictionListener(nullptr);
}

void Store::SetEvents(KvEventPublisher* events) {
  events_ = events;
  InstallEvictionListener();
}

void Store::InstallEvictionListener() {
  if (ssd_ == nullptr && events_ == nullptr) return;
  host_.SetEvictionListener(
      [ssd = ssd_, events = events_](std::string_view key, const ValueRef& value) {
        if (ssd != nullptr && !ssd->Demote(key, value)) return false;
        if (events != nullptr) events->Removed(key, EventMedium::kCpu);
        return true;
      });
}

Result<std::shared_ptr<Value>> Store::Allocate(std::string_view key, std::size_t size) {
  return host_.Allocate(key, size);
}

void Store::Put(std::string_view key, ValueRef value, PutCallback done, Route route,
                std::string_view placement_key) {
  if (router_ != nullptr && route == Route::kCluster) {
    return router_->Put(key, placement_key, std::move(value), std::move(done));
  }
  // The GPU copy is stale now.
  if (device_ != nullptr && device_->Erase(key) && events_ != nullptr) {
    events_->Removed(key, EventMedium::kGpu);
  }
  if (ssd_ == nullptr) {
    host_.Insert(key, std::move(value));
    if (events_ != nullptr) events_->Stored(key, EventMedium::kCpu);
    return done(Status::Ok());
  }
  const SsdTierOptions& o = ssd_->options();
  host_.Insert(key, value);
  if (events_ != nullptr) events_->Stored(key, EventMedium::kCpu);
  if (o.durability == SsdDurability::kSync) {
    // The committed write replaces the index entry atomically: until it is acknowledged, a crash
    // keeps the previous acknowledged value.
    return ssd_->Write(key, std::move(value), std::move(done));
  }
  // An older SSD copy is stale now, and so is any older write still queued for the key: a GET
  // that misses the host before the new value reaches the SSD must miss, not read the old one.
  ssd_->Erase(key);
  if (o.write_policy == SsdWritePolicy::kWriteBack) {
    return done(Status::Ok());  // the new value is demoted when evicted
  }
  ssd_->Write(key, std::move(value), nullptr);
  done(Status::Ok());
}

void Store::Get(std::string_view key, GetCallback done, Route route,
                std::string_view placement_key) {
  if (router_ != nullptr && route == Route::kCluster) {
    return router_->Get(key, placement_key, std::move(done));
  }
  if (ValueRef v = host_.Get(key)) {
    if (device_ != nullptr) device_->OnHostHit(key, v);
    return done(Found{std::move(v), protocol::Tier::kHost});
  }
  if (device_ != nullptr && device_->Contains(key)) {
    auto allocate = [this, k = std::string(key)](std::size_t size) {
      return host_.Allocate(k, size);
    };
    auto fetched = [this, k = std::string(key), done](Result<ValueRef> value) {
      if (!value.ok()) return done(value.status());
      // Back in the host tier; a newer PUT wins.
      if (host_.InsertIfAbsent(k, *value) && events_ != nullptr) {
        events_->Stored(k, EventMedium::kCpu);
      }
      done(Found{std::move(*value), protocol::Tier::kGpu});
    };
    if (device_->FetchToHost(key, std::move(allocate), std::move(fetched))) return;
  }
  if (ssd_ == nullptr) return done(NotFound("key not found"));
  ssd_->Read(
      key, [this, k = std::string(key)](std::size_t size) { return host_.Allocate(k, size); },
      [this, k = std::string(key), done = std::move(done)](Result<ValueRef> value) {
        if (!value.ok()) return done(value.status());
        // A promotion never replaces a value PUT while the read was in flight.
        if (ssd_->ShouldPromote(k) && host_.InsertIfAbsent(k, *value)) {
          ssd_->CountPromotion();
          if (events_ != nullptr) events_->Stored(k, EventMedium::kCpu);
        }
        done(Found{std::move(*value), protocol::Tier::kSsd});
      });
}

protocol::Tier Store::Locate(std::string_view key) const {
  if (device_ != nullptr && device_->Contains(key)) return protocol::Tier::kGpu;
  if (host_.Contains(key)) return protocol::Tier::kHost;
  if (ssd_ != nullptr && ssd_->Contains(key)) return protocol::Tier::kSsd;
  return protocol::Tier::kNone;
}

void Store::LocateMany(std::span<const std::string_view> keys, Route route,
                       std::function<void(std::vector<protocol::Tier>)> done,
                       std::span<const std::string_view> placement_keys) {
  if (router_ != nullptr && route == Route::kCluster) {
    return router_->LocateMany(keys, placement_keys, std::move(done));
  }
  std::vector<protocol::Tier> tiers;
  tiers.reserve(keys.size());
  for (std::string_view key : keys) tiers.push_back(Locate(key));
  done(std::move(tiers));
}

void Store::Delete(std::string_view key, Route route, std::function<void(bool found)> done,
                   std::string_view placement_key) {
  if (router_ != nullptr && route == Route::kCluster) {
    return router_->Delete(key, placement_key, std::move(done));
  }
  done(Erase(key));
}

bool Store::Erase(std::string_view key) {
  const bool in_gpu = device_ != nullptr && device_->Erase(key);
  const bool in_host = host_.Erase(key);
  if (events_ != nullptr) {
    if (in_gpu) events_->Removed(key, EventMedium::kGpu);
    if (in_host) events_->Removed(key, EventMedium::kCpu);
  }
  const bool in_ssd = ssd_ != nullptr && ssd_->Erase(key);  // announced by the SSD tier
  return in_gpu || in_host || in_ssd;
}

protocol::ScanResult Store::Scan(std::string_view prefix, std::string_view cursor,
                                 std::uint32_t limit, protocol::Tier tier) const {
  using protocol::Tier;
  const bool want_host = tier == Tier::kNone || tier == Tier::kHost;
  const bool want_ssd = ssd_ != nullptr && (tier == Tier::kNone || tier == Tier::kSsd);
  protocol::ScanResult host =
      want_host ? host_.Scan(prefix, cursor, limit) : protocol::ScanResult{};
  if (!want_ssd) return host;
  protocol::ScanResult ssd = ssd_->Scan(prefix, cursor, limit);
  if (!want_host) return ssd;
  // Merge the two sorted listings; a key in both is listed once, as a host entry.
  protocol::ScanResult out;
  auto h = host.entries.begin(), s = ssd.entries.begin();
  while (out.entries.size() < limit && (h != host.entries.end() || s != ssd.entries.end())) {
    if (s == ssd.entries.end() || (h != host.entries.end() && h->key <= s->key)) {
      if (s != ssd.entries.end() && s->key == h->key) ++s;
      out.entries.push_back(std::move(*h++));
    } else {
      out.entries.push_back(std::move(*s++));
    }
  }
  // More may follow when either listing was cut at `limit` or entries were left over here.
  const bool more = !host.next_cursor.empty() || !ssd.next_cursor.empty() ||
                    h != host.entries.end() || s != ssd.entries.end();
  if (more && !out.entries.empty()) out.next_cursor = out.entries.back().key;
  return out;
}

}  // namespace kvdepot::daemon
