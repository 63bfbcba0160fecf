// KV events: the msgpack encoding against vLLM's array_like schema, block hashes of chunk keys and
// LMCache keys, the bounded queue, and the publisher over real ZeroMQ sockets on loopback (PUB
// messages, topics with origins, replay after a gap, drops when the queue is full).
#include <zmq.h>

#include <gtest/gtest.h>
#include <chrono>
#include <cstring>
#include <msgpack.hpp>
#include <string>
#include <thread>
#include <vector>

#include "events/event_encoding.h"
#include "events/event_key.h"
#include "events/event_queue.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::daemon {
namespace {

using events::BlockHash;
using events::EventKind;
using events::WireEvent;

std::string ChunkKey(char ns, char chain) {
  return std::string(16, ns) + std::string(32, chain);
}

msgpack::object_handle Unpack(const std::string& payload) {
  return msgpack::unpack(payload.data(), payload.size());
}

TEST(KvEventEncodingTest, BatchIsVllmArrayLikeWithTaggedEvents) {
  WireEvent stored{EventKind::kStored, EventMedium::kCpu, {BlockHash{std::string(32, 'h')}}};
  WireEvent removed{
      EventKind::kRemoved, EventMedium::kDisk, {BlockHash{"", 7, false}, BlockHash{"", 5, true}}};
  WireEvent cleared{EventKind::kCleared, EventMedium::kCpu, {}};
  const std::string payload = events::EncodeEventBatch(12.5, {stored, removed, cleared}, 256, 0);
  auto handle = Unpack(payload);
  const msgpack::object& batch = handle.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);  // [ts, events, data_parallel_rank]
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 12.5);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& evs = batch.via.array.ptr[1];
  ASSERT_EQ(evs.via.array.size, 3u);

  // ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
  //  lora_name]
  const msgpack::object& s = evs.via.array.ptr[0];
  ASSERT_EQ(s.via.array.size, 8u);
  EXPECT_EQ(s.via.array.ptr[0].as<std::string>(), "BlockStored");
  ASSERT_EQ(s.via.array.ptr[1].via.array.size, 1u);
  const msgpack::object& h = s.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(h.type, msgpack::type::BIN);
  EXPECT_EQ(std::string(h.via.bin.ptr, h.via.bin.size), std::string(32, 'h'));
  EXPECT_TRUE(s.via.array.ptr[2].is_nil());
  EXPECT_EQ(s.via.array.ptr[3].via.array.size, 0u);
  EXPECT_EQ(s.via.array.ptr[4].as<int>(), 256);
  EXPECT_TRUE(s.via.array.ptr[5].is_nil());
  EXPECT_EQ(s.via.array.ptr[6].as<std::string>(), "CPU");
  EXPECT_TRUE(s.via.array.ptr[7].is_nil());

  // ["BlockRemoved", block_hashes, medium]
  const msgpack::object& r = evs.via.array.ptr[1];
  ASSERT_EQ(r.via.array.size, 3u);
  EXPECT_EQ(r.via.array.ptr[0].as<std::string>(), "BlockRemoved");
  ASSERT_EQ(r.via.array.ptr[1].via.array.size, 2u);
  EXPECT_EQ(r.via.array.ptr[1].via.array.ptr[0].as<std::uint64_t>(), 7u);
  EXPECT_EQ(r.via.array.ptr[1].via.array.ptr[1].as<std::int64_t>(), 5);  // as given (signed)
  EXPECT_EQ(r.via.array.ptr[2].as<std::string>(), "DISK");

  const msgpack::object& c = evs.via.array.ptr[2];
  ASSERT_EQ(c.via.array.size, 1u);
  EXPECT_EQ(c.via.array.ptr[0].as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventKeyTest, ChunkKeysHashAsTheirChainValue) {
  const std::string key = ChunkKey('n', 'c');
  auto id = events::IdentifyKey(key, std::string(16, 'L'));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->hash.bytes, std::string(32, 'c'));
  EXPECT_EQ(id->namespace_id, std::string(16, 'n'));
  EXPECT_TRUE(id->model.empty());
  EXPECT_FALSE(events::IdentifyKey("short raw key", "").has_value());
  EXPECT_FALSE(events::IdentifyKey(std::string(47, 'x'), "").has_value());
}

