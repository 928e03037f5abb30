// The foundation helpers of the binding areas (conversions.hpp).
#include "conversions.hpp"

#include "gil.hpp"

namespace voxpipe::python {

std::shared_ptr<const void> hold_buffer(nb::handle object, std::span<const std::byte>& bytes) {
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(object.ptr(), view.get(), PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
  bytes = std::span(static_cast<const std::byte*>(view->buf), static_cast<std::size_t>(view->len));
  return std::shared_ptr<const void>(view.release(), [](Py_buffer* v) {
    GilAcquire gil;
    PyBuffer_Release(v);
    delete v;
  });
}

std::shared_ptr<const void> hold_buffer(nb::handle object, std::span<const std::uint8_t>& bytes) {
  std::span<const std::byte> raw;
  std::shared_ptr<const void> owner = hold_buffer(object, raw);
  bytes = std::span(reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size());
  return owner;
}

nb::bytes to_bytes(std::span<const std::uint8_t> bytes) {
  return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace voxpipe::python
