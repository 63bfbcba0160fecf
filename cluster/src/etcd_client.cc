#include "kvdepot/cluster/etcd_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>

namespace kvdepot::cluster {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Json = nlohmann::json;

// The largest response read (a members prefix of thousands of records is far below it).
constexpr std::uint64_t kMaxResponseBytes = 64 << 20;

// etcd's gateway writes int64 fields as JSON strings; absent fields are 0.
std::int64_t Int64Field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

std::string Quote(std::int64_t v) {
  return std::to_string(v);
}

Result<Json> ParseJson(const std::string& body, std::string_view what) {
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Internal("etcd answered " + std::string(what) +
                    " with a body that is not JSON: " + body.substr(0, 200));
  }
  return parsed;
}

Result<EtcdKeyValue> ReadKeyValue(const Json& kv) {
  EtcdKeyValue out;
  auto key = Base64Decode(kv.value("key", ""));
  auto value = Base64Decode(kv.value("value", ""));
  if (!key || !value) return Internal("etcd answered with a key or value that is not base64");
  out.key = std::move(*key);
  out.value = std::move(*value);
  out.create_revision = Int64Field(kv, "create_revision");
  out.mod_revision = Int64Field(kv, "mod_revision");
  out.lease = Int64Field(kv, "lease");
  return out;
}

Result<EtcdRangeResult> ReadRange(const Json& response) {
  EtcdRangeResult out;
  if (auto h = response.find("header"); h != response.end() && h->is_object()) {
    out.revision = Int64Field(*h, "revision");
  }
  if (auto kvs = response.find("kvs"); kvs != response.end() && kvs->is_array()) {
    for (const Json& kv : *kvs) {
      auto read = ReadKeyValue(kv);
      if (!read.ok()) return read.status();
      out.kvs.push_back(std::move(*read));
    }
  }
  return out;
}

std::int64_t HeaderRevision(const Json& response) {
  auto h = response.find("header");
  return h != response.end() && h->is_object() ? Int64Field(*h, "revision") : 0;
}

// The key just past every key with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// One HTTP POST to one endpoint, bounded by `timeout` in all (resolve, connect, write, read).
Result<std::string> PostOnce(const EtcdEndpoint& endpoint, std::string_view path,
                             const std::string& body, std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::string_body> request(http::verb::post, std::string(path), 11);
  request.set(http::field::host, endpoint.host + ":" + endpoint.port);
  request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  beast::error_code failure;
  std::string stage = "resolve";

  stream.expires_after(timeout);
  resolver.async_resolve(
      endpoint.host, endpoint.port,
      [&](beast::error_code ec, const tcp::resolver::results_type& results) {
        if (ec) {
          failure = ec;
          return;
        }
        stage = "connect";
        stream.async_connect(results, [&](beast::error_code ec2, const tcp::endpoint&) {
          if (ec2) {
            failure = ec2;
            return;
          }
          stage = "send";
          http::async_write(stream, request, [&](beast::error_code ec3, std::size_t) {
            if (ec3) {
              failure = ec3;
              return;
            }
            stage = "receive";
            http::async_read(stream, buffer, parser, [&](beast::error_code ec4, std::size_t) {
              if (ec4) failure = ec4;
              stage = "done";
            });
          });
        });
      });
  // The resolver has no deadline of its own: bound the whole exchange here as well.
  ioc.run_for(timeout + std::chrono::milliseconds(100));
  if (stage != "done" && !failure) failure = beast::error::timeout;
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (failure) {
    const std::string cause = failure == beast::error::timeout
                                  ? "no answer within " + std::to_string(timeout.count()) + " ms"
                                  : failure.message();
    return Unavailable(stage + ": " + cause);
  }
  auto& response = parser.get();
  if (response.result() != http::status::ok) {
    std::string message = response.body();
    Json parsed = Json::parse(message, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object() && parsed.contains("message")) {
      message = parsed["message"].is_string() ? parsed["message"].get<std::string>() : message;
    }
    return Internal("HTTP " + std::to_string(response.result_int()) + " from " + std::string(path) +
                    ": " + message.substr(0, 300));
  }
  return std::move(response.body());
}

}  // namespace

