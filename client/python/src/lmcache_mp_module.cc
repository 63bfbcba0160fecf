// The `kvdepot._kvdepot_lmcache_mp` extension: KvdepotL2Connector, the native connector that
// LMCache's MP-mode `native_plugin` L2 adapter loads (module_path "kvdepot.lmcache_mp",
// class_name "KvdepotL2Connector"; docs/lmcache.md). The engine is lmcache_mp_connector.h; this
// file converts Python arguments and results and keeps the caller's buffers exported.
//
// Method shapes are those LMCache's NativeConnectorL2Adapter calls (pinned in docs/lmcache.md):
//   event_fd() -> int
//   submit_batch_get(keys: list[str], memoryviews: list) -> int      (writable buffers)
//   submit_batch_set(keys: list[str], memoryviews: list) -> int
//   submit_batch_exists(keys: list[str]) -> int
//   submit_batch_delete(keys: list[str]) -> int
//   drain_completions() -> list[tuple[int, bool, str, list[bool] | None]]
//   close() -> None
// A submit holds the GIL only to export the buffers and queue the batch (no I/O); the I/O runs
// on the connector's worker threads, which never take the GIL. Each batch's buffers stay
// exported (so they cannot be resized or freed) until its completion is drained or close()
// returns. Misuse (mismatched lengths, read-only GET buffers, a closed connector) raises.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvdepot/client/client.h"
#include "lmcache_mp_connector.h"
#include "py_buffer.h"

namespace py = pybind11;

namespace kvdepot::python {
namespace {

[[noreturn]] void Raise(const Status& s) {
  const std::string text = std::string(StatusCodeName(s.code())) + ": " + s.message();
  if (s.code() == StatusCode::kInvalidArgument) throw py::value_error(text);
  throw std::runtime_error(text);
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}

std::vector<std::string> Keys(const py::sequence& keys) {
  if (py::isinstance<py::str>(keys) || py::isinstance<py::bytes>(keys)) {
    throw py::type_error("keys must be a list of keys, not a single key");
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (py::handle k : keys) out.push_back(Key(k));
  return out;
}

class PyL2Connector {
 public:
  PyL2Connector(std::string address, std::size_t num_workers, std::int64_t timeout_ms,
                std::string key_prefix, std::string token, const std::string& token_file, bool tls,
                std::string tls_ca_file, std::string tls_cert_file, std::string tls_key_file,
                std::string tls_server_name, std::size_t max_pipeline,
                std::size_t max_pipeline_bytes, const std::string& cluster_routing) {
    lmcache_mp::ConnectorOptions o;
    if (cluster_routing == "auto") {
      o.client.cluster_routing = client::ClusterRouting::kAuto;
    } else if (cluster_routing == "off") {
      o.client.cluster_routing = client::ClusterRouting::kOff;
    } else {
      throw py::value_error("cluster_routing is '" + cluster_routing +
                            "'; set adapter_params.cluster_routing to \"auto\" (send each key "
                            "to its owner in a kvdepot cluster) or \"off\"");
    }
    o.client.address = std::move(address);
    if (timeout_ms <= 0) {
      throw py::value_error("timeout_ms is " + std::to_string(timeout_ms) +
                            "; set adapter_params.timeout_ms to a positive number of ms");
    }
    o.client.timeout = std::chrono::milliseconds(timeout_ms);
    o.client.token = std::move(token);
    if (!token_file.empty()) {
      if (!o.client.token.empty()) {
        throw py::value_error("give adapter_params.token or adapter_params.token_file, not both");
      }
      o.client.token = Unwrap(client::ReadTokenFile(token_file));
    }
    o.client.tls = tls;
    o.client.tls_ca_file = std::move(tls_ca_file);
    o.client.tls_cert_file = std::move(tls_cert_file);
    o.client.tls_key_file = std::move(tls_key_file);
    o.client.tls_server_name = std::move(tls_server_name);
    o.workers = num_workers;
    o.key_prefix = std::move(key_prefix);
    o.max_pipeline = max_pipeline;
    o.max_pipeline_bytes = max_pipeline_bytes;
    core_ = Unwrap(lmcache_mp::Connector::Create(std::move(o)));
  }

  ~PyL2Connector() {
    if (core_) {
      py::gil_scoped_release release;
      core_.reset();  // closes: joins the workers, which never need the GIL
    }
    held_.clear();
  }

  int EventFd() const { return Core().event_fd(); }

  std::uint64_t SubmitGet(const py::sequence& keys, const py::sequence& views) {
    auto key_list = Keys(keys);
    Held held = Export(views, key_list.size(), /*writable=*/true);
    std::vector<std::span<std::byte>> targets;
    targets.reserve(held.size());
    for (auto& b : held) targets.push_back(b->bytes());
    return Keep(Unwrap(Core().SubmitGet(std::move(key_list), std::move(targets))), std::move(held));
  }

  std::uint64_t SubmitSet(const py::sequence& keys, const py::sequence& views) {
    auto key_list = Keys(keys);
    Held held = Export(views, key_list.size(), /*writable=*/false);
    std::vector<std::span<const std::byte>> sources;
    sources.reserve(held.size());
    for (auto& b : held) sources.push_back(b->bytes());
    return Keep(Unwrap(Core().SubmitSet(std::move(key_list), std::move(sources))), std::move(held));
  }

  std::uint64_t SubmitExists(const py::sequence& keys) {
    return Unwrap(Core().SubmitExists(Keys(keys)));
  }

  std::uint64_t SubmitDelete(const py::sequence& keys) {
    return Unwrap(Core().SubmitDelete(Keys(keys)));
  }

  py::list DrainCompletions() {
    std::vector<lmcache_mp::Completion> done;
    {
      py::gil_scoped_release release;
      done = Core().DrainCompletions();
    }
    py::list out;
    for (auto& c : done) {
      held_.erase(c.future_id);
      py::object per_key = py::none();
      if (!c.per_key.empty()) {
        py::list flags;
        for (std::uint8_t f : c.per_key) flags.append(py::bool_(f != 0));
        per_key = std::move(flags);
      }
      // Error texts quote keys, which may be bytes that are not UTF-8.
      py::object error = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(c.error.data(), static_cast<Py_ssize_t>(c.error.size()), "replace"));
      if (!error) throw py::error_already_set();
      out.append(py::make_tuple(c.future_id, c.ok, error, per_key));
    }
    return out;
  }

  void Close() {
    {
      py::gil_scoped_release release;
      Core().Close();
    }
    held_.clear();  // no worker touches a buffer any more
  }

 private:
  using Held = std::vector<std::unique_ptr<Buffer>>;

  lmcache_mp::Connector& Core() const { return *core_; }

  static Held Export(const py::sequence& views, std::size_t keys, bool writable) {
    if (views.size() != keys) {
      throw py::value_error(std::to_string(keys) + " keys but " + std::to_string(views.size()) +
                            " memoryviews; pass one buffer per key");
    }
    Held held;
    held.reserve(keys);
    for (py::handle v : views) held.push_back(std::make_unique<Buffer>(v, writable));
    return held;
  }

  std::uint64_t Keep(std::uint64_t future_id, Held held) {
    if (!held.empty()) held_.emplace(future_id, std::move(held));
    return future_id;
  }

  std::unique_ptr<lmcache_mp::Connector> core_;
  // Exported buffers per future id; touched only with the GIL held.
  std::unordered_map<std::uint64_t, Held> held_;
};

}  // namespace
}  // namespace kvdepot::python

