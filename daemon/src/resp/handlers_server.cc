// resp:// command dispatch and the connection and server commands (docs/resp.md): PING, ECHO,
// QUIT, SELECT, AUTH, HELLO, INFO, COMMAND, CONFIG GET, CLIENT.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "resp/resp_commands.h"
#include "resp/resp_connection.h"

namespace kvdepot::daemon::resp {
namespace {

// Emulated Redis version (HELLO, INFO): the Redis 7.0 commands and reply layouts served here.
constexpr const char* kRedisVersion = "7.0.0";

constexpr const char* kBadClientName =
    "ERR Client names cannot contain spaces, newlines or special characters.";
bool ValidClientName(std::string_view name) {
  return std::all_of(name.begin(), name.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

std::string HumanBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "K", "M", "G", "T"};
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%s", v, kUnits[unit]);
  return buf;
}

}  // namespace

// ---- dispatch -------------------------------------------------------------------------------
void RespConnection::Execute() {
  ++counters_->commands;
  const Args& args = parser_.args();
  std::string refused = std::exchange(command_error_, {});
  if (!refused.empty()) {
    large_values_.clear();
    return ReplyError(refused);
  }
  const resp::CommandSpec* spec = resp::FindCommand(args[0]);
  if (spec == nullptr) {
    large_values_.clear();
    return ReplyError(UnknownCommand(args));
  }
  if (!resp::ArityAllows(*spec, args.size())) {
    large_values_.clear();
    return ReplyError("ERR wrong number of arguments for '" + std::string(spec->name) +
                      "' command");
  }
  if (scope_ == nullptr && spec->id != CommandId::kAuth && spec->id != CommandId::kHello &&
      spec->id != CommandId::kQuit) {
    ++counters_->auth_failures;
    large_values_.clear();
    return ReplyError("NOAUTH Authentication required.");
  }
  switch (spec->id) {
    case CommandId::kPing: return Ping(args);
    case CommandId::kEcho: return resp::AppendBulk(Out(), args[1]);
    case CommandId::kQuit:
      ReplyOk();
      close_after_write_ = true;
      return;
    case CommandId::kSelect:
      if (args[1] == "0") return ReplyOk();
      return ReplyError("ERR DB index is out of range (kvdepot has one database, 0)");
    case CommandId::kAuth: return Auth(args);
    case CommandId::kHello: return Hello(args);
    case CommandId::kGet: return Get(args);
    case CommandId::kMget: return Mget(args);
    case CommandId::kSet: return Set(args);
    case CommandId::kMset: return Mset(args);
    case CommandId::kExists: return Exists(args);
    case CommandId::kDel:
    case CommandId::kUnlink: return Del(args);
    case CommandId::kType: return Type(args);
    case CommandId::kStrlen: return Strlen(args);
    case CommandId::kScan: return Scan(args);
    case CommandId::kDbsize:
      return resp::AppendInteger(Out(), static_cast<std::int64_t>(CountKeys()));
    case CommandId::kInfo: return Info(args);
    case CommandId::kCommand: return Command(args);
    case CommandId::kConfig: return Config(args);
    case CommandId::kClient: return Client(args);
  }
}

// Redis's wording: "unknown command 'X', with args beginning with: 'a' 'b' ".
std::string RespConnection::UnknownCommand(const Args& args) {
  std::string list;
  for (std::size_t i = 1; i < args.size() && list.size() < 128; ++i) {
    list += "'" + args[i].substr(0, 128 - list.size()) + "' ";
  }
  return "ERR unknown command '" + args[0].substr(0, 128) + "', with args beginning with: " + list;
}

void RespConnection::Ping(const Args& args) {
  if (args.size() > 2) return ReplyError("ERR wrong number of arguments for 'ping' command");
  if (args.size() == 2) return resp::AppendBulk(Out(), args[1]);
  Out().append("+PONG\r\n");
}

// True when `token` is accepted (any token when authentication is off, as natively).
bool RespConnection::Authenticate(std::string_view token) {
  const Authenticator* auth = server_.options().auth.get();
  if (auth == nullptr) return true;
  const AuthScope* scope = auth->Check(token);
  if (scope == nullptr) {
    ++counters_->auth_failures;
    if (server_.auth_log().Allow(std::chrono::seconds(10))) {
      Log(LogLevel::kWarn, "resp:// authentication failed: token not accepted", {{"peer", Peer()}});
    }
    return false;
  }
  scope_ = scope;  // a later AUTH may switch to another token's scope
  return true;
}

// AUTH token | AUTH username token (the username is not checked: kvdepot's tokens have none).
void RespConnection::Auth(const Args& args) {
  if (args.size() > 3) return ReplyError("ERR syntax error");
  if (!Authenticate(args.back())) {
    return ReplyError("WRONGPASS invalid username-password pair or user is disabled.");
  }
  ReplyOk();
}

// HELLO [protover [AUTH username token] [SETNAME name]]
void RespConnection::Hello(const Args& args) {
  bool resp3 = resp3_;
  if (args.size() >= 2) {
    std::int64_t version = 0;
    if (!resp::ParseInt64(args[1], version)) {
      return ReplyError("ERR Protocol version is not an integer or out of range");
    }
    if (version != 2 && version != 3) return ReplyError("NOPROTO unsupported protocol version");
    resp3 = version == 3;
  }
  std::optional<std::string> token, name;
  for (std::size_t i = 2; i < args.size();) {
    if (EqualsIgnoreCase(args[i], "auth") && i + 2 < args.size()) {
      token = args[i + 2];
      i += 3;
    } else if (EqualsIgnoreCase(args[i], "setname") && i + 1 < args.size()) {
      name = args[i + 1];
      i += 2;
    } else {
      return ReplyError("ERR Syntax error in HELLO option '" + args[i] + "'");
    }
  }
  if (token && !Authenticate(*token)) {
    return ReplyError("WRONGPASS invalid username-password pair or user is disabled.");
  }
  if (scope_ == nullptr) {
    ++counters_->auth_failures;
    return ReplyError(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
        "select the RESP protocol version at the same time");
  }
  if (name) {
    if (!ValidClientName(*name)) return ReplyError(kBadClientName);
    name_ = *name;
  }
  resp3_ = resp3;
  std::string& out = Out();
  resp::AppendMapHeader(out, 7, resp3_);
  resp::AppendBulk(out, "server");
  resp::AppendBulk(out, "redis");
  resp::AppendBulk(out, "version");
  resp::AppendBulk(out, kRedisVersion);
  resp::AppendBulk(out, "proto");
  resp::AppendInteger(out, resp3_ ? 3 : 2);
  resp::AppendBulk(out, "id");
  resp::AppendInteger(out, static_cast<std::int64_t>(id_));
  resp::AppendBulk(out, "mode");
  resp::AppendBulk(out, "standalone");
  resp::AppendBulk(out, "role");
  resp::AppendBulk(out, "master");
  resp::AppendBulk(out, "modules");
  resp::AppendArrayHeader(out, 0);
}

// INFO [section ...]: server, clients, memory, stats, keyspace, kvdepot; all/default/everything.
void RespConnection::Info(const Args& args) {
  auto wanted = [&](std::string_view section) {
    if (args.size() == 1) return true;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (EqualsIgnoreCase(args[i], section) || EqualsIgnoreCase(args[i], "all") ||
          EqualsIgnoreCase(args[i], "default") || EqualsIgnoreCase(args[i], "everything")) {
        return true;
      }
    }
    return false;
  };
  std::string text;
  auto field = [&text](std::string_view name, const std::string& value) {
    text.append(name).append(":").append(value).append("\r\n");
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  auto section = [&text](std::string_view title) {
    if (!text.empty()) text.append("\r\n");
    text.append("# ").append(title).append("\r\n");
  };
  const Counters& c = *counters_;
  const Store& store = server_.store();
  const HostTierStats host = store.host().stats();
  if (wanted("server")) {
    const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now() - server_.started())
                            .count();
    section("Server");
    field("redis_version", kRedisVersion);
    field("kvdepot_version", server_.options().version);
    field("redis_mode", "standalone");
    field("os", "Linux");
    field("arch_bits", "64");
    field("process_id", num(static_cast<std::uint64_t>(::getpid())));
    field("tcp_port", num(server_.port()));
    field("uptime_in_seconds", num(static_cast<std::uint64_t>(uptime)));
    field("uptime_in_days", num(static_cast<std::uint64_t>(uptime / 86400)));
  }
  if (wanted("clients")) {
    section("Clients");
    field("connected_clients", num(server_.core().open()));
  }
  if (wanted("memory")) {
    section("Memory");
    field("used_memory", num(host.bytes));
    field("used_memory_human", HumanBytes(host.bytes));
    field("maxmemory", num(host.capacity));
    field("maxmemory_human", HumanBytes(host.capacity));
  }
  if (wanted("stats")) {
    section("Stats");
    field("total_connections_received", num(server_.core().total()));
    field("total_commands_processed", num(c.commands.load()));
    field("total_net_input_bytes", num(c.bytes_in.load()));
    field("total_net_output_bytes", num(c.bytes_out.load()));
    field("keyspace_hits", num(c.get_hits.load()));
    field("keyspace_misses", num(c.gets.load() - std::min(c.gets.load(), c.get_hits.load())));
    field("evicted_keys", num(host.evictions));
    field("protocol_errors", num(c.protocol_errors.load()));
  }
  if (wanted("keyspace")) {
    section("Keyspace");
    const std::uint64_t keys = CountKeys();
    if (keys > 0) field("db0", "keys=" + num(keys) + ",expires=0,avg_ttl=0");
  }
  if (wanted("kvdepot")) {
    section("Kvdepot");
    // Per tier (top first), the shared TierStats columns: the same figures as STATS and the
    // kvdepot_tier_* series.
    for (const Tier tier : store.Tiers()) {
      const TierStats t = store.TierStatsOf(tier);
      const std::string name(protocol::TierName(tier));
      field(name + "_bytes", num(t.bytes));
      field(name + "_capacity", num(t.capacity));
      field(name + "_chunks", num(t.chunks));
      field(name + "_hits", num(t.hits));
      field(name + "_misses", num(t.misses));
      field(name + "_evictions", num(t.evictions));
      field(name + "_demotions", num(t.demotions));
      field(name + "_promotions", num(t.promotions));
    }
    if (const SsdTier* ssd = store.ssd(); ssd != nullptr) {
      const SsdTierStats s = ssd->stats();
      field("ssd_live_bytes", num(s.live_bytes));
      field("ssd_io", s.io_path);
    }
  }
  resp::AppendBulk(Out(), text);
}

// COMMAND | COMMAND COUNT | COMMAND LIST | COMMAND INFO name... | COMMAND DOCS [name...]
void RespConnection::Command(const Args& args) {
  const auto& all = resp::Commands();
  std::string& out = Out();
  if (args.size() == 1) {
    resp::AppendArrayHeader(out, all.size());
    for (const auto& spec : all) resp::AppendCommandInfo(out, spec, resp3_);
    return;
  }
  const std::string& sub = args[1];
  if (EqualsIgnoreCase(sub, "count") && args.size() == 2) {
    return resp::AppendInteger(out, static_cast<std::int64_t>(all.size()));
  }
  if (EqualsIgnoreCase(sub, "list") && args.size() == 2) {
    resp::AppendArrayHeader(out, all.size());
    for (const auto& spec : all) resp::AppendBulk(out, spec.name);
    return;
  }
  if (EqualsIgnoreCase(sub, "info")) {
    resp::AppendArrayHeader(out, args.size() - 2);
    for (std::size_t i = 2; i < args.size(); ++i) {
      if (const auto* spec = resp::FindCommand(args[i])) {
        resp::AppendCommandInfo(out, *spec, resp3_);
      } else {
        ReplyNull();
      }
    }
    return;
  }
  if (EqualsIgnoreCase(sub, "docs")) {
    std::vector<const resp::CommandSpec*> specs;
    if (args.size() == 2) {
      for (const auto& spec : all) specs.push_back(&spec);
    } else {
      for (std::size_t i = 2; i < args.size(); ++i) {
        if (const auto* spec = resp::FindCommand(args[i])) specs.push_back(spec);
      }
    }
    resp::AppendMapHeader(out, specs.size(), resp3_);
    for (const auto* spec : specs) {
      resp::AppendBulk(out, spec->name);
      resp::AppendCommandDocs(out, *spec, resp3_);
    }
    return;
  }
  ReplyError("ERR unknown subcommand or wrong number of arguments for '" + sub +
             "' (kvdepot's COMMAND has COUNT, LIST, INFO and DOCS)");
}