TEST(KvEventKeyTest, LmcacheKeysCarryModelAndHexHash) {
  const std::string lm(16, 'L');
  const std::string key = lm + "vllm@meta-llama/Llama-3.1-8B@1@0@1a2b@bfloat16   ";
  auto id = events::IdentifyKey(key, lm);  // its views point into `key`
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->model, "meta-llama/Llama-3.1-8B");
  EXPECT_TRUE(id->hash.bytes.empty());
  EXPECT_EQ(id->hash.integer, 0x1a2bu);
  EXPECT_FALSE(id->hash.integer_signed);

  auto negative = events::IdentifyKey(lm + "vllm@m@1@0@-ff", lm);
  ASSERT_TRUE(negative.has_value());
  EXPECT_TRUE(negative->hash.integer_signed);
  EXPECT_EQ(static_cast<std::int64_t>(negative->hash.integer), -255);

  // 17 hex digits: the low 64 bits, as vLLM's integer form keeps them.
  auto wide = events::IdentifyKey(lm + "vllm@m@1@0@1ffffffffffffffff", lm);
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->hash.integer, ~std::uint64_t{0});

  EXPECT_FALSE(events::IdentifyKey(lm + "vllm@m@1@0", lm).has_value());      // too few fields
  EXPECT_FALSE(events::IdentifyKey(lm + "vllm@m@1@0@xyz", lm).has_value());  // not hex
  EXPECT_FALSE(events::IdentifyKey(lm + "vllm@@1@0@12", lm).has_value());    // no model
}

TEST(KvEventQueueTest, BoundedQueueRefusesWhenFullAndDrainsInOrder) {
  events::EventQueue q(2);
  EXPECT_TRUE(q.TryPush({events::QueuedEvent::Kind::kStored, EventMedium::kCpu, "a", {}, {}}));
  EXPECT_TRUE(q.TryPush({events::QueuedEvent::Kind::kRemoved, EventMedium::kCpu, "b", {}, {}}));
  EXPECT_FALSE(q.TryPush({events::QueuedEvent::Kind::kStored, EventMedium::kCpu, "c", {}, {}}));
  std::vector<events::QueuedEvent> out;
  EXPECT_EQ(q.Pop(out, 10, std::chrono::milliseconds(0)), 2u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].key, "a");
  EXPECT_EQ(out[1].key, "b");
  EXPECT_TRUE(q.TryPush({events::QueuedEvent::Kind::kStored, EventMedium::kCpu, "d", {}, {}}));
  q.Close();
  EXPECT_FALSE(q.TryPush({events::QueuedEvent::Kind::kStored, EventMedium::kCpu, "e", {}, {}}));
  out.clear();
  EXPECT_EQ(q.Pop(out, 10, std::chrono::milliseconds(0)), 1u);  // queued events still drain
}