Result<EtcdClient> EtcdClient::Create(std::string_view endpoints,
                                      std::chrono::milliseconds timeout) {
  std::vector<EtcdEndpoint> parsed;
  std::size_t start = 0;
  while (start <= endpoints.size()) {
    std::size_t comma = endpoints.find(',', start);
    if (comma == std::string_view::npos) comma = endpoints.size();
    std::string_view item = endpoints.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    start = comma + 1;
    if (item.empty()) continue;
    const auto bad = [&](const std::string& why) {
      return InvalidArgument("cluster.etcd endpoint '" + std::string(item) + "': " + why +
                             "; write http://HOST:PORT, several separated by commas");
    };
    constexpr std::string_view kScheme = "http://";
    if (item.substr(0, kScheme.size()) != kScheme) {
      return bad(item.substr(0, 8) == "https://" ? "https is not supported" : "not an http:// URL");
    }
    std::string_view rest = item.substr(kScheme.size());
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    EtcdEndpoint e;
    e.url = std::string(item);
    std::size_t colon;
    if (!rest.empty() && rest.front() == '[') {
      const std::size_t close = rest.find(']');
      if (close == std::string_view::npos) return bad("unclosed '[' in the host");
      e.host = std::string(rest.substr(1, close - 1));
      colon =
          close + 1 < rest.size() && rest[close + 1] == ':' ? close + 1 : std::string_view::npos;
    } else {
      colon = rest.rfind(':');
      e.host = std::string(rest.substr(0, colon));
    }
    if (rest.find('/') != std::string_view::npos) return bad("a path is not allowed");
    e.port = colon == std::string_view::npos ? "2379" : std::string(rest.substr(colon + 1));
    if (e.host.empty()) return bad("no host");
    if (e.port.empty() || e.port.find_first_not_of("0123456789") != std::string::npos ||
        e.port.size() > 5 || std::stoul(e.port) == 0 || std::stoul(e.port) > 65535) {
      return bad("the port must be 1..65535");
    }
    parsed.push_back(std::move(e));
  }
  if (parsed.empty()) return InvalidArgument("cluster.etcd: no endpoint given");
  return EtcdClient(std::move(parsed), timeout);
}

EtcdClient::EtcdClient(const EtcdClient& other)
    : endpoints_(other.endpoints_), timeout_(other.timeout_), preferred_(other.preferred_.load()) {}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[preferred_.load(std::memory_order_relaxed) % endpoints_.size()].url;
}

Result<std::string> EtcdClient::Call(std::string_view path, const std::string& body) const {
  const std::size_t first = preferred_.load(std::memory_order_relaxed);
  std::string causes;
  for (std::size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const std::size_t index = (first + attempt) % endpoints_.size();
    const EtcdEndpoint& endpoint = endpoints_[index];
    auto answer = PostOnce(endpoint, path, body, timeout_);
    if (answer.ok()) {
      preferred_.store(index, std::memory_order_relaxed);
      return answer;
    }
    if (answer.status().code() != StatusCode::kUnavailable) {
      return Status(answer.status().code(),
                    "etcd at " + endpoint.url + " (cluster.etcd): " + answer.status().message());
    }
    causes += (causes.empty() ? "" : "; ") + endpoint.url + ": " + answer.status().message();
  }
  return Unavailable("no etcd endpoint answered " + std::string(path) +
                     " (cluster.etcd): " + causes);
}

