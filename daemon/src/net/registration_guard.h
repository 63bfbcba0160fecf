// RegistrationGuard: how a listener's connection takes itself off the listener's list of live
// connections (server.cc, lm_server.cc).
#pragma once

namespace kvdepot::daemon {

// Calls owner->Unregister(it) when destroyed. A connection holds one as its FIRST data member, so
// that it runs after every other member is destroyed — the socket and timers, which belong to the
// listener's io_contexts. Owner::Unregister must make its open-connection count drop as its last
// access to the owner: a listener stopping waits for that count to reach zero and may then be
// destroyed, so nothing of a connection may touch it afterwards (last references to a connection
// are dropped on other threads too, e.g. the SSD tier's completion thread).
template <typename Owner>
class RegistrationGuard {
 public:
  RegistrationGuard() = default;
  RegistrationGuard(const RegistrationGuard&) = delete;
  RegistrationGuard& operator=(const RegistrationGuard&) = delete;
  ~RegistrationGuard() {
    if (owner_ != nullptr) owner_->Unregister(it_);
  }
  void Set(Owner* owner, typename Owner::Registration it) {
    owner_ = owner;
    it_ = it;
  }

 private:
  Owner* owner_ = nullptr;
  typename Owner::Registration it_{};
};

}  // namespace kvdepot::daemon
