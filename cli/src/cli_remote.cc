// `kvdepot [--addr ADDR] COMMAND`: commands that talk to a running kvdepotd.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "cli_args.h"
#include "cli_internal.h"
#include "json_writer.h"
#include "kvdepot/protocol/chunk_key.h"
#include "kvdepot/client/client.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/base/file_io.h"
#include "kvdepot/base/hex.h"

namespace kvdepot::cli {
namespace {

}  // namespace

std::string KeyFromArg(std::string_view arg) {
  if (arg.size() == 2 * kChunkKeyBytes) {
    if (std::optional<std::string> key = HexDecode(arg)) return *std::move(key);
  }
  return std::string(arg);
}

std::string KeyForDisplay(std::string_view key) {
  const bool printable = std::all_of(key.begin(), key.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  return printable ? std::string(key) : HexLower(key);
}

Result<std::unique_ptr<client::Connection>> Connect(const client::ClientOptions& remote) {
  const client::ClientOptions& o = remote;
  auto c = client::Connection::Connect(o);
  if (!c.ok()) return c.status().WithContext("kvdepotd at " + remote.address);
  return c;
}

namespace {

Status CheckKey(const std::string& key) {
  if (key.empty() || key.size() > protocol::Limits{}.max_key_bytes) {
    return UsageError("a KEY must be 1 to " + std::to_string(protocol::Limits{}.max_key_bytes) +
                      " bytes");
  }
  return Status::Ok();
}

Status Ping(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  const auto start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_RETURN_IF_ERROR(c->Ping().WithContext(remote.address));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              start).count();
  if (args.Has("--json")) {
    JsonWriter json(io.out);
    json.BeginObject().Key("address").String(remote.address).Key("ms").Double(ms).EndObject();
    io.out << "\n";
    return Status::Ok();
  }
  io.out << "pong from " << remote.address << " in " << std::fixed << std::setprecision(2) << ms << " ms\n";
  return Status::Ok();
}

// Prints the daemon's flat stats JSON as "key  value" lines (nested objects become dotted keys).
void PrintJsonAsLines(std::string_view json, std::ostream& out) {
  std::vector<std::string> path;
  std::string key, token;
  bool in_string = false, reading_key = true;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '"') {
        in_string = false;
        if (reading_key) {
          key = token;
        } else {
          std::string full;
          for (const auto& p : path) full += p + ".";
          out << std::left << std::setw(34) << full + key << token << "\n";
          token.clear();
          reading_key = true;
        }
      } else {
        token += c;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      token.clear();
    } else if (c == ':') {
      reading_key = false;
      token.clear();
    } else if (c == '{') {
      if (!key.empty()) path.push_back(key);
      key.clear();
      reading_key = true;
    } else if (c == '}' || c == ',') {
      if (!reading_key && !token.empty()) {
        std::string full;
        for (const auto& p : path) full += p + ".";
        out << std::left << std::setw(34) << full + key << token << "\n";
      }
      token.clear();
      reading_key = true;
      if (c == '}' && !path.empty()) path.pop_back();
    } else if (!reading_key && c != ' ') {
      token += c;
    }
  }
}

Status Stats(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(std::string json, c->Stats());
  if (args.Has("--json")) {
    io.out << json << "\n";
  } else {
    PrintJsonAsLines(json, io.out);
  }
  return Status::Ok();
}

