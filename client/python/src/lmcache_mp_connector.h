// The engine of kvdepot's LMCache multi-process (MP) mode L2 connector: the native object that
// LMCache's `native_plugin` L2 adapter type loads and wraps in its NativeConnectorL2Adapter
// (docs/lmcache.md, "LMCache MP mode"). Plain C++ (no Python): lmcache_mp_module.cc binds it.
//
// Contract (LMCache's native connector interface, read at the commits pinned in docs/lmcache.md):
// - Submit* queue a batch and return its future id at once (never block on I/O). Each batch
//   produces exactly one Completion, also when it fails or the connector is closed.
// - event_fd() is an eventfd that is readable while completions wait to be drained;
//   DrainCompletions() resets it, then returns every completion queued so far.
// - Completion.per_key has one entry per key: GET 1 = the key's value was received whole into its
//   buffer; SET 1 = stored; EXISTS 1 = present; DELETE 1 = deleted (0: it was absent).
//   Completion.ok is true when every key of a GET/SET succeeded, and when an EXISTS/DELETE got
//   its answer for every key (absent keys are not failures there); `error` then names the first
//   failure. A GET miss is a per-key 0 with ok false ("N of M keys not loaded"), so a caller that
//   reads only `ok` never takes a missed buffer for a loaded one.
// - Buffers: the caller keeps every buffer alive and unmoved until the batch's completion is
//   drained or Close() has returned. GET receives straight into them, SET sends from them.
// - Close() stops accepting work, fails queued batches ("closed") and the unstarted keys of
//   running ones, waits for each worker's current key (bounded by the I/O timeout), queues the
//   completions, and returns. The eventfd stays open until destruction.
//
// Threading: every method is thread-safe. `workers` threads each own one connection to
// kvdepotd (opened lazily, reopened after a failure); a GET/SET batch is cut into at most
// `workers` tiles that run in parallel; a tile's SETs are pipelined (sent back to back, then the
// replies read), its GETs are one round trip per key straight into the caller's buffer.
// Tiles run in submission order, except that an EXISTS batch goes ahead of the queued tiles.
// Routing: with ConnectorOptions::client.cluster_routing kAuto (the default) and a daemon in a
// cluster, each worker keeps one connection per member and Worker::ConnectionFor sends each key
// to its owner (falling back to the key's other targets when the owner is unreachable); a SET
// pipeline window holds one owner's keys; EXISTS/DELETE are split by owner and sent to all owners
// at once (client::Client). Otherwise every connection goes to client.address.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/client/client.h"

namespace kvdepot::python::lmcache_mp {

struct ConnectorOptions {
  // address, per send/receive timeout, token, TLS, cluster_routing (docs/cluster.md)
  client::ClientOptions client;
  std::size_t workers = 4;  // threads, each with one connection
  std::string key_prefix;   // prepended to every key LMCache hands over
  // SETs in flight per connection before their replies are read: at most max_pipeline, and
  // past max_pipeline_bytes of values only one (deep pipelines of large values measured slower).
  std::size_t max_pipeline = 32;
  std::size_t max_pipeline_bytes = 256 << 10;
};

struct Completion {
  std::uint64_t future_id = 0;
  bool ok = true;
  std::string error;
  std::vector<std::uint8_t> per_key;  // one 0/1 per key (see above)
};

class Connector {
 public:
  // Checks the options, creates the eventfd and starts the workers. No connection is opened
  // here: an unreachable daemon shows up as failed completions, not as a constructor error.
  static Result<std::unique_ptr<Connector>> Create(ConnectorOptions options);
  ~Connector();
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  int event_fd() const { return event_fd_; }

  // keys.size() == buffers.size(). kCancelled after Close().
  Result<std::uint64_t> SubmitGet(std::vector<std::string> keys,
                                  std::vector<std::span<std::byte>> buffers);
  Result<std::uint64_t> SubmitSet(std::vector<std::string> keys,
                                  std::vector<std::span<const std::byte>> buffers);
  Result<std::uint64_t> SubmitExists(std::vector<std::string> keys);
  Result<std::uint64_t> SubmitDelete(std::vector<std::string> keys);

  std::vector<Completion> DrainCompletions();
  void Close();  // idempotent

 private:
  enum class Op { kGet, kSet, kExists, kDelete };
  struct Batch;
  struct Tile {
    std::shared_ptr<Batch> batch;
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  class Worker;

  explicit Connector(ConnectorOptions options, int event_fd);
  Result<std::uint64_t> Submit(std::shared_ptr<Batch> batch);
  void WorkerLoop(Worker& worker);
  void RunTile(Worker& worker, const Tile& tile);
  void RunGet(Worker& worker, const Tile& tile);
  void RunSet(Worker& worker, const Tile& tile);
  void RunKeyList(Worker& worker, const Tile& tile);  // EXISTS and DELETE
  // Records the tile's outcome; the last tile of a batch queues its completion.
  void FinishTile(const Tile& tile);
  void PushCompletion(Completion completion);

  const ConnectorOptions options_;
  const int event_fd_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Tile> queue_;
  std::atomic<bool> closing_{false};  // set under queue_mu_; read by workers between keys
  std::uint64_t next_future_id_ = 1;

  std::mutex completions_mu_;
  std::vector<Completion> completions_;

  // With cluster routing: the routed client (EXISTS/DELETE) whose ClusterRoutes the workers share.
  std::unique_ptr<client::Client> routed_;

  std::mutex close_mu_;  // serialises Close()
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace kvdepot::python::lmcache_mp
