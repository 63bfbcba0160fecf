#include "kvdepot/daemon/store.h"

#include <utility>

namespace kvdepot::daemon {

Store::Store(HostTier& host, SsdTier* ssd) : host_(host), ssd_(ssd) {}
Store::~Store() = default;

Result<std::shared_ptr<Value>> Store::Allocate(std::string_view key, std::size_t size) {
  return host_.Allocate(key, size);
}

void Store::Put(std::string_view key, ValueRef value, PutCallback done) {
  host_.Insert(key, std::move(value));
  done(Status::Ok());
}

void Store::Get(std::string_view key, GetCallback done) {
  if (ValueRef v = host_.Get(key)) return done(Found{std::move(v), protocol::Tier::kHost});
  done(NotFound("key not found"));
}

protocol::Tier Store::Locate(std::string_view key) const {
  return host_.Contains(key) ? protocol::Tier::kHost : protocol::Tier::kNone;
}

bool Store::Erase(std::string_view key) { return host_.Erase(key); }

protocol::ScanResult Store::Scan(std::string_view prefix, std::string_view cursor,
                                 std::uint32_t limit, protocol::Tier tier) const {
  if (tier != protocol::Tier::kNone && tier != protocol::Tier::kHost) return {};
  return host_.Scan(prefix, cursor, limit);
}

}  // namespace kvdepot::daemon