Status Ls(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{"--namespace", "--prefix", "--tier",
                                                      "--limit"},
                                                     {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  protocol::ScanRequest q;
  if (const auto ns = args.Get("--namespace")) {
    std::optional<std::string> id = HexDecode(*ns);
    if (ns->size() != 32 || !id) {
      return UsageError("--namespace takes a namespace id: 32 hex characters (the first 16 "
                        "bytes of a chunk key)");
    }
    q.prefix = *std::move(id);
  } else if (const auto prefix = args.Get("--prefix")) {
    q.prefix = *prefix;
  }
  if (const auto tier = args.Get("--tier")) {
    KVD_ASSIGN_OR_RETURN(q.tier, ParseFlagValue("--tier", *tier, protocol::ParseTierName));
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t limit, args.GetUint("--limit", 100, 1, 1000000));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  std::vector<protocol::ScanEntry> entries;
  while (entries.size() < limit) {
    q.limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(limit - entries.size(), 1000));
    KVD_ASSIGN_OR_RETURN(protocol::ScanResult page, c->Scan(q));
    for (auto& e : page.entries) entries.push_back(std::move(e));
    if (page.next_cursor.empty()) break;
    q.cursor = page.next_cursor;
  }
  if (args.Has("--json")) {
    JsonWriter json(io.out);
    json.BeginArray();
    for (const auto& e : entries) {
      json.BeginObject();
      json.Key("key").String(KeyForDisplay(e.key));
      json.Key("bytes").Uint(e.value_bytes);
      json.Key("tier").String(protocol::TierName(e.tier));
      json.Key("idle_ms").Uint(e.idle_ms);
      json.EndObject();
    }
    json.EndArray();
    io.out << "\n";
  } else {
    for (const auto& e : entries) {
      io.out << std::left << std::setw(5) << protocol::TierName(e.tier) << std::right
             << std::setw(12) << e.value_bytes << "  " << std::setw(10) << e.idle_ms << "ms  "
             << KeyForDisplay(e.key) << "\n";
    }
  }
  return Status::Ok();
}

Status Get(const client::ClientOptions& remote, std::span<const char* const> argv, Io io,
           const StdoutInfo& stdout_info) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{"-o", "--output"}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  auto out = args.Get("-o") ? args.Get("-o") : args.Get("--output");
  if (!out && args.Has("--json")) {
    return UsageError("get --json prints what was written: it needs -o FILE");
  }
  if (!out && stdout_info.is_terminal) {
    return UsageError("get needs -o FILE when stdout is a terminal (-o - writes to stdout anyway)");
  }
  if (!out) out = "-";
  if (*out == "-" && args.Has("--json")) {
    return UsageError("get --json prints its report on stdout: use -o FILE, not -o -");
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto value, c->Get(key));
  if (!value) return NotFound("key '" + args.positional()[0] + "' is not in the cache");
  if (*out == "-") {
    io.out.write(reinterpret_cast<const char*>(value->data()),
                 static_cast<std::streamsize>(value->size()));
    return Status::Ok();
  }
  KVD_RETURN_IF_ERROR(WriteFileAtomic(*out, *value));
  if (args.Has("--json")) {
    JsonWriter json(io.out);
    json.BeginObject().Key("key").String(args.positional()[0]).Key("file").String(*out);
    json.Key("bytes").Uint(value->size()).EndObject();
    io.out << "\n";
    return Status::Ok();
  }
  io.out << "wrote " << *out << ": " << value->size() << " bytes\n";
  return Status::Ok();
}

// Standard input to its end, at most kCliMaxValueBytes.
Result<std::vector<std::byte>> ReadStdin() {
  std::vector<std::byte> bytes;
  std::byte buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n == 0) return bytes;
    if (n < 0) {
      if (errno == EINTR) continue;
      return StatusFromErrno(errno, "reading standard input");
    }
    if (bytes.size() + static_cast<std::size_t>(n) > kCliMaxValueBytes) {
      return OutOfRange("standard input holds more than " + std::to_string(kCliMaxValueBytes) +
                        " bytes");
    }
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
}

// A number field of the daemon's STATS JSON ("limits" and "tiers.host" hold distinct names).
std::optional<std::uint64_t> JsonNumber(std::string_view json, std::string_view name) {
  const std::string needle = "\"" + std::string(name) + "\":";
  const auto at = json.find(needle);
  if (at == std::string_view::npos) return std::nullopt;
  std::uint64_t v = 0;
  const char* first = json.data() + at + needle.size();
  const auto [p, ec] = std::from_chars(first, json.data() + json.size(), v);
  if (ec != std::errc() || p == first) return std::nullopt;
  return v;
}

