#include "lmcache_mp_connector.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <map>
#include <string_view>
#include <utility>

#include "kvdepot/client/cluster_routes.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::python::lmcache_mp {

// One batch as submitted. Tiles write disjoint ranges of per_key; the counters and the first
// error are under mu.
struct Connector::Batch {
  std::uint64_t id = 0;
  Op op = Op::kGet;
  std::vector<std::string> keys;                    // key_prefix + LMCache's key
  std::vector<std::span<std::byte>> targets;        // GET
  std::vector<std::span<const std::byte>> sources;  // SET
  std::vector<std::uint8_t> per_key;
  std::vector<std::uint8_t> invalid;  // 1: the key cannot be sent (already failed)
  std::atomic<std::size_t> tiles_left{0};
  std::mutex mu;
  std::size_t failures = 0;
  std::size_t misses = 0;
  std::string first_error;

  void Fail(std::size_t i, std::string_view what) {
    per_key[i] = 0;
    std::lock_guard lock(mu);
    ++failures;
    if (first_error.empty()) first_error = "key '" + keys[i] + "': " + std::string(what);
  }
  void Miss(std::size_t i) {
    per_key[i] = 0;
    std::lock_guard lock(mu);
    ++misses;
  }
};

// A worker thread's connections: one per address it talks to. Without cluster routing (or
// against a daemon not in a cluster) that is options.client.address alone; with it, ConnectionFor
// picks the key's owner (client::ClusterRoutes, docs/cluster.md "Smart clients") and falls back
// to the key's other targets when the owner cannot be reached.
class Connector::Worker {
 public:
  Worker(const ConnectorOptions& options, client::ClusterRoutes* routes)
      : options_(options), routes_(routes) {}

  // The address `key`'s requests go to first.
  std::string RouteOf(std::string_view key) { return Targets(key).front(); }

  // `fresh` tells whether the connection was opened by this call (a failure on a fresh
  // connection is not retried). connect_failed() is true after ConnectionFor failed (no target
  // of the key could be reached).
  Result<client::Connection*> ConnectionFor(std::string_view key, bool& fresh) {
    fresh = false;
    connect_failed_ = false;
    Status last;
    for (const std::string& address : Targets(key)) {
      std::unique_ptr<client::Connection>& slot = connections_[address];
      current_ = address;
      if (slot && !slot->broken()) return slot.get();
      slot.reset();
      client::ClientOptions o = options_.client;
      o.address = address;
      auto c = client::Connection::Connect(o);
      if (!c.ok()) {
        last = c.status().WithContext("connecting to kvdepotd at " + address);
        if (routes_ != nullptr) routes_->ReportFailure(address);
        continue;
      }
      slot = std::move(*c);
      fresh = true;
      return slot.get();
    }
    connect_failed_ = true;
    return last;
  }
  bool connect_failed() const { return connect_failed_; }
  // The address of the connection ConnectionFor returned last.
  const std::string& current() const { return current_; }
  void Drop() { connections_.erase(current_); }

  // fn(Connection&) on the key's connection. A failure that broke a connection which had been
  // idle in between (the daemon may have restarted since) is retried once on a new one.
  template <typename Fn>
  auto Run(std::string_view key, Fn&& fn) -> decltype(fn(std::declval<client::Connection&>())) {
    for (int attempt = 0;; ++attempt) {
      bool fresh = false;
      auto c = ConnectionFor(key, fresh);
      if (!c.ok()) return c.status();
      auto r = fn(**c);
      if (r.ok() || !(*c)->broken()) return r;
      Drop();
      if (fresh || attempt > 0) return r;
    }
  }

 private:
  std::vector<std::string> Targets(std::string_view key) {
    if (routes_ != nullptr) {
      if (const auto view = routes_->View(); view != nullptr) return routes_->Targets(*view, key);
    }
    return {options_.client.address};
  }

  const ConnectorOptions& options_;
  client::ClusterRoutes* const routes_;  // nullptr: no cluster routing
  std::map<std::string, std::unique_ptr<client::Connection>> connections_;
  std::string current_;
  bool connect_failed_ = false;
};

