// The `kvdepot._kvdepot` extension: Python bindings of the kvdepot client library
// (client/include/kvdepot/client/client.h), chunk keys (chunk_key.h) and the LMCache value
// header (lm_value.h). See client/python/README.md.
//
// Buffers: values are passed as any C-contiguous buffer-protocol object (bytes, bytearray,
// memoryview, numpy arrays, torch CPU tensors via numpy) and sent from it directly; get_into and
// get_lm receive straight into caller-provided writable buffers. The GIL is released for every
// network call; buffers stay exported (so they cannot be resized) while it is released.
// Errors raise kvdepot.Error (a RuntimeError) whose message starts with the status name.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/protocol/chunk_key.h"
#include "kvdepot/protocol/lm_value.h"
#include "py_buffer.h"

namespace py = pybind11;

namespace kvdepot::python {
namespace {

py::object& ErrorType() {
  static py::object type;
  return type;
}

[[noreturn]] void Raise(const Status& s) {
  PyErr_SetString(ErrorType().ptr(),
                  (std::string(StatusCodeName(s.code())) + ": " + s.message()).c_str());
  throw py::error_already_set();
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}

py::bytes Bytes(std::string_view s) {
  return py::bytes(s.data(), s.size());
}

// The module's IntEnum classes (Tier, DType, Codec), made at import: IntEnum members compare
// equal to the ints older code used (kvdepot.TIER_HOST == kvdepot.Tier.HOST == 2).
struct Enums {
  py::object tier, dtype, codec;
};
Enums& EnumTypes() {
  static Enums enums;
  return enums;
}

// An IntEnum `name` of `members` (NAME, value) in module `m`, documented by `doc`.
py::object MakeIntEnum(py::module_& m, const char* name,
                       std::vector<std::pair<std::string, int>> members, const char* doc) {
  py::list items;
  for (const auto& [member, value] : members) items.append(py::make_tuple(member, value));
  py::object type = py::module_::import("enum").attr("IntEnum")(name, items);
  type.attr("__module__") = "kvdepot";
  type.attr("__doc__") = doc;
  m.attr(name) = type;
  return type;
}

py::object TierOf(protocol::Tier t) {
  return EnumTypes().tier(static_cast<int>(t));
}

py::list TiersOf(const std::vector<protocol::Tier>& tiers) {
  py::list out;
  for (auto t : tiers) out.append(TierOf(t));
  return out;
}

Namespace MakeNamespace(const std::string& model, std::uint32_t tp_world_size,
                        std::uint32_t tp_rank, std::uint8_t dtype, std::uint8_t codec,
                        std::uint32_t chunk_tokens, const std::string& tenant,
                        const std::string& salt) {
  Namespace ns;
  ns.model = model;
  ns.tp_world_size = tp_world_size;
  ns.tp_rank = tp_rank;
  ns.dtype = static_cast<DType>(dtype);
  ns.codec = static_cast<CodecId>(codec);
  ns.chunk_tokens = chunk_tokens;
  ns.tenant = tenant;
  ns.salt = salt;
  if (Status s = ns.Validate(); !s.ok()) Raise(s);
  return ns;
}

std::vector<py::bytes> KeysOf(const std::vector<ChunkKey>& keys) {
  std::vector<py::bytes> out;
  out.reserve(keys.size());
  for (const ChunkKey& k : keys) {
    out.push_back(py::bytes(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size()));
  }
  return out;
}

// A placement key argument (docs/cluster.md, "Prefix locality in requests"): None (or empty)
// places the key by itself.
std::string PlacementOf(py::handle placement_key) {
  return placement_key.is_none() ? std::string() : Key(placement_key);
}

// The placement_keys argument of a multi-key call: None (no placement section), or one per key
// (None or empty entries: placed by the key).
std::vector<std::string> PlacementsOf(py::handle placement_keys, std::size_t keys) {
  std::vector<std::string> out;
  if (placement_keys.is_none()) return out;
  const auto list = py::reinterpret_borrow<py::sequence>(placement_keys);
  if (list.size() != keys) {
    throw py::value_error("placement_keys has " + std::to_string(list.size()) + " entries for " +
                          std::to_string(keys) + " keys: give one per key, or None");
  }
  for (py::handle p : list) out.push_back(PlacementOf(p));
  return out;
}

class PyClient {
 public:
  PyClient(const std::string& address, int timeout_ms, std::size_t pool_size,
           const std::string& token, const std::string& token_file, bool tls,
           const std::string& tls_ca_file, const std::string& tls_cert_file,
           const std::string& tls_key_file, const std::string& tls_server_name,
           const std::string& cluster_routing) {
    client::ClientOptions o;
    if (cluster_routing == "auto") {
      o.cluster_routing = client::ClusterRouting::kAuto;
    } else if (cluster_routing == "off") {
      o.cluster_routing = client::ClusterRouting::kOff;
    } else {
      Raise(InvalidArgument("cluster_routing='" + cluster_routing +
                            "': expected 'auto' (route each key to its owner in a cluster, the "
                            "default) or 'off' (everything to address)"));
    }
    o.address = address;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.pool_size = pool_size;
    o.token = token;
    if (o.token.empty() && !token_file.empty()) o.token = Unwrap(client::ReadTokenFile(token_file));
    o.tls = tls || !tls_ca_file.empty() || !tls_cert_file.empty();
    o.tls_ca_file = tls_ca_file;
    o.tls_cert_file = tls_cert_file;
    o.tls_key_file = tls_key_file;
    o.tls_server_name = tls_server_name;
    client_ = std::make_unique<client::Client>(o);
  }

