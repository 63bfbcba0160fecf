// Metrics end to end, in-process: a real Server with a Metrics observer, driven by the client
// library; a real lm:// listener driven over raw sockets; the /metrics and /healthz endpoint
// over real HTTP.
#include "kvdepot/daemon/metrics.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "in_process_server.h"
#include "kvdepot/client/client.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/metrics_http.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using ::kvdepot::test_socket::ConnectLoopback;

// The value of the sample `series` (name with its labels, as exposed), or -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  const std::string prefix = "\n" + series + " ";
  const auto at = ("\n" + text).find(prefix);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + prefix.size() - 1));
}

// Polls `metrics` until `series` reaches `at_least` (requests are counted once their response
// has been handed to the socket, which may be just after the client has read it).
double WaitForSample(const Metrics& metrics, const std::string& series, double at_least) {
  double v = -1;
  (void)test::WaitFor([&] { return (v = Sample(metrics.Text(), series)) >= at_least; });
  return v;
}

// GET `path` over HTTP/1.0 from 127.0.0.1:`port`: the status code and the body.
std::pair<int, std::string> HttpGet(std::uint16_t port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {0, ""};
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  ::close(fd);
  if (response.size() < 12) return {0, response};
  const auto body = response.find("\r\n\r\n");
  return {std::stoi(response.substr(9, 3)),
          body == std::string::npos ? "" : response.substr(body + 4)};
}

class MetricsTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.io_threads = 2;
    StartServerWith(HostTierOptions::With(8ull << 20, EvictionPolicy::kLru, 4), o, &metrics_);
    conn_ = ConnectOrFail(TcpOptions());
    ASSERT_NE(conn_, nullptr);
  }
  void TearDown() override {
    conn_.reset();
    InProcessServerTest::TearDown();
  }

  Metrics metrics_{"test"};
  std::unique_ptr<client::Connection> conn_;
};