TEST(KvEventOriginProtocolTest, RoundTripAndRefusals) {
  const protocol::EventOrigin origin{std::string(16, 'n'), "pod-7", "meta-llama/Llama-3.1-8B"};
  auto decoded =
      protocol::DecodeEventOriginRequest(protocol::EncodeEventOriginRequest(origin).value());
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->namespace_id, origin.namespace_id);
  EXPECT_EQ(decoded->instance, "pod-7");
  EXPECT_EQ(decoded->model, "meta-llama/Llama-3.1-8B");
  const auto code = [](protocol::EventOrigin o) {
    return protocol::DecodeEventOriginRequest(protocol::EncodeEventOriginRequest(o).value())
        .status()
        .code();
  };
  EXPECT_EQ(code({std::string(16, 'n'), "", "m"}), StatusCode::kOk);  // no instance is fine
  EXPECT_EQ(code({std::string(16, 'n'), "a@b", "m"}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({std::string(16, 'n'), "a", "m\n"}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({std::string(16, 'n'), "a", ""}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({std::string(16, 'n'), std::string(257, 'a'), "m"}), StatusCode::kOutOfRange);
  auto body = protocol::EncodeEventOriginRequest(origin).value();
  body.pop_back();  // truncated: malformed
  EXPECT_EQ(protocol::DecodeEventOriginRequest(body).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(protocol::MaxRequestBody(protocol::Op::kEventOrigin, protocol::Limits{}), 532u);
}

// A SUB and a DEALER socket on the publisher's endpoints.
class Subscriber {
 public:
  Subscriber() : ctx_(zmq_ctx_new()) {}
  ~Subscriber() {
    for (void* s : {sub_, dealer_})
      if (s != nullptr) zmq_close(s);
    zmq_ctx_term(ctx_);
  }

  void Subscribe(const std::string& endpoint, const std::string& topic) {
    sub_ = zmq_socket(ctx_, ZMQ_SUB);
    const int linger = 0;
    zmq_setsockopt(sub_, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sub_, ZMQ_SUBSCRIBE, topic.data(), topic.size());
    ASSERT_EQ(zmq_connect(sub_, endpoint.c_str()), 0);
  }

  // One multipart message, or empty after `timeout_ms`.
  static std::vector<std::string> Receive(void* socket, int timeout_ms) {
    zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, timeout_ms) <= 0) return {};
    std::vector<std::string> parts;
    int more = 1;
    while (more != 0) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, socket, 0) < 0) break;
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    return parts;
  }

  std::vector<std::string> Next(int timeout_ms = 3000) { return Receive(sub_, timeout_ms); }

  // Replays from `start`: (seq, payload) pairs until the end marker.
  std::vector<std::pair<std::int64_t, std::string>> Replay(const std::string& endpoint,
                                                           std::uint64_t start) {
    if (dealer_ == nullptr) {
      dealer_ = zmq_socket(ctx_, ZMQ_DEALER);
      const int linger = 0;
      zmq_setsockopt(dealer_, ZMQ_LINGER, &linger, sizeof linger);
      EXPECT_EQ(zmq_connect(dealer_, endpoint.c_str()), 0);
    }
    char seq[8];
    for (int i = 7; i >= 0; --i, start >>= 8) seq[i] = static_cast<char>(start & 0xff);
    zmq_send(dealer_, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer_, seq, 8, 0);
    std::vector<std::pair<std::int64_t, std::string>> out;
    while (true) {
      auto parts = Receive(dealer_, 3000);
      if (parts.size() != 3) {
        ADD_FAILURE() << "replay answer has " << parts.size() << " parts";
        return out;
      }
      const std::int64_t s = Seq(parts[1]);
      if (s == -1) return out;
      out.emplace_back(s, parts[2]);
    }
  }

  static std::int64_t Seq(const std::string& bytes) {
    std::uint64_t v = 0;
    for (const char c : bytes) v = (v << 8) | static_cast<unsigned char>(c);
    return static_cast<std::int64_t>(v);
  }

 private:
  void* ctx_;
  void* sub_ = nullptr;
  void* dealer_ = nullptr;
};

// The stored/removed hashes of one payload, as "S:<medium>:<hash>" / "R:<medium>:<hash>".
std::vector<std::string> Summary(const std::string& payload) {
  auto handle = Unpack(payload);
  std::vector<std::string> out;
  const msgpack::object& evs = handle.get().via.array.ptr[1];
  for (std::uint32_t i = 0; i < evs.via.array.size; ++i) {
    const msgpack::object& e = evs.via.array.ptr[i];
    const std::string tag = e.via.array.ptr[0].as<std::string>();
    if (tag == "AllBlocksCleared") {
      out.push_back("C");
      continue;
    }
    const std::string medium = e.via.array.ptr[tag == "BlockStored" ? 6 : 2].as<std::string>();
    const msgpack::object& hashes = e.via.array.ptr[1];
    for (std::uint32_t j = 0; j < hashes.via.array.size; ++j) {
      const msgpack::object& h = hashes.via.array.ptr[j];
      out.push_back(tag.substr(5, 1) + ":" + medium + ":" + std::string(h.via.bin.ptr, 1));
    }
  }
  return out;
}

