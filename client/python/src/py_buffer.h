// Buffer-protocol and key helpers shared by the kvdepot Python extensions (_kvdepot and
// _kvdepot_lmcache_mp). Call with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <span>
#include <string>

namespace kvdepot::python {

// A held buffer-protocol view (C-contiguous), released on destruction (which needs the GIL).
// While it is held the exporter cannot resize or free the memory.
class Buffer {
 public:
  Buffer(pybind11::handle obj, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw pybind11::error_already_set();
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::span<std::byte> bytes() {
    return {static_cast<std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

// Keys: bytes, or str (encoded as UTF-8).
inline std::string Key(pybind11::handle key) {
  if (PyBytes_Check(key.ptr())) {
    return std::string(pybind11::reinterpret_borrow<pybind11::bytes>(key));
  }
  if (PyUnicode_Check(key.ptr())) return key.cast<std::string>();
  throw pybind11::type_error("a key must be bytes or str");
}

}  // namespace kvdepot::python
