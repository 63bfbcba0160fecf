#include <zmq.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "events/event_encoding.h"
#include "events/event_key.h"
#include "events/event_queue.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/log.h"

namespace kvdepot::daemon {

using events::BlockHash;
using events::EventKind;
using events::QueuedEvent;
using events::WireEvent;

std::string_view EventMediumName(EventMedium medium) {
  switch (medium) {
    case EventMedium::kGpu: return "GPU";
    case EventMedium::kCpu: return "CPU";
    case EventMedium::kDisk: return "DISK";
  }
  return "CPU";
}

namespace {

std::array<char, 8> BigEndian(std::int64_t value) {
  std::array<char, 8> out{};
  auto u = static_cast<std::uint64_t>(value);
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  return out;
}

std::string ZmqError(std::string_view what, std::string_view endpoint) {
  return std::string(what) + " " + std::string(endpoint) + ": " + zmq_strerror(zmq_errno());
}

// Sends `parts` as one multipart message; false when ZeroMQ refused any part.
bool SendMultipart(void* socket, std::initializer_list<std::string_view> parts) {
  std::size_t i = 0;
  for (std::string_view p : parts) {
    const int flags = ++i < parts.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, p.data(), p.size(), flags | ZMQ_DONTWAIT) < 0) return false;
  }
  return true;
}

}  // namespace

class KvEventPublisher::Impl {
 public:
  // How long the publisher lets events gather after the first one of a batch.
  static constexpr std::chrono::milliseconds kBatchWindow{5};
  // Namespaces whose origin is remembered (SetOrigin); declarations for further ones are ignored
  // (logged once), so clients cannot grow the table without bound.
  static constexpr std::size_t kMaxOrigins = 65536;

  explicit Impl(const KvEventsOptions& options) : options_(options), queue_(options.queue_events) {}

  ~Impl() { Stop(); }