namespace {

constexpr std::size_t kMaxWorkers = 256;

Status Closed() {
  return Status(StatusCode::kCancelled, "the kvdepot connector was closed before this key ran");
}

std::string StatusText(std::uint16_t code, std::span<const std::byte> body) {
  std::string text(StatusCodeName(static_cast<StatusCode>(code)));
  if (!body.empty()) {
    text += ": ";
    text.append(reinterpret_cast<const char*>(body.data()), body.size());
  }
  return text;
}

}  // namespace

Result<std::unique_ptr<Connector>> Connector::Create(ConnectorOptions options) {
  if (options.workers == 0 || options.workers > kMaxWorkers) {
    return InvalidArgument("lmcache_mp: num_workers is " + std::to_string(options.workers) +
                           "; set adapter_params.num_workers to 1.." + std::to_string(kMaxWorkers));
  }
  if (options.max_pipeline == 0) {
    return InvalidArgument(
        "lmcache_mp: max_pipeline is 0; set adapter_params.max_pipeline to 1 "
        "or more");
  }
  if (options.client.address.empty()) {
    return InvalidArgument(
        "lmcache_mp: address is empty; set adapter_params.address to "
        "\"HOST:PORT\" or \"unix:/path\" of kvdepotd's native listener");
  }
  if (options.key_prefix.size() >= options.client.limits.max_key_bytes) {
    return InvalidArgument("lmcache_mp: key_prefix is " +
                           std::to_string(options.key_prefix.size()) +
                           " bytes, leaving no room for LMCache's key within kvdepot's " +
                           std::to_string(options.client.limits.max_key_bytes) +
                           "-byte key limit; shorten adapter_params.key_prefix");
  }
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, "lmcache_mp: eventfd");
  std::unique_ptr<Connector> connector(new Connector(std::move(options), fd));
  if (connector->options_.client.cluster_routing == client::ClusterRouting::kAuto) {
    connector->routed_ = std::make_unique<client::Client>(connector->options_.client);
  }
  client::ClusterRoutes* routes =
      connector->routed_ != nullptr ? connector->routed_->cluster_routes() : nullptr;
  for (std::size_t i = 0; i < connector->options_.workers; ++i) {
    connector->workers_.push_back(std::make_unique<Worker>(connector->options_, routes));
  }
  for (auto& worker : connector->workers_) {
    connector->threads_.emplace_back(
        [c = connector.get(), w = worker.get()] { c->WorkerLoop(*w); });
  }
  return connector;
}

Connector::Connector(ConnectorOptions options, int event_fd)
    : options_(std::move(options)), event_fd_(event_fd) {}

Connector::~Connector() {
  Close();
  ::close(event_fd_);
}