PYBIND11_MODULE(_kvdepot_lmcache_mp, m) {
  using kvdepot::python::PyL2Connector;
  m.doc() = "kvdepot's native connector for LMCache's MP-mode native_plugin L2 adapter";
  py::class_<PyL2Connector>(m, "KvdepotL2Connector")
      .def(py::init<std::string, std::size_t, std::int64_t, std::string, std::string,
                    const std::string&, bool, std::string, std::string, std::string, std::string,
                    std::size_t, std::size_t, const std::string&>(),
           py::arg("address") = "127.0.0.1:7600", py::arg("num_workers") = 4,
           py::arg("timeout_ms") = 10000, py::arg("key_prefix") = "", py::arg("token") = "",
           py::arg("token_file") = "", py::arg("tls") = false, py::arg("tls_ca_file") = "",
           py::arg("tls_cert_file") = "", py::arg("tls_key_file") = "",
           py::arg("tls_server_name") = "", py::arg("max_pipeline") = 32,
           py::arg("max_pipeline_bytes") = 256 << 10, py::arg("cluster_routing") = "auto")
      .def("event_fd", &PyL2Connector::EventFd)
      .def("submit_batch_get", &PyL2Connector::SubmitGet, py::arg("keys"), py::arg("memoryviews"))
      .def("submit_batch_set", &PyL2Connector::SubmitSet, py::arg("keys"), py::arg("memoryviews"))
      .def("submit_batch_exists", &PyL2Connector::SubmitExists, py::arg("keys"))
      .def("submit_batch_delete", &PyL2Connector::SubmitDelete, py::arg("keys"))
      .def("drain_completions", &PyL2Connector::DrainCompletions)
      .def("close", &PyL2Connector::Close);
}