// CONFIG GET pattern...: a few read-only parameters (redis-benchmark reads save and
// appendonly); kvdepotd is configured through its own file and flags, never CONFIG SET.
void RespConnection::Config(const Args& args) {
  if (!EqualsIgnoreCase(args[1], "get")) {
    return ReplyError("ERR CONFIG " + resp::ToLower(args[1]) +
                      " is not supported: kvdepotd is configured through its config file and "
                      "flags (config/kvdepot.yaml, docs/resp.md); CONFIG GET reads a few values");
  }
  if (args.size() < 3) return ReplyError("ERR wrong number of arguments for 'config|get' command");
  const RespServerOptions& o = server_.options();
  const std::vector<std::pair<std::string, std::string>> params = {
      {"appendonly", "no"},
      {"databases", "1"},
      {"maxmemory", std::to_string(server_.store().host().stats().capacity)},
      {"proto-max-bulk-len", std::to_string(o.max_value_bytes)},
      {"save", ""},
      {"timeout", std::to_string(server_.timeouts().idle().count() / 1000)},
  };
  std::vector<const std::pair<std::string, std::string>*> matched;
  for (const auto& p : params) {
    for (std::size_t i = 2; i < args.size(); ++i) {
      if (resp::GlobMatch(args[i], p.first, /*nocase=*/true)) {
        matched.push_back(&p);
        break;
      }
    }
  }
  std::string& out = Out();
  resp::AppendMapHeader(out, matched.size(), resp3_);
  for (const auto* p : matched) {
    resp::AppendBulk(out, p->first);
    resp::AppendBulk(out, p->second);
  }
}

