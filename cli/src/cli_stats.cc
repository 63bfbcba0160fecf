// `kvdepot stats` (the daemon's STATS document in sections, with human units and hit rates) and
// `kvdepot top` / `stats --watch` (one line per interval of rates, like `redis-cli --stat`).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "cli_commands.h"
#include "cli_internal.h"
#include "cli_json.h"
#include "kvdepot/client/client.h"

namespace kvdepot::cli {

std::string HumanBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  while (std::fabs(bytes) >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  std::ostringstream s;
  if (unit == 0) {
    s << static_cast<std::int64_t>(std::llround(bytes)) << " B";
  } else {
    s << std::fixed << std::setprecision(bytes < 10 ? 2 : 1) << bytes << " " << kUnits[unit];
  }
  return s.str();
}

namespace {

using Clock = std::chrono::steady_clock;

// A rate for people, in decimal units as network rates are given: "1.25 GB/s", "12.0 kB/s".
std::string HumanRate(double bytes_per_s) {
  static const char* const kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  std::size_t unit = 0;
  while (bytes_per_s >= 1000 && unit + 1 < std::size(kUnits)) {
    bytes_per_s /= 1000;
    ++unit;
  }
  std::ostringstream s;
  s << std::fixed
    << std::setprecision(unit == 0          ? 0
                         : bytes_per_s < 10 ? 2
                                            : 1)
    << bytes_per_s << " " << kUnits[unit];
  return s.str();
}

std::string Percent(double fraction) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << 100 * fraction << "%";
  return s.str();
}

std::string HumanUptime(std::uint64_t s) {
  std::ostringstream out;
  if (s >= 86400) out << s / 86400 << "d ";
  if (s >= 3600) out << (s % 86400) / 3600 << "h ";
  if (s >= 60) out << std::setw(s >= 3600 ? 2 : 1) << std::setfill('0') << (s % 3600) / 60 << "m ";
  out << std::setw(s >= 60 ? 2 : 1) << std::setfill('0') << s % 60 << "s";
  return out.str();
}

std::uint64_t U64(const Json& obj, const char* name) {
  const auto it = obj.find(name);
  return it != obj.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

// hits / (hits + misses) of a tier's object, or nullopt without lookups.
std::optional<double> HitRate(std::uint64_t hits, std::uint64_t misses) {
  if (hits + misses == 0) return std::nullopt;
  return static_cast<double>(hits) / static_cast<double>(hits + misses);
}

// "max_value_bytes" -> "max value bytes".
std::string Label(std::string name) {
  for (char& c : name) {
    if (c == '_') c = ' ';
  }
  return name;
}

// A member's value for people: sizes (names ending in "bytes" or "_used", capacity, quota) in
// binary units, other numbers and strings as they are.
std::string ValueText(const std::string& name, const Json& v) {
  const bool size =
      name.ends_with("bytes") || name.ends_with("_used") || name == "capacity" || name == "quota";
  if (v.is_number() && size) return HumanBytes(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void Line(std::ostream& out, const std::string& label, const std::string& value) {
  out << "  " << std::left << std::setw(26) << label << std::right << value << "\n";
}

// The scalar members of `obj` not in `skip`, one line each.
void GenericLines(const Json& obj, const std::set<std::string>& skip, std::ostream& out) {
  for (const auto& [name, v] : obj.items()) {
    if (skip.count(name) || v.is_structured()) continue;
    Line(out, Label(name), ValueText(name, v));
  }
}

void ServerSection(const Json& doc, std::ostream& out) {
  out << "# server\n";
  Line(out, "version", doc.value("version", std::string("(not reported)")));
  if (doc.contains("pid")) Line(out, "pid", doc["pid"].dump());
  Line(out, "uptime", HumanUptime(U64(doc, "uptime_s")));
  Line(out, "requests", std::to_string(U64(doc, "requests")));
  Line(out, "bytes in", HumanBytes(static_cast<double>(U64(doc, "bytes_in"))));
  Line(out, "bytes out", HumanBytes(static_cast<double>(U64(doc, "bytes_out"))));
  Line(out, "protocol errors", std::to_string(U64(doc, "protocol_errors")));
  Line(out, "request timeouts", std::to_string(U64(doc, "request_timeouts")));
  // Scalars a newer daemon adds land here rather than being dropped.
  GenericLines(doc,
               {"version", "pid", "uptime_s", "requests", "bytes_in", "bytes_out",
                "protocol_errors", "request_timeouts", "connections_open", "connections_total",
                "auth_failures", "tls_handshake_failures", "idle_timeouts"},
               out);
  out << "\n# connections\n";
  Line(out, "open", std::to_string(U64(doc, "connections_open")));
  Line(out, "total", std::to_string(U64(doc, "connections_total")));
  Line(out, "idle timeouts", std::to_string(U64(doc, "idle_timeouts")));
  Line(out, "auth failures", std::to_string(U64(doc, "auth_failures")));
  Line(out, "tls handshake failures", std::to_string(U64(doc, "tls_handshake_failures")));
}

void TiersSection(const Json& tiers, std::ostream& out) {
  out << "\n# tiers\n";
  out << "  " << std::left << std::setw(6) << "TIER" << std::right << std::setw(12) << "USED"
      << std::setw(12) << "CAPACITY" << std::setw(8) << "USE" << std::setw(10) << "CHUNKS"
      << std::setw(10) << "HIT RATE" << std::setw(12) << "HITS" << std::setw(12) << "MISSES"
      << std::setw(11) << "EVICTIONS"
      << "\n";
  for (const auto& [name, t] : tiers.items()) {
    const auto used = static_cast<double>(U64(t, "bytes"));
    const auto capacity = static_cast<double>(U64(t, "capacity"));
    const auto rate = HitRate(U64(t, "hits"), U64(t, "misses"));
    out << "  " << std::left << std::setw(6) << name << std::right << std::setw(12)
        << HumanBytes(used) << std::setw(12) << HumanBytes(capacity) << std::setw(8)
        << (capacity > 0 ? Percent(used / capacity) : "-") << std::setw(10) << U64(t, "chunks")
        << std::setw(10) << (rate ? Percent(*rate) : "-") << std::setw(12) << U64(t, "hits")
        << std::setw(12) << U64(t, "misses") << std::setw(11) << U64(t, "evictions") << "\n";
  }
  // Each tier's other members in its own section: "# host", "# ssd", "# gpu".
  for (const auto& [name, t] : tiers.items()) {
    out << "\n# " << name << "\n";
    GenericLines(t, {"bytes", "capacity", "chunks", "hits", "misses", "evictions"}, out);
  }
}

void PrintStatsText(const Json& doc, std::ostream& out) {
  ServerSection(doc, out);
  if (doc.contains("tiers") && doc["tiers"].is_object()) TiersSection(doc["tiers"], out);
  // Sections the daemon reports beyond these (e.g. lm://), as they come.
  for (const auto& [name, v] : doc.items()) {
    if (name == "tiers" || name == "namespaces" || !v.is_object()) continue;
    out << "\n# " << (name == "lm" ? std::string("lm://") : name) << "\n";
    GenericLines(v, {}, out);
  }
  if (doc.contains("namespaces") && doc["namespaces"].is_array() && !doc["namespaces"].empty()) {
    out << "\n# namespaces\n";
    out << "  " << std::left << std::setw(34) << "ID" << std::right << std::setw(12) << "BYTES"
        << std::setw(12) << "QUOTA"
        << "\n";
    for (const Json& ns : doc["namespaces"]) {
      out << "  " << std::left << std::setw(34) << ns.value("id", std::string()) << std::right
          << std::setw(12) << HumanBytes(static_cast<double>(U64(ns, "bytes"))) << std::setw(12)
          << (U64(ns, "quota") == 0 ? std::string("none")
                                    : HumanBytes(static_cast<double>(U64(ns, "quota"))))
          << "\n";
    }
  }
}

Result<std::unique_ptr<client::Connection>> ConnectTo(const client::ClientOptions& remote) {
  auto c = client::Connection::Connect(remote);
  if (!c.ok()) return c.status().WithContext("kvdepotd at " + remote.address);
  return c;
}

Result<Json> FetchStats(client::Connection& c) {
  KVD_ASSIGN_OR_RETURN(std::string text, c.Stats());
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Corruption("kvdepotd's STATS answer is not a JSON object");
  }
  return doc;
}

// ---- top ---------------------------------------------------------------------------------------

std::atomic<bool> g_interrupted{false};

extern "C" void OnInterrupt(int) {
  g_interrupted.store(true);
}

// SIGINT sets g_interrupted while this lives (Ctrl-C ends `top` with status 0).
class InterruptScope {
 public:
  InterruptScope() {
    g_interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &previous_);
  }
  ~InterruptScope() { ::sigaction(SIGINT, &previous_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction previous_ {};
};

struct Sample {
  Json doc;
  Clock::time_point at;
  double rtt_ms = 0;
};

Result<Sample> TakeSample(client::Connection& c) {
  Sample s;
  const auto start = Clock::now();
  KVD_ASSIGN_OR_RETURN(s.doc, FetchStats(c));
  s.at = Clock::now();
  s.rtt_ms = std::chrono::duration<double, std::milli>(s.at - start).count();
  return s;
}

std::uint64_t Delta(const Json& now, const Json& before, const char* name) {
  const std::uint64_t a = U64(now, name), b = U64(before, name);
  return a >= b ? a - b : 0;  // a counter that went back: the daemon restarted
}

std::vector<std::string> TierNames(const Json& doc) {
  std::vector<std::string> names;
  if (doc.contains("tiers")) {
    for (const auto& [name, t] : doc["tiers"].items()) names.push_back(name);
  }
  return names;
}

void TopHeader(const std::vector<std::string>& tiers, std::ostream& out) {
  out << std::right << std::setw(10) << "req/s";
  for (const auto& t : tiers) out << std::setw(10) << (t + " hit");
  out << std::setw(12) << "in/s" << std::setw(12) << "out/s" << std::setw(9) << "evict/s"
      << std::setw(7) << "conns" << std::setw(9) << "rtt ms"
      << "\n";
}

void TopLine(const Sample& now, const Sample& before, const std::vector<std::string>& tiers,
             bool json, std::ostream& out) {
  const double dt = std::chrono::duration<double>(now.at - before.at).count();
  const auto per_s = [dt](std::uint64_t n) { return dt > 0 ? static_cast<double>(n) / dt : 0.0; };
  std::uint64_t evictions = 0;
  Json rates = Json::object();
  std::vector<std::optional<double>> hit(tiers.size());
  const Json now_tiers = now.doc.value("tiers", Json::object());
  const Json before_tiers = before.doc.value("tiers", Json::object());
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const Json a = now_tiers.value(tiers[i], Json::object());
    const Json b = before_tiers.value(tiers[i], Json::object());
    hit[i] = HitRate(Delta(a, b, "hits"), Delta(a, b, "misses"));
    evictions += Delta(a, b, "evictions");
    rates[tiers[i]] = hit[i] ? Json(*hit[i]) : Json(nullptr);
  }
  const double requests = per_s(Delta(now.doc, before.doc, "requests"));
  const double in = per_s(Delta(now.doc, before.doc, "bytes_in"));
  const double out_rate = per_s(Delta(now.doc, before.doc, "bytes_out"));
  if (json) {
    PrintJson({{"interval_s", dt},
               {"requests_per_s", requests},
               {"hit_rate", std::move(rates)},
               {"bytes_in_per_s", in},
               {"bytes_out_per_s", out_rate},
               {"evictions_per_s", per_s(evictions)},
               {"connections_open", U64(now.doc, "connections_open")},
               {"rtt_ms", now.rtt_ms}},
              out);
    return;
  }
  out << std::right << std::fixed << std::setprecision(0) << std::setw(10) << requests;
  for (const auto& h : hit) out << std::setw(10) << (h ? Percent(*h) : "-");
  out << std::setw(12) << HumanRate(in) << std::setw(12) << HumanRate(out_rate) << std::setw(9)
      << std::setprecision(0) << per_s(evictions) << std::setw(7)
      << U64(now.doc, "connections_open") << std::setw(9) << std::setprecision(2) << now.rtt_ms
      << "\n";
}

// Parses a duration in seconds ("1", "0.5") in (0, 3600].
Result<double> ParseSeconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0) || v > 3600) {
    return UsageError(flag + " " + text + ": expected seconds in (0, 3600], e.g. 1 or 0.5");
  }
  return v;
}