Result<std::uint64_t> Connector::SubmitGet(std::vector<std::string> keys,
                                           std::vector<std::span<std::byte>> buffers) {
  if (keys.size() != buffers.size()) {
    return InvalidArgument("submit_batch_get: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(buffers.size()) + " buffers");
  }
  auto batch = std::make_shared<Batch>();
  batch->op = Op::kGet;
  batch->keys = std::move(keys);
  batch->targets = std::move(buffers);
  return Submit(std::move(batch));
}

Result<std::uint64_t> Connector::SubmitSet(std::vector<std::string> keys,
                                           std::vector<std::span<const std::byte>> buffers) {
  if (keys.size() != buffers.size()) {
    return InvalidArgument("submit_batch_set: " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(buffers.size()) + " buffers");
  }
  auto batch = std::make_shared<Batch>();
  batch->op = Op::kSet;
  batch->keys = std::move(keys);
  batch->sources = std::move(buffers);
  return Submit(std::move(batch));
}

Result<std::uint64_t> Connector::SubmitExists(std::vector<std::string> keys) {
  auto batch = std::make_shared<Batch>();
  batch->op = Op::kExists;
  batch->keys = std::move(keys);
  return Submit(std::move(batch));
}

Result<std::uint64_t> Connector::SubmitDelete(std::vector<std::string> keys) {
  auto batch = std::make_shared<Batch>();
  batch->op = Op::kDelete;
  batch->keys = std::move(keys);
  return Submit(std::move(batch));
}

Result<std::uint64_t> Connector::Submit(std::shared_ptr<Batch> batch) {
  const std::size_t n = batch->keys.size();
  batch->per_key.assign(n, 0);
  batch->invalid.assign(n, 0);
  const std::size_t max_key = options_.client.limits.max_key_bytes;
  for (std::size_t i = 0; i < n; ++i) {
    batch->keys[i].insert(0, options_.key_prefix);
    if (batch->keys[i].empty() || batch->keys[i].size() > max_key) {
      batch->invalid[i] = 1;
      batch->Fail(i, "the key is " + std::to_string(batch->keys[i].size()) +
                         " bytes (with key_prefix); kvdepot keys are 1.." +
                         std::to_string(max_key) + " bytes");
    }
  }
  // GET/SET spread over the workers; EXISTS/DELETE are one round trip per max_batch keys.
  std::size_t tiles = 1;
  if ((batch->op == Op::kGet || batch->op == Op::kSet) && n > 0) {
    tiles = std::min(options_.workers, n);
  }
  const std::size_t per_tile = n == 0 ? 0 : (n + tiles - 1) / tiles;
  std::uint64_t id = 0;
  {
    std::lock_guard lock(queue_mu_);
    if (closing_) {
      return Status(StatusCode::kCancelled,
                    "the kvdepot connector is closed; create a new one to submit more work");
    }
    id = next_future_id_++;
    batch->id = id;
    if (n == 0) {
      PushCompletion(Completion{id, true, {}, {}});
      return id;
    }
    std::size_t made = 0;
    for (std::size_t begin = 0; begin < n; begin += per_tile) ++made;
    batch->tiles_left.store(made, std::memory_order_relaxed);
    if (batch->op == Op::kExists) {
      // Lookups go ahead of queued loads and stores: the engine waits on them to schedule a
      // request, and they are one small round trip (a single tile).
      queue_.push_front(Tile{batch, 0, n});
    } else {
      for (std::size_t begin = 0; begin < n; begin += per_tile) {
        queue_.push_back(Tile{batch, begin, std::min(n, begin + per_tile)});
      }
    }
  }
  queue_cv_.notify_all();
  return id;
}

void Connector::WorkerLoop(Worker& worker) {
  for (;;) {
    Tile tile;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing, and every queued tile has been taken
      tile = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      RunTile(worker, tile);
    } catch (const std::exception& e) {  // e.g. bad_alloc: fail what is left, keep the thread
      for (std::size_t i = tile.begin; i < tile.end; ++i) {
        if (tile.batch->per_key[i] == 0) tile.batch->Fail(i, std::string("internal: ") + e.what());
      }
      worker.Drop();
    }
    FinishTile(tile);
  }
}

void Connector::RunTile(Worker& worker, const Tile& tile) {
  switch (tile.batch->op) {
    case Op::kGet: return RunGet(worker, tile);
    case Op::kSet: return RunSet(worker, tile);
    case Op::kExists:
    case Op::kDelete: return RunKeyList(worker, tile);
  }
}

void Connector::RunGet(Worker& worker, const Tile& tile) {
  Batch& b = *tile.batch;
  for (std::size_t i = tile.begin; i < tile.end; ++i) {
    if (b.invalid[i]) continue;
    if (closing_.load(std::memory_order_acquire)) {
      b.Fail(i, Closed().ToString());
      continue;
    }
    const std::span<std::byte> target = b.targets[i];
    auto r = worker.Run(b.keys[i],
                        [&](client::Connection& c) { return c.GetInto(b.keys[i], {}, target); });
    if (!r.ok()) {
      b.Fail(i, r.status().ToString());
      if (worker.connect_failed()) {  // the daemon is unreachable: do not wait on it per key
        for (std::size_t j = i + 1; j < tile.end; ++j) {
          if (!b.invalid[j]) b.Fail(j, r.status().ToString());
        }
        return;
      }
    } else if (!r->has_value()) {
      b.Miss(i);
    } else if (**r != target.size()) {
      b.Fail(i, "the stored value is " + std::to_string(**r) + " bytes, the buffer " +
                    std::to_string(target.size()) + " (a different chunk layout?)");
    } else {
      b.per_key[i] = 1;
    }
  }
}