  void Ping() {
    Check([&] { return client_->Ping(); });
  }

  void Put(py::handle key, py::handle value, py::handle placement_key) {
    const std::string k = Key(key);
    const std::string placement = PlacementOf(placement_key);
    Buffer b(value, /*writable=*/false);
    Check([&] { return client_->Put(k, b.bytes(), placement); });
  }

  // The value is the concatenation of `parts` (e.g. a header and a tensor), sent without copying.
  void PutParts(py::handle key, const py::list& parts, py::handle placement_key) {
    const std::string k = Key(key);
    const std::string placement = PlacementOf(placement_key);
    std::vector<std::unique_ptr<Buffer>> held;
    std::vector<std::span<const std::byte>> spans;
    for (py::handle p : parts) {
      held.push_back(std::make_unique<Buffer>(p, /*writable=*/false));
      spans.push_back(held.back()->bytes());
    }
    Check([&] { return client_->PutParts(k, spans, placement); });
  }

  py::object Get(py::handle key, py::handle placement_key) {
    const std::string k = Key(key);
    const std::string placement = PlacementOf(placement_key);
    Result<std::optional<std::vector<std::byte>>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->Get(k, placement);
    }
    auto v = Unwrap(std::move(r));
    if (!v) return py::none();
    return py::bytes(reinterpret_cast<const char*>(v->data()), v->size());
  }

  // Receives the value into `out` (writable, C-contiguous); its size, or None on a miss.
  py::object GetInto(py::handle key, py::handle out, py::handle placement_key) {
    const std::string k = Key(key);
    const std::string placement = PlacementOf(placement_key);
    Buffer b(out, /*writable=*/true);
    Result<std::optional<std::size_t>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->GetInto(k, {}, b.bytes(), placement);
    }
    auto size = Unwrap(std::move(r));
    if (!size) return py::none();
    return py::int_(*size);
  }