Status Watch(const client::ClientOptions& remote, double interval_s, std::uint64_t count, bool json,
             Io io) {
  KVD_ASSIGN_OR_RETURN(auto c, ConnectTo(remote));
  InterruptScope interrupt;
  KVD_ASSIGN_OR_RETURN(Sample before, TakeSample(*c));
  const std::vector<std::string> tiers = TierNames(before.doc);
  const auto interval = std::chrono::duration<double>(interval_s);
  for (std::uint64_t line = 0; count == 0 || line < count; ++line) {
    const auto due = before.at + std::chrono::duration_cast<Clock::duration>(interval);
    while (Clock::now() < due) {
      if (g_interrupted.load()) return Status::Ok();
      std::this_thread::sleep_for(
          std::min<Clock::duration>(due - Clock::now(), std::chrono::milliseconds(50)));
    }
    if (g_interrupted.load()) return Status::Ok();
    KVD_ASSIGN_OR_RETURN(Sample now, TakeSample(*c));
    if (!json && line % 20 == 0) TopHeader(tiers, io.out);
    TopLine(now, before, tiers, json, io.out);
    io.out.flush();
    before = std::move(now);
  }
  return Status::Ok();
}

}  // namespace

Status RunStats(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("stats")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  if (const auto watch = args.Get("--watch")) {
    KVD_ASSIGN_OR_RETURN(double interval, ParseSeconds("--watch", *watch));
    KVD_ASSIGN_OR_RETURN(std::uint64_t count, args.GetUint("--count", 0, 0, UINT64_MAX));
    return Watch(remote, interval, count, args.Has("--json"), io);
  }
  if (args.Has("--count")) return UsageError("stats --count goes with --watch SECONDS");
  KVD_ASSIGN_OR_RETURN(auto c, ConnectTo(remote));
  KVD_ASSIGN_OR_RETURN(Json doc, FetchStats(*c));
  if (args.Has("--json")) {
    PrintJson(doc, io.out);  // the daemon's document, raw numbers as it sent them
  } else {
    PrintStatsText(doc, io.out);
  }
  return Status::Ok();
}

Status RunTop(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("top")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  double interval = 1;
  if (const auto v = args.Get("--interval")) {
    KVD_ASSIGN_OR_RETURN(interval, ParseSeconds("--interval", *v));
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t count, args.GetUint("--count", 0, 0, UINT64_MAX));
  return Watch(remote, interval, count, args.Has("--json"), io);
}

}  // namespace kvdepot::cli
