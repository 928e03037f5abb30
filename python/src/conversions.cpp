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

OutputStream python_output_stream(nb::handle sink,
                                  std::function<Error(nb::python_error&)> failure) {
  sink.inc_ref();
  // Dropped by whichever thread ends the stream's last copy: the GIL is taken to drop it.
  std::shared_ptr<PyObject> object(sink.ptr(), [](PyObject* o) {
    GilAcquire gil;
    Py_DECREF(o);
  });
  auto call = [object, failure](const char* method, nb::handle arg) {
    GilAcquire gil;
    try {
      nb::object fn = nb::handle(object.get()).attr(method);
      if (arg.is_valid())
        fn(arg);
      else
        fn();
    } catch (nb::python_error& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) throw;
      throw failure(e);
    }
  };
  OutputStream stream;
  stream.write = [call](std::span<const std::byte> bytes) {
    GilAcquire gil;
    nb::bytes copy(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    call("write", copy);
  };
  stream.commit = [call] { call("commit", nb::handle()); };
  stream.abort = [object] {
    GilAcquire gil;
    try {
      nb::handle(object.get()).attr("abort")();
    } catch (nb::python_error&) {  // must not throw: the stream is being abandoned anyway
    }
  };
  return stream;
}

}  // namespace voxpipe::python