// CLIENT SETNAME name | GETNAME | ID | SETINFO LIB-NAME|LIB-VER value
void RespConnection::Client(const Args& args) {
  const std::string& sub = args[1];
  if (EqualsIgnoreCase(sub, "setname") && args.size() == 3) {
    if (!ValidClientName(args[2])) return ReplyError(kBadClientName);
    name_ = args[2];
    return ReplyOk();
  }
  if (EqualsIgnoreCase(sub, "getname") && args.size() == 2) {
    if (name_.empty()) return ReplyNull();
    return resp::AppendBulk(Out(), name_);
  }
  if (EqualsIgnoreCase(sub, "id") && args.size() == 2) {
    return resp::AppendInteger(Out(), static_cast<std::int64_t>(id_));
  }
  if (EqualsIgnoreCase(sub, "setinfo") && args.size() == 4) {
    if (!EqualsIgnoreCase(args[2], "lib-name") && !EqualsIgnoreCase(args[2], "lib-ver")) {
      return ReplyError("ERR Unrecognized option '" + args[2] + "'");
    }
    if (!ValidClientName(args[3])) return ReplyError(kBadClientName);
    return ReplyOk();
  }
  ReplyError("ERR unknown subcommand or wrong number of arguments for '" + sub +
             "' (kvdepot's CLIENT has SETNAME, GETNAME, ID and SETINFO)");
}

}  // namespace kvdepot::daemon::resp