// SETs are pipelined: up to max_pipeline PUTs (and max_pipeline_bytes of values, but at least
// one PUT) are sent back to back, then their replies read.
// A broken connection fails the keys not yet confirmed; once per tile, when the connection had
// been idle before (the daemon may have restarted), they are resent on a new connection.
void Connector::RunSet(Worker& worker, const Tile& tile) {
  Batch& b = *tile.batch;
  bool retried = false;
  std::size_t i = tile.begin;
  std::vector<std::pair<std::size_t, std::uint64_t>> sent;  // key index, request id
  std::vector<std::byte> body;
  while (i < tile.end) {
    if (b.invalid[i]) {
      ++i;
      continue;
    }
    if (closing_.load(std::memory_order_acquire)) {
      for (; i < tile.end; ++i) {
        if (!b.invalid[i]) b.Fail(i, Closed().ToString());
      }
      return;
    }
    bool fresh = false;
    auto c = worker.ConnectionFor(b.keys[i], fresh);
    if (!c.ok()) {
      for (; i < tile.end; ++i) {
        if (!b.invalid[i]) b.Fail(i, c.status().ToString());
      }
      return;
    }
    client::Connection& conn = **c;
    sent.clear();
    Status broken;
    std::size_t next = i;
    std::size_t window_bytes = 0;
    for (; next < tile.end && sent.size() < options_.max_pipeline; ++next) {
      if (b.invalid[next]) continue;
      if (!sent.empty() && window_bytes + b.sources[next].size() > options_.max_pipeline_bytes) {
        break;
      }
      // In a cluster a window holds the keys of one owner: the next owner's keys start another.
      if (!sent.empty() && worker.RouteOf(b.keys[next]) != worker.current()) break;
      window_bytes += b.sources[next].size();
      auto id = conn.SendPut(b.keys[next], b.sources[next]);
      if (!id.ok()) {
        broken = id.status();
        break;
      }
      sent.emplace_back(next, *id);
    }
    std::size_t confirmed = 0;
    for (; confirmed < sent.size(); ++confirmed) {
      const auto [index, request_id] = sent[confirmed];
      auto h = conn.ReadResponse(body);
      if (!h.ok()) {
        broken = h.status();
        break;
      }
      if (h->request_id != request_id) {
        broken = Corruption("protocol: PUT reply " + std::to_string(h->request_id) + " where " +
                            std::to_string(request_id) + " was expected");
        break;
      }
      if (h->status != 0) {
        b.Fail(index, "put refused: " + StatusText(h->status, body));
        continue;
      }
      auto codes = protocol::DecodeStatusList(body);
      if (!codes.ok() || codes->size() != 1) {
        broken = Corruption("protocol: malformed PUT reply");
        break;
      }
      if ((*codes)[0] == StatusCode::kOk) {
        b.per_key[index] = 1;
      } else {
        b.Fail(index, "put refused: " + std::string(StatusCodeName((*codes)[0])));
      }
    }
    if (broken.ok()) {
      i = next;
      continue;
    }
    worker.Drop();
    // Resume at the first key without a reply.
    const std::size_t resume = confirmed < sent.size() ? sent[confirmed].first : next;
    if (!fresh && !retried) {
      retried = true;
      i = resume;
      continue;
    }
    for (std::size_t j = resume; j < tile.end; ++j) {
      if (!b.invalid[j]) b.Fail(j, broken.ToString());
    }
    return;
  }
}