  Status Open() {
    ctx_ = zmq_ctx_new();
    if (ctx_ == nullptr) return Internal("kv events: cannot create a ZeroMQ context");
    KVD_ASSIGN_OR_RETURN(
        pub_, Bind(ZMQ_PUB, options_.publish, static_cast<int>(options_.send_hwm), endpoint_));
    if (!options_.replay.empty()) {
      // A replay answers with up to replay_batches messages at once: room for all of them.
      KVD_ASSIGN_OR_RETURN(
          router_, Bind(ZMQ_ROUTER, options_.replay, static_cast<int>(options_.replay_batches) + 16,
                        replay_endpoint_));
    }
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  void Stop() {
    queue_.Close();
    if (thread_.joinable()) thread_.join();
    for (void** s : {&pub_, &router_}) {
      if (*s != nullptr) zmq_close(*s);
      *s = nullptr;
    }
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
    ctx_ = nullptr;
  }

  bool Push(QueuedEvent&& event) {
    if (queue_.TryPush(std::move(event))) {
      queued_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  void PushWait(QueuedEvent&& event) {
    if (queue_.PushWait(std::move(event))) queued_.fetch_add(1, std::memory_order_relaxed);
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  KvEventStats stats() const {
    KvEventStats s;
    s.events_queued = queued_.load(std::memory_order_relaxed);
    s.events_dropped = dropped_.load(std::memory_order_relaxed);
    s.events_skipped = skipped_.load(std::memory_order_relaxed);
    s.events_published = published_.load(std::memory_order_relaxed);
    s.batches_published = batches_.load(std::memory_order_relaxed);
    s.send_errors = send_errors_.load(std::memory_order_relaxed);
    s.replay_requests = replay_requests_.load(std::memory_order_relaxed);
    s.replay_batches_sent = replay_sent_.load(std::memory_order_relaxed);
    s.queue_depth = queue_.size();
    s.next_sequence = next_seq_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  Result<void*> Bind(int type, const std::string& endpoint, int send_hwm, std::string& bound) {
    void* socket = zmq_socket(ctx_, type);
    if (socket == nullptr) return Internal(ZmqError("kv events: socket for", endpoint));
    const int linger_ms = 1000;  // Stop() gives queued messages a second to leave
    zmq_setsockopt(socket, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    zmq_setsockopt(socket, ZMQ_SNDHWM, &send_hwm, sizeof send_hwm);
    if (zmq_bind(socket, endpoint.c_str()) != 0) {
      Status s = Unavailable(ZmqError("kv events: cannot bind", endpoint));
      zmq_close(socket);
      return s;
    }
    std::array<char, 512> last{};
    std::size_t len = last.size();
    zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, last.data(), &len);
    bound = std::string(last.data());
    return socket;
  }

  // The publisher thread: batches what is queued, serves replay requests; after Stop() it
  // publishes what is still queued and returns.
  void Run() {
    std::vector<QueuedEvent> got;
    const auto wait = std::chrono::milliseconds(router_ != nullptr ? 10 : 100);
    while (true) {
      got.clear();
      std::size_t n = queue_.Pop(got, options_.batch_events, wait);
      if (n != 0 && n < options_.batch_events && !queue_.closed()) {
        // Let a batch gather: one message per kBatchWindow instead of one per event, and the
        // producers, finding the queue non-empty, wake nobody (measured in docs/benchmarks.md).
        std::this_thread::sleep_for(kBatchWindow);
        n += queue_.Pop(got, options_.batch_events - n, std::chrono::milliseconds(0));
      }
      if (router_ != nullptr) ServeReplays();
      if (n == 0) {
        if (queue_.closed() && queue_.size() == 0) return;
        continue;
      }
      Process(got);
    }
  }

  std::string TopicFor(const events::KeyIdentity& id) const {
    if (!id.model.empty()) return options_.topic + "@@" + std::string(id.model);
    const auto it = origins_.find(std::string(id.namespace_id));
    if (it == origins_.end()) return options_.topic;
    return options_.topic + "@" + it->second.first + "@" + it->second.second;
  }

  void Process(std::vector<QueuedEvent>& got) {
    std::string topic;
    std::vector<WireEvent> batch;
    std::uint64_t count = 0;  // queued events in `batch`
    auto flush = [&] {
      if (batch.empty()) return;
      Publish(topic, batch, count);
      batch.clear();
      count = 0;
    };
    for (QueuedEvent& e : got) {
      if (e.kind == QueuedEvent::Kind::kOrigin) {
        if (origins_.size() < kMaxOrigins || origins_.count(e.key) != 0) {
          origins_[e.key] = {std::move(e.instance), std::move(e.model)};
        } else if (!origins_full_logged_) {
          origins_full_logged_ = true;
          Log(LogLevel::kWarn,
              "kv events: " + std::to_string(kMaxOrigins) +
                  " namespaces have an origin; EVENT_ORIGIN for further namespaces is ignored");
        }
        continue;
      }
      std::string event_topic = options_.topic;
      WireEvent wire;
      wire.medium = e.medium;
      if (e.kind == QueuedEvent::Kind::kCleared) {
        wire.kind = EventKind::kCleared;
      } else {
        auto id = events::IdentifyKey(e.key, options_.lm_namespace_id);
        if (!id) {
          skipped_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        event_topic = TopicFor(*id);
        wire.kind = e.kind == QueuedEvent::Kind::kStored ? EventKind::kStored : EventKind::kRemoved;
        wire.hashes.push_back(std::move(id->hash));
      }
      if (event_topic != topic) {
        flush();
        topic = std::move(event_topic);
      }
      // Consecutive removals from one medium share one event; a BlockStored's hashes would
      // claim a parent chain kvdepot does not know, so each stored chunk is its own event.
      if (wire.kind == EventKind::kRemoved && !batch.empty() &&
          batch.back().kind == EventKind::kRemoved && batch.back().medium == wire.medium) {
        batch.back().hashes.push_back(std::move(wire.hashes.front()));
      } else {
        batch.push_back(std::move(wire));
      }
      if (++count >= options_.batch_events) flush();
    }
    flush();
  }

  void Publish(const std::string& topic, const std::vector<WireEvent>& batch, std::uint64_t count) {
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string payload = events::EncodeEventBatch(ts, batch, options_.block_size, 0);
    const std::int64_t seq = static_cast<std::int64_t>(next_seq_.load(std::memory_order_relaxed));
    const auto seq_bytes = BigEndian(seq);
    if (!SendMultipart(pub_, {topic, {seq_bytes.data(), seq_bytes.size()}, payload})) {
      send_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    next_seq_.fetch_add(1, std::memory_order_relaxed);
    published_.fetch_add(count, std::memory_order_relaxed);
    batches_.fetch_add(1, std::memory_order_relaxed);
    if (router_ != nullptr && options_.replay_batches != 0) {
      if (ring_.size() == options_.replay_batches) ring_.pop_front();
      ring_.emplace_back(seq, std::move(payload));
    }
  }

  // vLLM's replay protocol: a request is (identity, empty, 8-byte big-endian start sequence);
  // the answer is (identity, empty, seq, payload) for every kept batch from start on, then
  // (identity, empty, -1, empty).
  void ServeReplays() {
    zmq_pollitem_t item{router_, 0, ZMQ_POLLIN, 0};
    while (zmq_poll(&item, 1, 0) > 0 && (item.revents & ZMQ_POLLIN) != 0) {
      std::vector<std::string> frames;
      int more = 1;
      while (more != 0) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, router_, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&msg);
          return;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
        more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
      }
      if (frames.size() != 3 || frames[2].size() != 8) {
        Log(LogLevel::kDebug, "kv events: ignored a malformed replay request",
            {{"frames", std::to_string(frames.size())}});
        continue;
      }
      replay_requests_.fetch_add(1, std::memory_order_relaxed);
      std::uint64_t start = 0;
      for (const char c : frames[2]) start = (start << 8) | static_cast<unsigned char>(c);
      for (const auto& [seq, payload] : ring_) {
        if (static_cast<std::uint64_t>(seq) < start) continue;
        const auto seq_bytes = BigEndian(seq);
        SendMultipart(router_, {frames[0], {}, {seq_bytes.data(), seq_bytes.size()}, payload});
        replay_sent_.fetch_add(1, std::memory_order_relaxed);
      }
      const auto end = BigEndian(-1);
      SendMultipart(router_, {frames[0], {}, {end.data(), end.size()}, {}});
    }
  }

  const KvEventsOptions options_;
  events::EventQueue queue_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* router_ = nullptr;
  std::string endpoint_, replay_endpoint_;
  std::thread thread_;
  // The publisher thread's own state.
  std::map<std::string, std::pair<std::string, std::string>> origins_;  // namespace id -> origin
  bool origins_full_logged_ = false;
  std::deque<std::pair<std::int64_t, std::string>> ring_;  // replay: (seq, payload)
  std::atomic<std::uint64_t> next_seq_{0};
  std::atomic<std::uint64_t> queued_{0}, dropped_{0}, skipped_{0}, published_{0}, batches_{0},
      send_errors_{0}, replay_requests_{0}, replay_sent_{0};
};

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventsOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  KVD_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvEventPublisher::~KvEventPublisher() {
  Stop();
}
void KvEventPublisher::Stop() {
  impl_->Stop();
}

bool KvEventPublisher::Stored(std::string_view key, EventMedium medium) {
  return impl_->Push({QueuedEvent::Kind::kStored, medium, std::string(key), {}, {}});
}

bool KvEventPublisher::Removed(std::string_view key, EventMedium medium) {
  return impl_->Push({QueuedEvent::Kind::kRemoved, medium, std::string(key), {}, {}});
}

bool KvEventPublisher::Cleared() {
  return impl_->Push({QueuedEvent::Kind::kCleared, EventMedium::kCpu, {}, {}, {}});
}

void KvEventPublisher::StoredWait(std::string_view key, EventMedium medium) {
  impl_->PushWait({QueuedEvent::Kind::kStored, medium, std::string(key), {}, {}});
}

bool KvEventPublisher::SetOrigin(std::string_view namespace_id, std::string_view instance,
                                 std::string_view model) {
  return impl_->Push({QueuedEvent::Kind::kOrigin, EventMedium::kCpu, std::string(namespace_id),
                      std::string(instance), std::string(model)});
}

const std::string& KvEventPublisher::endpoint() const {
  return impl_->endpoint();
}
const std::string& KvEventPublisher::replay_endpoint() const {
  return impl_->replay_endpoint();
}
KvEventStats KvEventPublisher::stats() const {
  return impl_->stats();
}

}  // namespace kvdepot::daemon