// A PUT the server refused, explained: its status, what it means, the limit that applies and the
// setting that changes it (read from the server's STATS; best effort).
Status ExplainPutRefusal(const client::ClientOptions& remote, const Status& refusal,
                         std::string_view key_arg, std::uint64_t value_bytes,
                         std::uint64_t key_bytes) {
  std::string stats;
  if (auto c = client::Connection::Connect(remote); c.ok()) {
    if (auto s = (*c)->Stats(); s.ok()) stats = std::move(*s);
  }
  const auto quote = [&](std::string_view field) {
    const auto v = JsonNumber(stats, field);
    return v ? std::to_string(*v) : std::string("(unknown: STATS failed)");
  };
  std::string why;
  switch (refusal.code()) {
    case StatusCode::kOutOfRange:
      if (const auto max_key = JsonNumber(stats, "max_key_bytes");
          max_key && key_bytes > *max_key) {
        why = "the key is " + std::to_string(key_bytes) + " bytes, over the server's limit of " +
              std::to_string(*max_key) + " (limits.max_key_bytes, kvdepotd --limits-max-key-bytes)";
      } else {
        why = "the value is " + std::to_string(value_bytes) +
              " bytes, over the server's limit of " + quote("max_value_bytes") +
              " bytes (limits.max_value_bytes, kvdepotd --limits-max-value-bytes; at most "
              "host.capacity)";
      }
      break;
    case StatusCode::kResourceExhausted:
      why = "the host tier has no room for " + std::to_string(value_bytes) +
            " bytes right now: host.capacity is " + quote("capacity") +
            " bytes and what is left is in use (being read, or waiting for the SSD's write "
            "buffer); retry, or raise host.capacity (--host-capacity) or ssd.write_buffer";
      break;
    case StatusCode::kPermissionDenied:
      why =
          "the token's scope does not cover this key's namespace (auth.token_file on the "
          "server; --token-file here)";
      break;
    default: why = "see the daemon's log";
  }
  return Status(refusal.code(), "kvdepotd refused the value for '" + std::string(key_arg) + "': " +
                                    std::string(StatusCodeName(refusal.code())) + ": " + why);
}

Status Put(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY", "FILE"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  const std::string& file = args.positional()[1];
  // No limit of the CLI's own: the server refuses what exceeds its limits.max_value_bytes.
  KVD_ASSIGN_OR_RETURN(auto bytes, file == "-" ? ReadStdin() : ReadFile(file, kCliMaxValueBytes));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  if (Status s = c->Put(key, bytes); !s.ok()) {
    if (s.message().rfind("server refused the value", 0) != 0) return s;
    return ExplainPutRefusal(remote, s, args.positional()[0], bytes.size(), key.size());
  }
  if (args.Has("--json")) {
    JsonWriter json(io.out);
    json.BeginObject().Key("key").String(args.positional()[0]).Key("bytes").Uint(bytes.size());
    json.EndObject();
    io.out << "\n";
    return Status::Ok();
  }
  io.out << "stored " << bytes.size() << " bytes under " << args.positional()[0] << "\n";
  return Status::Ok();
}

Status Del(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  if (args.positional().empty()) return UsageError("del needs at least one KEY");
  std::vector<std::string> keys;
  for (const auto& k : args.positional()) {
    keys.push_back(KeyFromArg(k));
    KVD_RETURN_IF_ERROR(CheckKey(keys.back()));
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto codes, c->Delete(keys));
  std::size_t missing = 0;
  const bool as_json = args.Has("--json");
  JsonWriter json(io.out);
  if (as_json) json.BeginArray();
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const bool deleted = codes[i] == StatusCode::kOk;
    if (as_json) {
      json.BeginObject().Key("key").String(args.positional()[i]).Key("deleted").Bool(deleted);
      json.EndObject();
    } else {
      io.out << args.positional()[i] << ": " << (deleted ? "deleted" : "not found") << "\n";
    }
    missing += !deleted;
  }
  if (as_json) {
    json.EndArray();
    io.out << "\n";
  }
  if (missing == codes.size()) return NotFound("no key was present");
  return Status::Ok();
}