// EXISTS (LOOKUP) and DELETE: the tile's valid keys, max_batch per request.
void Connector::RunKeyList(Worker& worker, const Tile& tile) {
  Batch& b = *tile.batch;
  const std::size_t max_batch = options_.client.limits.max_batch;
  std::vector<std::size_t> index;
  std::vector<std::string> keys;
  for (std::size_t first = tile.begin; first < tile.end;) {
    index.clear();
    keys.clear();
    for (; first < tile.end && keys.size() < max_batch; ++first) {
      if (b.invalid[first]) continue;
      index.push_back(first);
      keys.push_back(b.keys[first]);
    }
    if (keys.empty()) continue;
    if (closing_.load(std::memory_order_acquire)) {
      for (std::size_t i : index) b.Fail(i, Closed().ToString());
      continue;
    }
    Status failed;
    // In a cluster the routed client splits the keys by owner and asks every owner at once.
    if (b.op == Op::kExists) {
      auto r = routed_ != nullptr
                   ? routed_->Lookup(keys)
                   : worker.Run(keys[0], [&](client::Connection& c) { return c.Lookup(keys); });
      if (!r.ok()) {
        failed = r.status();
      } else if (r->tiers.size() != keys.size()) {
        failed = Corruption("protocol: LOOKUP answered " + std::to_string(r->tiers.size()) +
                            " of " + std::to_string(keys.size()) + " keys");
      } else {
        for (std::size_t k = 0; k < keys.size(); ++k) {
          b.per_key[index[k]] = r->tiers[k] != protocol::Tier::kNone ? 1 : 0;
        }
      }
    } else {
      auto r = routed_ != nullptr
                   ? routed_->Delete(keys)
                   : worker.Run(keys[0], [&](client::Connection& c) { return c.Delete(keys); });
      if (!r.ok()) {
        failed = r.status();
      } else if (r->size() != keys.size()) {
        failed = Corruption("protocol: DELETE answered " + std::to_string(r->size()) + " of " +
                            std::to_string(keys.size()) + " keys");
      } else {
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const StatusCode code = (*r)[k];
          if (code == StatusCode::kOk) {
            b.per_key[index[k]] = 1;
          } else if (code != StatusCode::kNotFound) {
            b.Fail(index[k], "delete refused: " + std::string(StatusCodeName(code)));
          }
        }
      }
    }
    if (!failed.ok()) {
      for (std::size_t i : index) b.Fail(i, failed.ToString());
    }
  }
}

void Connector::FinishTile(const Tile& tile) {
  Batch& b = *tile.batch;
  if (b.tiles_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Completion done;
  done.future_id = b.id;
  done.per_key = std::move(b.per_key);
  std::lock_guard lock(b.mu);
  const bool misses_fail = b.op == Op::kGet;
  done.ok = b.failures == 0 && (!misses_fail || b.misses == 0);
  if (misses_fail && b.misses > 0) {
    done.error = std::to_string(b.misses) + " of " + std::to_string(b.keys.size()) +
                 " keys not found in kvdepot";
    if (!b.first_error.empty()) done.error += "; ";
  }
  if (b.failures > 0) {
    done.error += std::to_string(b.failures) + " of " + std::to_string(b.keys.size()) +
                  " keys failed, first: " + b.first_error;
  }
  PushCompletion(std::move(done));
}

void Connector::PushCompletion(Completion completion) {
  {
    std::lock_guard lock(completions_mu_);
    completions_.push_back(std::move(completion));
  }
  const std::uint64_t one = 1;
  // EAGAIN means the counter is saturated: the descriptor is readable anyway.
  while (::write(event_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

std::vector<Completion> Connector::DrainCompletions() {
  // Reset the eventfd first: a completion queued after this read signals it again, so no
  // wake-up is lost (at worst one is spurious and finds nothing).
  std::uint64_t count = 0;
  while (::read(event_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  std::vector<Completion> out;
  std::lock_guard lock(completions_mu_);
  out.swap(completions_);
  return out;
}

void Connector::Close() {
  std::lock_guard close_lock(close_mu_);
  {
    std::lock_guard lock(queue_mu_);
    closing_.store(true, std::memory_order_release);
  }
  queue_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  workers_.clear();
}

}  // namespace kvdepot::python::lmcache_mp
