// A small client of etcd 3.4's v3 API through its HTTP/JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/txn, /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke; keys
// and values travel base64-encoded), over Boost.Beast. No gRPC.
//
// Endpoints: `cluster.etcd`, comma-separated base URLs
// ("http://127.0.0.1:2379,http://10.0.0.2:2379"). A call goes to the endpoint that answered last
// and fails over to the others in order; each attempt has its own deadline (connect, send and
// receive together), so a call takes at most timeout x endpoints. Only plain http:// is supported.
//
// Errors: kInvalidArgument for a bad endpoint list (Create); kUnavailable when no endpoint
// answered (the message names every endpoint tried with its cause, and the setting
// cluster.etcd); kInternal when etcd answered with an error or a response this client cannot
// read (the message quotes etcd's error). Nothing throws.
//
// Thread-safety: calls are synchronous and block the calling thread up to their deadline; the
// membership calls them from its own thread only (never from a request path). One EtcdClient may
// be used from several threads (each call uses its own connection).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::cluster {

struct EtcdEndpoint {
  std::string url;  // as configured, e.g. "http://127.0.0.1:2379"
  std::string host;
  std::string port;
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;  // 0: no lease
};

struct EtcdRangeResult {
  std::int64_t revision = 0;  // the store's revision when the range was read (header.revision)
  std::vector<EtcdKeyValue> kvs;
};

// One compare of a transaction, always "EQUAL".
struct EtcdCompare {
  enum class Target { kCreateRevision, kModRevision, kLease };
  std::string key;
  Target target = Target::kCreateRevision;
  std::int64_t value = 0;  // create_revision 0 = the key is absent
};

struct EtcdTxnResult {
  std::int64_t revision = 0;
  bool succeeded = false;
  // On failure: the first compared key as it is now (absent when it does not exist).
  std::optional<EtcdKeyValue> current;
};

struct EtcdLease {
  std::int64_t id = 0;
  std::int64_t ttl_seconds = 0;
};

class EtcdClient {
 public:
  // Parses `endpoints` (comma-separated http:// URLs, blanks around commas ignored).
  static Result<EtcdClient> Create(std::string_view endpoints, std::chrono::milliseconds timeout);

  EtcdClient(const EtcdClient& other);
  EtcdClient& operator=(const EtcdClient&) = delete;

  const std::vector<EtcdEndpoint>& endpoints() const { return endpoints_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The URL of the endpoint that answered last (or will be tried first).
  std::string current_endpoint() const;

  // Every key with prefix `prefix`.
  Result<EtcdRangeResult> RangePrefix(std::string_view prefix) const;
  // One key (kvs is empty when it is absent).
  Result<EtcdRangeResult> Get(std::string_view key) const;
  // Puts `value` at `key` under `lease` (0: none); returns the new revision.
  Result<std::int64_t> Put(std::string_view key, std::string_view value, std::int64_t lease) const;
  // Deletes `key`; returns the new revision.
  Result<std::int64_t> Delete(std::string_view key) const;
  // If every compare holds, puts `value` at `key` under `lease`; otherwise reads the first
  // compared key (EtcdTxnResult::current).
  Result<EtcdTxnResult> PutIf(const std::vector<EtcdCompare>& compares, std::string_view key,
                              std::string_view value, std::int64_t lease) const;

  Result<EtcdLease> LeaseGrant(std::int64_t ttl_seconds) const;
  // Refreshes lease `id`; returns its remaining TTL in seconds, 0 when it has expired (or was
  // revoked): the lease is gone and what it carried was deleted.
  Result<std::int64_t> LeaseKeepAlive(std::int64_t id) const;
  Status LeaseRevoke(std::int64_t id) const;

 private:
  EtcdClient(std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}
  // POSTs `body` (JSON) to `path` with fail-over; returns the response body of a 200.
  Result<std::string> Call(std::string_view path, const std::string& body) const;

  std::vector<EtcdEndpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  mutable std::atomic<std::size_t> preferred_{0};
};

// Base64 (RFC 4648, with padding), as etcd's gateway encodes bytes.
std::string Base64Encode(std::string_view bytes);
// nullopt for text that is not base64.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace kvdepot::cluster