Result<EtcdRangeResult> EtcdClient::RangePrefix(std::string_view prefix) const {
  Json request{{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  auto body = Call("/v3/kv/range", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a range");
  if (!parsed.ok()) return parsed.status();
  return ReadRange(*parsed);
}

Result<EtcdRangeResult> EtcdClient::Get(std::string_view key) const {
  Json request{{"key", Base64Encode(key)}};
  auto body = Call("/v3/kv/range", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a range");
  if (!parsed.ok()) return parsed.status();
  return ReadRange(*parsed);
}

Result<std::int64_t> EtcdClient::Put(std::string_view key, std::string_view value,
                                     std::int64_t lease) const {
  Json request{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) request["lease"] = Quote(lease);
  auto body = Call("/v3/kv/put", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a put");
  if (!parsed.ok()) return parsed.status();
  return HeaderRevision(*parsed);
}

Result<std::int64_t> EtcdClient::Delete(std::string_view key) const {
  Json request{{"key", Base64Encode(key)}};
  auto body = Call("/v3/kv/deleterange", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a delete");
  if (!parsed.ok()) return parsed.status();
  return HeaderRevision(*parsed);
}

Result<EtcdTxnResult> EtcdClient::PutIf(const std::vector<EtcdCompare>& compares,
                                        std::string_view key, std::string_view value,
                                        std::int64_t lease) const {
  Json compare = Json::array();
  for (const EtcdCompare& c : compares) {
    Json one{{"key", Base64Encode(c.key)}, {"result", "EQUAL"}};
    switch (c.target) {
      case EtcdCompare::Target::kCreateRevision:
        one["target"] = "CREATE";
        one["create_revision"] = Quote(c.value);
        break;
      case EtcdCompare::Target::kModRevision:
        one["target"] = "MOD";
        one["mod_revision"] = Quote(c.value);
        break;
      case EtcdCompare::Target::kLease:
        one["target"] = "LEASE";
        one["lease"] = Quote(c.value);
        break;
    }
    compare.push_back(std::move(one));
  }
  Json put{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = Quote(lease);
  Json request{{"compare", std::move(compare)},
               {"success", Json::array({Json{{"request_put", std::move(put)}}})},
               {"failure", Json::array()}};
  if (!compares.empty()) {
    request["failure"].push_back(
        Json{{"request_range", Json{{"key", Base64Encode(compares.front().key)}}}});
  }
  auto body = Call("/v3/kv/txn", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a transaction");
  if (!parsed.ok()) return parsed.status();
  EtcdTxnResult out;
  out.revision = HeaderRevision(*parsed);
  out.succeeded = parsed->value("succeeded", false);
  if (!out.succeeded) {
    auto responses = parsed->find("responses");
    if (responses != parsed->end() && responses->is_array() && !responses->empty()) {
      const Json& first = responses->front();
      if (auto range = first.find("response_range"); range != first.end()) {
        auto read = ReadRange(*range);
        if (!read.ok()) return read.status();
        if (!read->kvs.empty()) out.current = std::move(read->kvs.front());
      }
    }
  }
  return out;
}

Result<EtcdLease> EtcdClient::LeaseGrant(std::int64_t ttl_seconds) const {
  Json request{{"TTL", ttl_seconds}};
  auto body = Call("/v3/lease/grant", request.dump());
  if (!body.ok()) return body.status();
  auto parsed = ParseJson(*body, "a lease grant");
  if (!parsed.ok()) return parsed.status();
  EtcdLease out{Int64Field(*parsed, "ID"), Int64Field(*parsed, "TTL")};
  if (out.id == 0) {
    return Internal("etcd at " + current_endpoint() + " (cluster.etcd) granted no lease: " +
                    parsed->value("error", body->substr(0, 200)));
  }
  return out;
}

Result<std::int64_t> EtcdClient::LeaseKeepAlive(std::int64_t id) const {
  Json request{{"ID", Quote(id)}};
  auto body = Call("/v3/lease/keepalive", request.dump());
  if (!body.ok()) return body.status();
  // A stream of one message: {"result": {...}} (or {"error": {...}}).
  auto parsed = ParseJson(body->substr(0, body->find('\n')), "a lease keepalive");
  if (!parsed.ok()) return parsed.status();
  auto result = parsed->find("result");
  if (result == parsed->end() || !result->is_object()) {
    return Internal("etcd at " + current_endpoint() +
                    " (cluster.etcd) refused a lease keepalive: " + body->substr(0, 200));
  }
  return Int64Field(*result, "TTL");
}

Status EtcdClient::LeaseRevoke(std::int64_t id) const {
  Json request{{"ID", Quote(id)}};
  auto body = Call("/v3/lease/revoke", request.dump());
  return body.ok() ? Status::Ok() : body.status();
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (std::uint32_t(std::uint8_t(bytes[i])) << 16) |
                            (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8) |
                            std::uint8_t(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const std::size_t left = bytes.size() - i; left > 0) {
    std::uint32_t v = std::uint32_t(std::uint8_t(bytes[i])) << 16;
    if (left == 2) v |= std::uint32_t(std::uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && last && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      v[j] = value(c);
      if (v[j] < 0) return std::nullopt;
    }
    const std::uint32_t n = (std::uint32_t(v[0]) << 18) | (std::uint32_t(v[1]) << 12) |
                            (std::uint32_t(v[2]) << 6) | std::uint32_t(v[3]);
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

}  // namespace kvdepot::cluster