TEST_F(MetricsTest, RequestsAreCountedByOperationAndOutcome) {
  const std::vector<std::byte> value(1000, std::byte{7});
  ASSERT_TRUE(conn_->Put("a", value).ok());
  ASSERT_TRUE(conn_->Put("b", value).ok());
  ASSERT_TRUE(conn_->Get("a").ok());
  ASSERT_TRUE(conn_->Get("absent").ok());
  const std::vector<std::string> keys = {"a", "b", "c", "a"};
  auto lookup = conn_->Lookup(keys);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->prefix_length, 2u);
  const std::vector<std::string> gone = {"a", "zz"};
  ASSERT_TRUE(conn_->Delete(gone).ok());

  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="put",status="ok"})", 2), 2);
  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="get",status="ok"})", 1), 1);
  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="get",status="not_found"})", 1),
            1);
  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="lookup",status="ok"})", 1), 1);
  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="delete",status="not_found"})", 1),
            1)
      << "a DELETE with an absent key reports the item's status";
  const std::string text = metrics_.Text();
  EXPECT_EQ(Sample(text, R"(kvdepot_request_duration_seconds_count{op="put"})"), 2);
  EXPECT_GT(Sample(text, R"(kvdepot_request_duration_seconds_sum{op="put"})"), 0);
  EXPECT_EQ(Sample(text, R"(kvdepot_request_duration_seconds_bucket{op="get",le="+Inf"})"), 2);
  EXPECT_EQ(Sample(text, "kvdepot_lookup_prefix_chunks_sum"), 2);
  EXPECT_EQ(Sample(text, R"(kvdepot_lookup_prefix_chunks_bucket{le="1"})"), 0);
  EXPECT_EQ(Sample(text, R"(kvdepot_lookup_prefix_chunks_bucket{le="2"})"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_lookup_keys_total"), 4);
  // Scrape-time values come from the components' own stats.
  EXPECT_EQ(Sample(text, R"(kvdepot_tier_capacity_bytes{tier="host"})"), 8 << 20);
  EXPECT_EQ(Sample(text, R"(kvdepot_tier_chunks{tier="host"})"), 1);
  EXPECT_EQ(Sample(text, R"(kvdepot_tier_hits_total{tier="host"})"), 1);
  EXPECT_EQ(Sample(text, R"(kvdepot_tier_misses_total{tier="host"})"), 1);
  EXPECT_GT(Sample(text, R"(kvdepot_tier_used_bytes{tier="host"})"), 1000);
  EXPECT_EQ(Sample(text, "kvdepot_connections_open"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_connections_accepted_total"), 1);
  EXPECT_GT(Sample(text, "kvdepot_network_receive_bytes_total"), 2000);
  EXPECT_GT(Sample(text, "kvdepot_network_transmit_bytes_total"), 1000);
  EXPECT_EQ(Sample(text, R"(kvdepot_build_info{version="test"})"), 1);
  EXPECT_EQ(Sample(text, R"(kvdepot_requests_total{op="scan",status="ok"})"), 0)
      << "every operation's ok series exists from the start";
}

TEST_F(MetricsTest, RefusedPutItemsAreCountedWithTheirCode) {
  const std::vector<std::byte> big(9ull << 20, std::byte{1});  // over the tier's capacity
  EXPECT_FALSE(conn_->Put("big", big).ok());
  EXPECT_EQ(WaitForSample(metrics_, R"(kvdepot_requests_total{op="put",status="out_of_range"})", 1),
            1);
}

TEST_F(MetricsTest, CodecSeriesExistAtZeroAndCountOnceFed) {
  EXPECT_EQ(
      Sample(metrics_.Text(),
             R"(kvdepot_codec_duration_seconds_count{codec="cachegen",device="cpu",op="encode"})"),
      0);
  metrics_.ObserveCodec(CodecOp::kEncode, "cachegen", "cpu", 0.002, 4 << 20, 1 << 20);
  const std::string text = metrics_.Text();
  EXPECT_EQ(
      Sample(text,
             R"(kvdepot_codec_duration_seconds_count{codec="cachegen",device="cpu",op="encode"})"),
      1);
  EXPECT_EQ(
      Sample(text, R"(kvdepot_codec_raw_bytes_total{codec="cachegen",device="cpu",op="encode"})"),
      4 << 20);
  EXPECT_EQ(
      Sample(text,
             R"(kvdepot_codec_encoded_bytes_total{codec="cachegen",device="cpu",op="encode"})"),
      1 << 20);
}

TEST_F(MetricsTest, HttpServesMetricsAndHealth) {
  auto http = MetricsHttp::Start("127.0.0.1:0", metrics_);
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  const std::uint16_t port = (*http)->port();
  ASSERT_NE(port, 0);
  EXPECT_EQ(HttpGet(port, "/healthz"), std::make_pair(503, std::string("starting\n")));
  (*http)->SetHealth(Health::kServing);
  EXPECT_EQ(HttpGet(port, "/healthz"), std::make_pair(200, std::string("ok\n")));
  const auto [code, body] = HttpGet(port, "/metrics");
  EXPECT_EQ(code, 200);
  EXPECT_NE(body.find("# TYPE kvdepot_requests_total counter"), std::string::npos);
  EXPECT_NE(body.find(R"(kvdepot_tier_capacity_bytes{tier="host"})"), std::string::npos);
  (*http)->SetHealth(Health::kDraining);
  EXPECT_EQ(HttpGet(port, "/healthz"), std::make_pair(503, std::string("draining\n")));
  EXPECT_EQ(HttpGet(port, "/nothing-here").first, 404);

  // A second endpoint on a port in use is a clear error, and the first keeps serving.
  auto clash = MetricsHttp::Start("127.0.0.1:" + std::to_string(port), metrics_);
  EXPECT_EQ(clash.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(HttpGet(port, "/healthz").first, 503);

  const auto start = std::chrono::steady_clock::now();
  http->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1))
      << "stopping does not wait out CivetWeb's poll timeout";
}

// Counters of rare events are exported at zero from the first scrape (docs/metrics.md).
TEST_F(MetricsTest, RareEventCountersExistAtZeroFromTheStart) {
  const std::string text = metrics_.Text();
  EXPECT_EQ(Sample(text, R"(kvdepot_config_reloads_total{result="ok"})"), 0);
  EXPECT_EQ(Sample(text, R"(kvdepot_config_reloads_total{result="error"})"), 0);
  for (const char* status : {"not_found", "out_of_range", "resource_exhausted", "internal"}) {
    const std::string series =
        std::string("kvdepot_requests_total{op=\"put\",status=\"") + status + "\"}";
    EXPECT_EQ(Sample(text, series), 0) << status;
  }
  metrics_.OnReload(false);
  EXPECT_EQ(Sample(metrics_.Text(), R"(kvdepot_config_reloads_total{result="error"})"), 1);
}

// Prometheus's standard process_* metrics, read from /proc/self.
TEST_F(MetricsTest, ProcessMetricsFollowPrometheusConventions) {
  const std::string text = metrics_.Text();
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  EXPECT_GE(Sample(text, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(text, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(Sample(text, "process_virtual_memory_bytes"),
            Sample(text, "process_resident_memory_bytes"));
  // This test holds at least stdin/out/err, the server's listener and the client's connection.
  EXPECT_GE(Sample(text, "process_open_fds"), 5);
  EXPECT_GE(Sample(text, "process_max_fds"), Sample(text, "process_open_fds"));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double started = Sample(text, "process_start_time_seconds");
  EXPECT_LE(started, now + 1);
  EXPECT_GT(started, now - 24 * 3600) << "a test process started within the last day";
}

TEST_F(MetricsTest, RefusalCountersAreExported) {
  const std::string text = metrics_.Text();
  EXPECT_EQ(Sample(text, "kvdepot_auth_failures_total"), 0);
  EXPECT_EQ(Sample(text, "kvdepot_tls_handshake_failures_total"), 0);
  EXPECT_NE(text.find("# TYPE kvdepot_auth_failures_total counter"), std::string::npos);
  // Their values end to end (a refused AUTH, a failed TLS handshake) are checked by
  // security_test.cc, which has tokens and certificates.
}

// The lm:// listener's counters reach /metrics as kvdepot_lm_* series: requests by command,
// hits, dropped PUTs, protocol errors, connections and bytes.
TEST(MetricsLmTest, LmListenerCountersAreExported) {
  HostTier tier(HostTierOptions::With(4ull << 20));
  Store store(tier, nullptr);
  LmServerOptions o;
  o.listen = "127.0.0.1:0";
  LmServer lm(o, store);
  ASSERT_TRUE(lm.Start().ok());
  Metrics metrics("test");
  metrics.SetLmSource([&lm] { return lm.stats(); });
  // An LMCache request header: command, length, fmt, dtype, location, shape[4], key.
  auto header = [](std::int32_t command, std::int32_t length, const std::string& key) {
    std::string h(186, ' ');
    const std::int32_t ints[9] = {command, length, 1, 3, 1, 2, 16, 256, 1024};
    std::memcpy(h.data(), ints, sizeof(ints));
    std::memcpy(h.data() + 36, key.data(), key.size());
    return h;
  };
  auto send_all = [](int fd, const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  };
  auto reply_code = [](int fd) {
    std::int32_t reply[9] = {};
    if (::recv(fd, reply, sizeof(reply), MSG_WAITALL) != static_cast<ssize_t>(sizeof(reply))) {
      return -1;
    }
    std::vector<char> payload(static_cast<std::size_t>(std::max(reply[1], 0)));
    if (!payload.empty()) (void)::recv(fd, payload.data(), payload.size(), MSG_WAITALL);
    return static_cast<int>(reply[0]);
  };
  const int fd = ConnectLoopback(lm.port());
  ASSERT_GE(fd, 0);
  const std::string payload(1000, 'p');
  ASSERT_TRUE(send_all(fd, header(1, 1000, "model@1@0@aa") + payload));  // stored
  ASSERT_TRUE(send_all(fd, header(1, 5 << 20, "model@1@0@bb") +          // over capacity:
                               std::string(5 << 20, 'q')));              // read, dropped
  ASSERT_TRUE(send_all(fd, header(2, 0, "model@1@0@aa")));
  EXPECT_EQ(reply_code(fd), 200);
  ASSERT_TRUE(send_all(fd, header(2, 0, "model@1@0@zz")));
  EXPECT_EQ(reply_code(fd), 400);
  ASSERT_TRUE(send_all(fd, header(3, 0, "model@1@0@aa")));
  EXPECT_EQ(reply_code(fd), 200);
  ASSERT_TRUE(send_all(fd, header(3, 0, "model@1@0@bb")));
  EXPECT_EQ(reply_code(fd), 400);
  ASSERT_TRUE(send_all(fd, header(5, 0, "")));
  EXPECT_EQ(reply_code(fd), 200);
  const int bad = ConnectLoopback(lm.port());
  ASSERT_GE(bad, 0);
  ASSERT_TRUE(send_all(bad, header(99, 0, "x")));  // unknown command: 400, closed
  EXPECT_EQ(reply_code(bad), 400);
  ::close(bad);
  EXPECT_TRUE(test::WaitFor([&] { return lm.stats().connections_open == 1; }));
  const std::string text = metrics.Text();
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_requests_total{command="put"})"), 2) << text;
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_requests_total{command="get"})"), 2);
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_requests_total{command="exist"})"), 2);
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_requests_total{command="health"})"), 1);
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_requests_total{command="list"})"), 0);
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_hits_total{command="get"})"), 1);
  EXPECT_EQ(Sample(text, R"(kvdepot_lm_hits_total{command="exist"})"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_lm_puts_dropped_total"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_lm_puts_oversized_total"), 0);
  EXPECT_EQ(Sample(text, "kvdepot_lm_legacy_connections_total"), 0);
  EXPECT_EQ(Sample(text, "kvdepot_lm_wire_refused_total"), 0);
  EXPECT_EQ(Sample(text, "kvdepot_lm_protocol_errors_total"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_lm_connections_accepted_total"), 2);
  EXPECT_EQ(Sample(text, "kvdepot_lm_connections_open"), 1);
  EXPECT_EQ(Sample(text, "kvdepot_lm_request_timeouts_total"), 0);
  EXPECT_EQ(Sample(text, "kvdepot_lm_idle_timeouts_total"), 0);
  EXPECT_GT(Sample(text, "kvdepot_lm_network_receive_bytes_total"), 5 << 20);
  EXPECT_GE(Sample(text, "kvdepot_lm_network_transmit_bytes_total"), 6 * 36 + 1000);
  EXPECT_NE(text.find("# TYPE kvdepot_lm_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvdepot_lm_connections_open gauge"), std::string::npos);
  ::close(fd);
  lm.Stop();
  // Without an lm:// source there are no kvdepot_lm_* series.
  EXPECT_EQ(Metrics("test").Text().find("kvdepot_lm_"), std::string::npos);
}

TEST(MetricsProbeTest, ProbeRunsOnceEveryIoLoopWentRound) {
  HostTier tier(HostTierOptions::With(1 << 20));
  Store store(tier, nullptr);
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.io_threads = 3;
  Server server(o, store);
  ASSERT_TRUE(server.Start().ok());
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) server.Probe([&done] { ++done; });
  EXPECT_TRUE(test::WaitFor([&] { return done.load() == 5; })) << done.load();
  server.Stop();
}

TEST(MetricsSsdTest, SsdTierSeriesComeFromItsStats) {
  Metrics metrics("test");
  SsdTierStats d;
  d.bytes = 512 << 20;
  d.capacity = 1 << 30;
  d.chunks = 5;
  d.reads = 7;
  d.checksum_failures = 3;
  d.io_path = "io_uring";
  metrics.AddTier("ssd", [d] { return ToTierStats(d); });
  metrics.SetSsdSource([d] { return d; });
  const std::string text = metrics.Text();
  EXPECT_NE(text.find("kvdepot_tier_chunks{tier=\"ssd\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("kvdepot_tier_capacity_bytes{tier=\"ssd\"} 1073741824"), std::string::npos);
  EXPECT_NE(text.find("kvdepot_ssd_reads_total 7"), std::string::npos);
  EXPECT_NE(text.find("kvdepot_ssd_checksum_failures_total 3"), std::string::npos);
  EXPECT_NE(text.find("kvdepot_ssd_io_info{path=\"io_uring\",direct_io=\"true\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace kvdepot::daemon
