// resp:// command handlers for values and keys (docs/resp.md): GET, MGET, SET, MSET, EXISTS,
// DEL / UNLINK, STRLEN, with the key, scope and value checks they share with the transport's
// large-bulk path (resp_connection.h).
#include <algorithm>
#include <cstring>

#include "kvdepot/daemon/log.h"
#include "resp/resp_connection.h"

namespace kvdepot::daemon::resp {

// ---- keys and scopes ------------------------------------------------------------------------
std::string RespConnection::KeyWriteError(std::string_view key) const {
  const std::uint32_t max = server_.options().max_key_bytes;
  if (key.empty() || key.size() > max) {
    return "ERR key of " + std::to_string(key.size()) + " bytes: kvdepot keys are 1 to " +
           std::to_string(max) + " bytes (limits.max_key_bytes)";
  }
  return KeyScopeError(key);
}
std::string RespConnection::KeyScopeError(std::string_view key) const {
  if (scope_->AllowsKey(key)) return {};
  return "NOPERM this token may not use the key (its namespace is outside the token's scope; "
         "docs/security.md)";
}
// The first scope error among `keys` (args[first], args[first + step], ...), or empty.
std::string RespConnection::KeysScopeError(const Args& args, std::size_t first,
                                           std::size_t step) const {
  if (scope_->all) return {};
  for (std::size_t i = first; i < args.size(); i += step) {
    if (std::string e = KeyScopeError(args[i]); !e.empty()) return e;
  }
  return {};
}

std::string RespConnection::OversizedValue(std::uint64_t size) {
  ++counters_->values_oversized;
  const std::uint64_t max = server_.options().max_value_bytes;
  if (server_.oversize_log().Allow(std::chrono::seconds(10))) {
    Log(LogLevel::kWarn, "resp:// refused a value over limits.max_value_bytes",
        {{"bytes", std::to_string(size)}, {"max_value_bytes", std::to_string(max)}});
  }
  return "ERR value of " + std::to_string(size) + " bytes is over limits.max_value_bytes (" +
         std::to_string(max) + "): not stored; raise limits.max_value_bytes " +
         "(--limits-max-value-bytes) to store larger values";
}
std::string RespConnection::OomError(const Status& s) {
  return "OOM value not stored: " + s.message();
}

// A value for `key` holding `bytes`: the large bulk read for args[index], else a copy of the
// inline argument. An error reply text when it cannot be had.
Result<ValueRef> RespConnection::TakeValue(std::string_view key, const Args& args,
                                           std::size_t index) {
  for (auto& [i, v] : large_values_) {
    if (i == index && v) return ValueRef(std::move(v));
  }
  const std::string& bytes = args[index];
  if (bytes.size() > server_.options().max_value_bytes) {
    return InvalidArgument(OversizedValue(bytes.size()));
  }
  auto value = server_.store().Allocate(key, bytes.size());
  if (!value.ok()) return InvalidArgument(OomError(value.status()));
  if (!bytes.empty()) std::memcpy((*value)->mutable_bytes().data(), bytes.data(), bytes.size());
  return ValueRef(std::move(*value));
}

void RespConnection::Get(const Args& args) {
  if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
  GetValues({args[1]}, [this](std::vector<std::optional<Result<Found>>>& r) { ReplyFound(*r[0]); });
}

// A GET's reply: the value, nil when absent, an error when the read failed.
void RespConnection::ReplyFound(Result<Found>& found) {
  if (found.ok()) return ReplyValue(std::move(found->value));
  if (found.status().code() == StatusCode::kNotFound) return ReplyNull();
  ReplyError("ERR read failed: " + found.status().message());
}

void RespConnection::Mget(const Args& args) {
  if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
  GetValues(Args(args.begin() + 1, args.end()),
            [this](std::vector<std::optional<Result<Found>>>& r) {
              resp::AppendArrayHeader(Out(), r.size());
              for (auto& found : r) {
                if (found->ok()) {
                  ReplyValue(std::move((*found)->value));
                } else {
                  ReplyNull();  // absent, or unreadable: MGET has no per-key error
                }
              }
            });
}

// SET key value [NX | XX] [GET] (EX/PX/EXAT/PXAT/KEEPTTL refused: kvdepot has no expiry)
void RespConnection::Set(const Args& args) {
  bool nx = false, xx = false, get = false;
  for (std::size_t i = 3; i < args.size(); ++i) {
    const std::string& opt = args[i];
    if (EqualsIgnoreCase(opt, "nx")) {
      nx = true;
    } else if (EqualsIgnoreCase(opt, "xx")) {
      xx = true;
    } else if (EqualsIgnoreCase(opt, "get")) {
      get = true;
    } else if (EqualsIgnoreCase(opt, "ex") || EqualsIgnoreCase(opt, "px") ||
               EqualsIgnoreCase(opt, "exat") || EqualsIgnoreCase(opt, "pxat") ||
               EqualsIgnoreCase(opt, "keepttl")) {
      large_values_.clear();
      return ReplyError("ERR SET " + resp::ToLower(opt) +
                        ": kvdepot has no key expiry, so EX, PX, EXAT, PXAT and KEEPTTL are "
                        "refused; drop the option (values stay until evicted or deleted)");
    } else {
      large_values_.clear();
      return ReplyError("ERR syntax error");
    }
  }
  if (nx && xx) {
    large_values_.clear();
    return ReplyError("ERR syntax error");
  }
  const std::string& key = args[1];
  if (std::string e = KeyWriteError(key); !e.empty()) {
    large_values_.clear();
    return ReplyError(e);
  }
  auto value = TakeValue(key, args, 2);
  large_values_.clear();
  if (!value.ok()) return ReplyError(value.status().message());
  auto store = [this, key, nx, xx, get, value = std::move(*value)](
                   bool exists, std::optional<Result<Found>> old) mutable {
    auto reply_old = [this, get, old = std::move(old)]() mutable {
      if (!get) return ReplyOk();
      ReplyFound(*old);
    };
    if ((nx && exists) || (xx && !exists)) {
      if (!get) return ReplyNull();
      return reply_old();
    }
    PutValues({{key, std::move(value)}}, [this, reply_old = std::move(reply_old)](
                                             std::vector<std::optional<Status>>& r) mutable {
      if (!r[0]->ok()) {
        return ReplyError("ERR durable write failed (the value is served from memory): " +
                          r[0]->message());
      }
      reply_old();
    });
  };
  if (!get) {
    if (!nx && !xx) return store(false, std::nullopt);
    // In a cluster the key may live at its owners only: asked there (one round), as EXISTS does.
    return LocateValues(
        {key}, [store = std::move(store)](const std::vector<protocol::Tier>& tiers) mutable {
          store(tiers[0] != protocol::Tier::kNone, std::nullopt);
        });
  }
  GetValues({key},
            [store = std::move(store)](std::vector<std::optional<Result<Found>>>& r) mutable {
              const bool exists = r[0]->ok();
              store(exists, std::move(r[0]));
            });
}

void RespConnection::Mset(const Args& args) {
  if (args.size() % 2 == 0) {
    large_values_.clear();
    return ReplyError("ERR wrong number of arguments for 'mset' command");
  }
  std::vector<std::pair<std::string, ValueRef>> items;
  items.reserve(args.size() / 2);
  for (std::size_t i = 1; i < args.size(); i += 2) {
    if (std::string e = KeyWriteError(args[i]); !e.empty()) {
      large_values_.clear();
      return ReplyError(e);
    }
  }
  for (std::size_t i = 1; i < args.size(); i += 2) {
    auto value = TakeValue(args[i], args, i + 1);
    if (!value.ok()) {
      large_values_.clear();
      return ReplyError(value.status().message());  // nothing stored
    }
    items.emplace_back(args[i], std::move(*value));
  }
  large_values_.clear();
  PutValues(std::move(items), [this](std::vector<std::optional<Status>>& r) {
    for (const auto& s : r) {
      if (!s->ok()) {
        return ReplyError("ERR durable write failed (the value is served from memory): " +
                          s->message());
      }
    }
    ReplyOk();
  });
}

void RespConnection::Exists(const Args& args) {
  if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
  LocateValues(Args(args.begin() + 1, args.end()), [this](const std::vector<protocol::Tier>& t) {
    resp::AppendInteger(Out(), std::count_if(t.begin(), t.end(), [](protocol::Tier x) {
                          return x != protocol::Tier::kNone;
                        }));
  });
}

void RespConnection::Del(const Args& args) {
  if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
  DeleteValues(Args(args.begin() + 1, args.end()),
               [this](std::int64_t found) { resp::AppendInteger(Out(), found); });
}

void RespConnection::Strlen(const Args& args) {
  if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
  GetValues({args[1]}, [this](std::vector<std::optional<Result<Found>>>& r) {
    const auto& found = *r[0];
    resp::AppendInteger(Out(),
                        found.ok() ? static_cast<std::int64_t>(found->value->bytes().size()) : 0);
  });
}

// Keys after `resume_after` this connection's scope reaches, at most `limit`, in byte order; the

}  // namespace kvdepot::daemon::resp