  // A value stored with an LMCache header (lm_value.h): calls allocate(payload_size, fmt, dtype,
  // location, shape) once the header has arrived; allocate returns a writable buffer of at least
  // payload_size bytes (the payload is received straight into it) or None to drop the value.
  // Returns (payload_size, fmt, dtype, location, shape), or None on a miss, a drop, or a value
  // without a valid header.
  py::object GetLm(py::handle key, py::function allocate, py::handle placement_key) {
    const std::string k = Key(key);
    const std::string placement = PlacementOf(placement_key);
    std::byte head[lm::kValueHeaderBytes];
    std::unique_ptr<Buffer> target;
    std::optional<lm::ValueHeader> meta;
    std::exception_ptr failure;
    Result<std::optional<std::size_t>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      const client::Connection::OutChooser choose = [&](std::size_t size) -> std::span<std::byte> {
        auto m = lm::DecodeValueHeader(head);
        if (!m.ok()) return {};
        meta = *m;
        py::gil_scoped_acquire acquire;
        try {
          py::object buf =
              allocate(size - lm::kValueHeaderBytes, m->fmt, m->dtype, m->location,
                       py::make_tuple(m->shape[0], m->shape[1], m->shape[2], m->shape[3]));
          if (buf.is_none()) return {};
          target = std::make_unique<Buffer>(buf, /*writable=*/true);
          return target->bytes();
        } catch (...) {
          failure = std::current_exception();
          return {};
        }
      };
      r = client_->GetInto(k, head, choose, placement);
    }
    if (failure) {
      target.reset();
      std::rethrow_exception(failure);
    }
    auto size = Unwrap(std::move(r));
    if (!size || *size < lm::kValueHeaderBytes) return py::none();
    if (!meta) {  // an empty payload: the chooser was not called
      auto m = lm::DecodeValueHeader(head);
      if (!m.ok()) return py::none();
      meta = *m;
    }
    return py::make_tuple(
        *size - lm::kValueHeaderBytes, meta->fmt, meta->dtype, meta->location,
        py::make_tuple(meta->shape[0], meta->shape[1], meta->shape[2], meta->shape[3]));
  }

  // One round trip: (prefix_length, [tier per key]) for keys in prefix order.
  py::tuple Lookup(const py::list& keys, py::handle placement_keys) {
    std::vector<std::string> ks;
    for (py::handle k : keys) ks.push_back(Key(k));
    const std::vector<std::string> placement = PlacementsOf(placement_keys, ks.size());
    Result<protocol::LookupResult> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->Lookup(ks, placement);
    }
    auto res = Unwrap(std::move(r));
    return py::make_tuple(res.prefix_length, TiersOf(res.tiers));
  }

  // (prefix_length, keys, tiers) for the full chunks of `tokens` in a chunk-key namespace.
  // G (group_chunks) 0: the cluster's, from the client's view (client.h, PrefixGroupChunks).
  py::tuple LookupPrefix(const Namespace& ns, const std::vector<std::uint32_t>& tokens,
                         std::uint32_t group_chunks) {
    Result<client::PrefixLookup> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->LookupPrefix(ns, tokens, group_chunks);
    }
    auto res = Unwrap(std::move(r));
    return py::make_tuple(res.prefix_length, KeysOf(res.keys), TiersOf(res.tiers));
  }

  // Stores values[i] as chunk i of tokens (one value per full chunk), placed as LookupPrefix
  // finds it. Raises kvdepot.Error when the request fails or a chunk is refused (naming it).
  void PutPrefix(const Namespace& ns, const std::vector<std::uint32_t>& tokens,
                 const py::sequence& values, std::uint32_t group_chunks) {
    std::vector<std::unique_ptr<Buffer>> held;
    std::vector<std::span<const std::byte>> chunks;
    for (py::handle v : values) {
      held.push_back(std::make_unique<Buffer>(v, /*writable=*/false));
      chunks.push_back(held.back()->bytes());
    }
    Result<std::vector<StatusCode>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->PutPrefix(ns, tokens, chunks, group_chunks);
    }
    const std::vector<StatusCode> codes = Unwrap(std::move(r));
    for (std::size_t i = 0; i < codes.size(); ++i) {
      if (codes[i] != StatusCode::kOk) {
        Raise(Status(codes[i], "put_prefix: chunk " + std::to_string(i) + " of " +
                                   std::to_string(codes.size()) + " was refused"));
      }
    }
  }

  bool Delete(py::handle key, py::handle placement_key) {
    const std::vector<std::string> ks = {Key(key)};
    std::vector<std::string> placement;
    if (std::string p = PlacementOf(placement_key); !p.empty()) placement.push_back(std::move(p));
    Result<std::vector<StatusCode>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->Delete(ks, placement);
    }
    auto codes = Unwrap(std::move(r));
    return !codes.empty() && codes[0] == StatusCode::kOk;
  }

  // The daemon's STATS document (docs/protocol.md) as a dict.
  py::object Stats() {
    Result<std::string> r = Status::Ok();
    {
      py::gil_scoped_release release;
      r = client_->Stats();
    }
    return py::module_::import("json").attr("loads")(Unwrap(std::move(r)));
  }

  // GET_AS: the value transcoded by the daemon into `codec` (a chunk container), or None on a
  // miss. Raises kvdepot.Error when the value is no container or cannot be transcoded.
  py::object GetAs(py::handle key, int codec, py::handle placement_key) {
    if (codec < 0 || codec > 255) throw py::value_error("codec is not a kvdepot.Codec");
    const std::vector<std::string> keys = {Key(key)};
    std::vector<std::string> placement;
    if (std::string p = PlacementOf(placement_key); !p.empty()) placement.push_back(std::move(p));
    std::optional<std::vector<std::byte>> value;
    Status item_status;
    Status s;
    {
      py::gil_scoped_release release;
      s = client_->GetAs(
          keys, static_cast<CodecId>(codec),
          [&](const client::GetItem& item) {
            item_status = item.status;
            if (item.status.ok()) value.emplace(item.value.begin(), item.value.end());
          },
          placement);
    }
    if (!s.ok()) Raise(s);
    if (item_status.code() == StatusCode::kNotFound) return py::none();
    if (!item_status.ok()) Raise(item_status);
    if (!value) return py::none();
    return py::bytes(reinterpret_cast<const char*>(value->data()), value->size());
  }

  // Every key starting with `prefix` (all pages), as [(key, value_bytes, tier)].
  py::list Scan(py::handle prefix, std::uint32_t page) {
    protocol::ScanRequest q;
    q.prefix = Key(prefix);
    q.limit = page;
    py::list out;
    for (;;) {
      Result<protocol::ScanResult> r = Status::Ok();
      {
        py::gil_scoped_release release;
        r = client_->Scan(q);
      }
      auto res = Unwrap(std::move(r));
      for (const auto& e : res.entries) {
        out.append(py::make_tuple(Bytes(e.key), e.value_bytes, TierOf(e.tier)));
      }
      if (res.next_cursor.empty() || res.entries.empty()) return out;
      q.cursor = res.next_cursor;
    }
  }

 private:
  template <typename Fn>
  void Check(Fn&& fn) {
    Status s;
    {
      py::gil_scoped_release release;
      s = fn();
    }
    if (!s.ok()) Raise(s);
  }

  std::unique_ptr<client::Client> client_;
};

}  // namespace
}  // namespace kvdepot::python