TEST(KvEventPublisherTest, PublishesBatchesWithSequenceNumbersTopicsAndReplay) {
  KvEventsOptions o;
  o.publish = "tcp://127.0.0.1:*";
  o.replay = "tcp://127.0.0.1:*";
  auto started = KvEventPublisher::Start(o);
  ASSERT_TRUE(started.ok()) << started.status().message();
  KvEventPublisher& pub = **started;
  Subscriber sub;
  sub.Subscribe(pub.endpoint(), "kv");
  // PUB/SUB joins asynchronously: announce until the subscriber sees one (the replay endpoint
  // covers what a late subscriber missed; that is tested below).
  std::vector<std::string> first;
  for (int i = 0; i < 100 && first.empty(); ++i) {
    pub.Stored(ChunkKey('n', 'a'), EventMedium::kCpu);
    first = sub.Next(50);
  }
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0], "kv");
  ASSERT_EQ(first[1].size(), 8u);
  std::int64_t seq = Subscriber::Seq(first[1]);

  // Drain what the join loop left, then one clean round.
  while (!sub.Next(200).empty()) {
  }
  const std::uint64_t before = pub.stats().next_sequence;
  ASSERT_TRUE(pub.SetOrigin(std::string(16, 'n'), "pod-1", "llama"));
  pub.Stored(ChunkKey('n', 'b'), EventMedium::kCpu);
  pub.Removed(ChunkKey('n', 'b'), EventMedium::kCpu);
  pub.Removed(ChunkKey('n', 'a'), EventMedium::kCpu);
  pub.Stored(ChunkKey('m', 'z'), EventMedium::kDisk);  // another namespace: no origin
  pub.Stored("not a chunk", EventMedium::kCpu);        // skipped
  std::vector<std::string> got;
  std::vector<std::string> topics;
  while (got.size() < 4) {
    auto m = sub.Next();
    ASSERT_EQ(m.size(), 3u) << "timed out after " << got.size() << " events";
    EXPECT_GT(Subscriber::Seq(m[1]), seq);
    seq = Subscriber::Seq(m[1]);
    topics.push_back(m[0]);
    for (auto& s : Summary(m[2])) got.push_back(s);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"S:CPU:b", "R:CPU:b", "R:CPU:a", "S:DISK:z"}));
  EXPECT_EQ(topics.front(), "kv@pod-1@llama");
  EXPECT_EQ(topics.back(), "kv");
  EXPECT_EQ(pub.stats().events_skipped, 1u);

  // A subscriber that missed them asks for everything from `before` on.
  auto replayed = sub.Replay(pub.replay_endpoint(), before);
  std::vector<std::string> again;
  for (auto& [s, payload] : replayed) {
    EXPECT_GE(s, static_cast<std::int64_t>(before));
    for (auto& e : Summary(payload)) again.push_back(e);
  }
  EXPECT_EQ(again, got);
  EXPECT_EQ(pub.stats().replay_requests, 1u);
  pub.Stop();
}

TEST(KvEventPublisherTest, FullQueueDropsAndCounts) {
  KvEventsOptions o;
  o.publish = "tcp://127.0.0.1:*";
  o.queue_events = 4;
  auto started = KvEventPublisher::Start(o);
  ASSERT_TRUE(started.ok()) << started.status().message();
  KvEventPublisher& pub = **started;
  std::uint64_t refused = 0;
  for (int i = 0; i < 20000; ++i)
    refused += pub.Stored(ChunkKey('n', 'x'), EventMedium::kCpu) ? 0 : 1;
  const KvEventStats s = pub.stats();
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(s.events_dropped, refused);
  EXPECT_EQ(s.events_queued + s.events_dropped, 20000u);
  pub.Stop();
  EXPECT_EQ(pub.stats().events_published, pub.stats().events_queued);  // Stop drains the queue
}

TEST(KvEventPublisherTest, BindFailureNamesTheEndpoint) {
  KvEventsOptions o;
  o.publish = "tcp://127.0.0.1:*";
  auto first = KvEventPublisher::Start(o);
  ASSERT_TRUE(first.ok());
  o.publish = (*first)->endpoint();
  auto second = KvEventPublisher::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot bind " + o.publish), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace kvdepot::daemon