Status Lookup(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  if (args.positional().empty()) return UsageError("lookup needs KEYs in prefix order");
  std::vector<std::string> keys;
  for (const auto& k : args.positional()) {
    keys.push_back(KeyFromArg(k));
    KVD_RETURN_IF_ERROR(CheckKey(keys.back()));
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto r, c->Lookup(keys));
  if (args.Has("--json")) {
    JsonWriter json(io.out);
    json.BeginObject().Key("prefix_length").Uint(r.prefix_length).Key("tiers").BeginArray();
    for (auto t : r.tiers) json.String(protocol::TierName(t));
    json.EndArray().EndObject();
    io.out << "\n";
  } else {
    io.out << "longest cached prefix: " << r.prefix_length << " of " << keys.size() << "\n";
    for (std::size_t i = 0; i < r.tiers.size(); ++i) {
      io.out << "  " << std::left << std::setw(5) << protocol::TierName(r.tiers[i]) << " "
             << args.positional()[i] << "\n";
    }
  }
  return Status::Ok();
}

Status InspectRemote(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {{}, {"--json"}}));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto value, c->Get(key));
  if (!value) return NotFound("key '" + args.positional()[0] + "' is not in the cache");
  return InspectContainerBytes(args.positional()[0], *value, args.Has("--json"), io);
}

}  // namespace

Status RunRemoteCommand(const client::ClientOptions& remote, std::string_view command,
                        std::span<const char* const> argv, Io io, bool* handled,
                        const StdoutInfo& stdout_info) {
  *handled = true;
  if (command == "ping") return Ping(remote, argv, io);
  if (command == "stats") return Stats(remote, argv, io);
  if (command == "ls") return Ls(remote, argv, io);
  if (command == "get") return Get(remote, argv, io, stdout_info);
  if (command == "put") return Put(remote, argv, io);
  if (command == "del") return Del(remote, argv, io);
  if (command == "lookup") return Lookup(remote, argv, io);
  if (command == "inspect") return InspectRemote(remote, argv, io);
  if (command == "bench") return RunBench(remote, argv, io);
  if (command == "cluster") return RunClusterCommand(remote, argv, io);
  *handled = false;
  return Status::Ok();
}

void PrintRemoteUsage(std::ostream& out) {
  out << "kvdepot [--addr HOST:PORT | --addr unix:PATH] commands (default address:\n"
         "$KVDEPOT_ADDR, else 127.0.0.1:7600). Before the command, also: --token-file FILE\n"
         "(or $KVDEPOT_TOKEN_FILE) to AUTH with the file's first token; --tls, --tls-ca FILE,\n"
         "--tls-cert FILE, --tls-key FILE, --tls-server-name NAME for a TLS listener:\n"
         "  ping [--json]\n"
         "  stats [--json]\n"
         "  ls [--namespace NSID | --prefix P] [--tier gpu|host|ssd] [--limit N] [--json]\n"
         "  inspect KEY [--json]           container header of a stored chunk\n"
         "  get KEY [-o FILE] [--json]     without -o: to stdout unless it is a terminal\n"
         "  put KEY FILE|- [--json]        FILE - reads standard input; the server's\n"
         "                                 limits.max_value_bytes is the only size limit\n"
         "  del KEY... [--json]\n"
         "  lookup KEY... [--json]         longest cached prefix of keys given in prefix order\n"
         "  bench [options]                load generator (see 'kvdepot bench --help')\n"
         "  cluster status [--json]        the cluster's members as this node sees them\n"
         "  cluster owner KEY [--json]     which member(s) own KEY\n"
         "KEY is any string of 1-256 bytes (e.g. k1), or a 96-hex-digit chunk key.\n";
}

}  // namespace kvdepot::cli