PYBIND11_MODULE(_kvdepot, m) {
  using namespace kvdepot;
  using namespace kvdepot::python;
  m.doc() = "kvdepot client: talks to kvdepotd (protocol v1) over TCP or a Unix socket";
  ErrorType() = py::reinterpret_borrow<py::object>(
      PyErr_NewException("kvdepot.Error", PyExc_RuntimeError, nullptr));
  ErrorType().attr("__doc__") =
      "A failed kvdepot call: the message starts with the status name (e.g. 'unavailable: ').";
  m.attr("Error") = ErrorType();
  EnumTypes().tier = MakeIntEnum(m, "Tier", {{"NONE", 0}, {"GPU", 1}, {"HOST", 2}, {"SSD", 3}},
                                 "Where a key is held: the tier LOOKUP and scan report (NONE: "
                                 "not cached).");
  EnumTypes().dtype = MakeIntEnum(m, "DType", {{"FP16", 1}, {"BF16", 2}, {"FP32", 3}},
                                  "The element type of a namespace's KV tensors.");
  EnumTypes().codec = MakeIntEnum(m, "Codec", {{"RAW", 0}, {"CACHEGEN", 1}, {"HACK_INT2", 2}},
                                  "A chunk container's codec (docs/format.md): what GET_AS "
                                  "transcodes into and a namespace's codec.");
  // The ints of earlier releases, kept: each is the Tier member of the same value.
  m.attr("TIER_NONE") = EnumTypes().tier(0);
  m.attr("TIER_GPU") = EnumTypes().tier(1);
  m.attr("TIER_HOST") = EnumTypes().tier(2);
  m.attr("TIER_SSD") = EnumTypes().tier(3);
  m.attr("LM_HEADER_BYTES") = lm::kValueHeaderBytes;

  py::class_<Namespace>(m, "Namespace",
                        "A chunk-key namespace (docs/format.md §2): a model, its tensor-parallel "
                        "rank, dtype, codec and chunk size, an optional tenant and salt.")
      .def(py::init(&MakeNamespace), py::arg("model"), py::arg("tp_world_size") = 1,
           py::arg("tp_rank") = 0, py::arg("dtype") = 1, py::arg("codec") = 0,
           py::arg("chunk_tokens") = 256, py::arg("tenant") = "", py::arg("salt") = "",
           "Makes a namespace. dtype: a kvdepot.DType (default FP16); codec: a kvdepot.Codec "
           "(default RAW); plain ints work too. Invalid fields raise kvdepot.Error.")
      .def(
          "id",
          [](const Namespace& ns) {
            const NamespaceId id = ns.Id();
            return py::bytes(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
          },
          "The 16-byte namespace id: the first 16 bytes of each of its chunk keys.")
      .def("label", &Namespace::Label, "A readable summary of the namespace's fields.")
      .def_property_readonly(
          "model", [](const Namespace& ns) { return ns.model; }, "The model name.")
      .def_property_readonly(
          "dtype",
          [](const Namespace& ns) { return EnumTypes().dtype(static_cast<int>(ns.dtype)); },
          "The KV element type, a kvdepot.DType.")
      .def_property_readonly(
          "codec",
          [](const Namespace& ns) { return EnumTypes().codec(static_cast<int>(ns.codec)); },
          "The codec, a kvdepot.Codec.");

  m.def(
      "chunk_keys",
      [](const Namespace& ns, const std::vector<std::uint32_t>& tokens, bool include_partial) {
        return KeysOf(Unwrap(ChunkKeysForTokens(ns, tokens, include_partial)));
      },
      py::arg("ns"), py::arg("tokens"), py::arg("include_partial") = false,
      "The 48-byte chunk keys of a token sequence (full chunks; the partial last one too with "
      "include_partial).");

  m.def(
      "lm_namespace_id",
      [](const std::string& name) { return Bytes(Unwrap(lm::NamespaceId(name))); },
      py::arg("name") = std::string(lm::kDefaultNamespace),
      "The 16-byte key prefix of an LMCache namespace name (docs/lmcache.md).");
  m.def(
      "lm_encode_header",
      [](std::int32_t fmt, std::int32_t dtype, std::int32_t location, const py::sequence& shape) {
        if (shape.size() > 4) throw py::value_error("shape has more than 4 dimensions");
        lm::ValueHeader h;
        h.fmt = fmt;
        h.dtype = dtype;
        h.location = location;
        for (std::size_t i = 0; i < shape.size(); ++i) h.shape[i] = shape[i].cast<std::int32_t>();
        char out[lm::kValueHeaderBytes];
        lm::EncodeValueHeader(h, reinterpret_cast<std::byte*>(out));
        return py::bytes(out, sizeof(out));
      },
      py::arg("fmt"), py::arg("dtype"), py::arg("location"), py::arg("shape"),
      "The 32-byte header kept in front of an LMCache value (shape padded with zeros to 4).");

  py::class_<PyClient>(m, "Client",
                       "A thread-safe client of kvdepotd that pools its connections. Keys are "
                       "bytes or str (1 to 256 bytes); values any C-contiguous buffer. Network "
                       "calls release the GIL; failures raise kvdepot.Error.")
      .def(py::init<const std::string&, int, std::size_t, const std::string&, const std::string&,
                    bool, const std::string&, const std::string&, const std::string&,
                    const std::string&, const std::string&>(),
           py::arg("address") = "127.0.0.1:7600", py::arg("timeout_ms") = 30000,
           py::arg("pool_size") = 4, py::kw_only(), py::arg("token") = "",
           py::arg("token_file") = "", py::arg("tls") = false, py::arg("tls_ca_file") = "",
           py::arg("tls_cert_file") = "", py::arg("tls_key_file") = "",
           py::arg("tls_server_name") = "", py::arg("cluster_routing") = "auto",
           "Connects on demand to address (HOST:PORT or unix:PATH). token / token_file: AUTH on "
           "every connection (docs/security.md); tls*: TLS over TCP, verifying the server "
           "against tls_ca_file (or the system CAs). cluster_routing: 'auto' (default) asks "
           "address for the cluster's view at first use and sends each key's requests straight "
           "to its owner (a daemon not in a cluster is used as is); 'off' sends everything to "
           "address (docs/cluster.md, Smart clients).")
      .def("ping", &PyClient::Ping, "One round trip; raises kvdepot.Error when it fails.")
      .def("put", &PyClient::Put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("placement_key") = py::none(),
           "Stores value (any C-contiguous buffer, sent without a copy) under key. "
           "placement_key (every key-based method takes one): in a cluster, the key is placed "
           "by it instead of by itself, e.g. by its prompt group's anchor (docs/cluster.md); "
           "None places it by itself.")
      .def("put_parts", &PyClient::PutParts, py::arg("key"), py::arg("parts"), py::kw_only(),
           py::arg("placement_key") = py::none(),
           "Stores the concatenation of parts (e.g. a header and a tensor) without joining "
           "them first.")
      .def("get", &PyClient::Get, py::arg("key"), py::kw_only(),
           py::arg("placement_key") = py::none(), "The value as bytes, or None on a miss.")
      .def("get_into", &PyClient::GetInto, py::arg("key"), py::arg("out"), py::kw_only(),
           py::arg("placement_key") = py::none(),
           "Receives the value straight into out (writable, C-contiguous, large enough); its "
           "size, or None on a miss.")
      .def("get_as", &PyClient::GetAs, py::arg("key"), py::arg("codec"), py::kw_only(),
           py::arg("placement_key") = py::none(),
           "GET_AS: the value (a chunk container) transcoded by the daemon into codec (a "
           "kvdepot.Codec), as bytes; None on a miss. The daemon's codec metrics count it.")
      .def("get_lm", &PyClient::GetLm, py::arg("key"), py::arg("allocate"), py::kw_only(),
           py::arg("placement_key") = py::none(),
           "A value stored with an LMCache header: allocate(payload_size, fmt, dtype, location, "
           "shape) returns the writable buffer the payload is received into (or None to drop "
           "it). Returns (payload_size, fmt, dtype, location, shape), or None.")
      .def("lookup", &PyClient::Lookup, py::arg("keys"), py::kw_only(),
           py::arg("placement_keys") = py::none(),
           "One round trip for keys given in prefix order: (prefix_length, [kvdepot.Tier per "
           "key]). placement_keys: None, or one per key (None entries: placed by the key).")
      .def("lookup_prefix", &PyClient::LookupPrefix, py::arg("ns"), py::arg("tokens"),
           py::kw_only(), py::arg("group_chunks") = 0,
           "The chunk keys of the full chunks of tokens in namespace ns and one LOOKUP: "
           "(prefix_length, keys, [kvdepot.Tier per key]). In a cluster each chunk is placed by "
           "its group's anchor; group_chunks (G) 0 takes the cluster's G from the client's view "
           "(with cluster_routing='off' or no cluster: placed per key), > 0 overrides it.")
      .def("put_prefix", &PyClient::PutPrefix, py::arg("ns"), py::arg("tokens"), py::arg("values"),
           py::kw_only(), py::arg("group_chunks") = 0,
           "Stores values[i] (C-contiguous buffers) as chunk i of tokens in namespace ns, one "
           "value per full chunk (len(tokens) // ns chunk_tokens), placed in groups exactly as "
           "lookup_prefix finds them (group_chunks as lookup_prefix's); sent to the chunks' "
           "owners in parallel. Raises kvdepot.Error on a wrong count, a failed request or a "
           "refused chunk.")
      .def("delete", &PyClient::Delete, py::arg("key"), py::kw_only(),
           py::arg("placement_key") = py::none(), "Deletes key; True when it was present.")
      .def("stats", &PyClient::Stats,
           "The daemon's statistics (the STATS document of docs/protocol.md) as a dict.")
      .def("scan", &PyClient::Scan, py::arg("prefix") = py::bytes(), py::arg("page") = 4096,
           "Every key starting with prefix, fetched page keys at a time: a list of (key, "
           "value_bytes, kvdepot.Tier).");
}
