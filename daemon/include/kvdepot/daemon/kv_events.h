// KV-cache events: what kvdepotd makes readable and what stops being readable, per tier,
// published in vLLM's KV-event format over ZeroMQ (docs/events.md) so that prefix-aware routers
// (llm-d's precise prefix-cache scorer, Dynamo's KV router) see kvdepot's chunks.
//
// Wire (vLLM's ZmqEventPublisher, pinned in docs/events.md): a PUB socket sends multipart
// messages (topic, 8-byte big-endian sequence number, msgpack payload); the payload is a
// KVEventBatch [ts, [event, ...], data_parallel_rank] with array-like, tagged events
// ["BlockStored", ...], ["BlockRemoved", ...], ["AllBlocksCleared"]. An optional ROUTER socket
// answers replay requests (a start sequence number) from a ring of past batches.
//
// Producers (the store's I/O paths and the SSD tier's threads) never block: each call copies the
// key into a bounded queue, or counts the event as dropped when the queue is full. One publisher
// thread turns queued events into batches, sends them and serves replay requests.
//
// Thread-safety: Stored/Removed/Cleared/SetOrigin/stats from any thread; Start and Stop from one
// controlling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

// The tier a chunk is (or was) readable from, as vLLM's `medium` field names it: "GPU" (vLLM's
// MEDIUM_GPU), "CPU" (vLLM's CPU offloading), "DISK" (the SSD tier).
enum class EventMedium : std::uint8_t { kGpu, kCpu, kDisk };
std::string_view EventMediumName(EventMedium medium);

struct KvEventsOptions {
  // The PUB socket's ZeroMQ endpoint, bound by the daemon (tcp://HOST:PORT; PORT * picks a free
  // port). Empty: events off.
  std::string publish;
  // The replay ROUTER socket's endpoint, bound by the daemon; empty: no replay.
  std::string replay;
  // First part of every message's topic; "TOPIC@INSTANCE@MODEL" when the chunk's origin is known
  // (llm-d's "kv@<pod>@<model>" convention), "TOPIC" otherwise.
  std::string topic = "kv";
  std::uint32_t queue_events = 100000;   // bounded queue; beyond it events are dropped
  std::uint32_t replay_batches = 10000;  // past batches kept for replay
  std::uint32_t batch_events = 512;      // most events in one batch
  std::uint32_t block_size = 256;        // tokens per chunk, reported as block_size
  std::uint32_t send_hwm = 100000;       // ZeroMQ high-water mark of the PUB socket
  // The 16-byte namespace id of LMCache's keys (lm::NamespaceId(lm.namespace)): keys under it are
  // LMCache CacheEngineKey strings, whose model name and chunk hash the events carry.
  std::string lm_namespace_id;
};

struct KvEventStats {
  std::uint64_t events_queued = 0;   // accepted into the queue
  std::uint64_t events_dropped = 0;  // refused: the queue was full
  std::uint64_t events_skipped = 0;  // keys that name no chunk (neither a chunk nor an LMCache key)
  std::uint64_t events_published = 0;  // events sent in a batch
  std::uint64_t batches_published = 0;
  std::uint64_t send_errors = 0;  // batches ZeroMQ refused (the PUB socket drops at its HWM)
  std::uint64_t replay_requests = 0;
  std::uint64_t replay_batches_sent = 0;
  std::uint64_t queue_depth = 0;  // gauge
  std::uint64_t next_sequence = 0;
};

class KvEventPublisher {
 public:
  // Binds the sockets and starts the publisher thread. Errors name the endpoint and ZeroMQ's
  // reason (e.g. "Address already in use").
  static Result<std::unique_ptr<KvEventPublisher>> Start(const KvEventsOptions& options);
  ~KvEventPublisher();  // Stop()s
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Publishes what is queued (for at most a second), then closes the sockets. Idempotent.
  void Stop();

  // `key` became readable from / stopped being readable from `medium`. Never blocks: false (the
  // event counted as dropped) when the queue is full.
  bool Stored(std::string_view key, EventMedium medium);
  bool Removed(std::string_view key, EventMedium medium);
  // Every chunk announced so far is void (a restart lost the host tier).
  bool Cleared();
  // Start-up only (not an I/O thread): waits for room instead of dropping.
  void StoredWait(std::string_view key, EventMedium medium);

  // Chunks of the 16-byte chunk-key namespace `namespace_id` belong to engine instance
  // `instance` of model `model` (as a client declared them; the last declaration wins). Events of
  // keys under it queued from now on carry them in their topic.
  bool SetOrigin(std::string_view namespace_id, std::string_view instance, std::string_view model);

  // The endpoints actually bound (the port filled in when the option asked for *).
  const std::string& endpoint() const;
  const std::string& replay_endpoint() const;
  KvEventStats stats() const;

  class Impl;

 private:
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon
