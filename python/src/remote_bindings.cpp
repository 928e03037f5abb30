// Objects read by byte ranges (voxpipe/remote.hpp): the fetcher is a Python callable (voxpipe's
// _remote module, over obstore), called from whichever thread reads, with the GIL taken for the
// call only; obstore releases it while its requests run, so ranges of one call go out together.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>

#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "conversions.hpp"
#include "gil.hpp"
#ifdef VOXPIPE_PYTHON_CLI
#include "commands.hpp"  // the CLI's entry (cli/), for python -m voxpipe
#endif
#include "voxpipe/error.hpp"
#include "voxpipe/nifti.hpp"
#include "voxpipe/remote.hpp"

namespace nb = nanobind;
using namespace voxpipe;

namespace {

// A reference to a Python object that any thread may drop: the GIL is taken to drop it.
std::shared_ptr<PyObject> shared_object(nb::handle object) {
  object.inc_ref();
  return std::shared_ptr<PyObject>(object.ptr(), [](PyObject* o) {
    python::GilAcquire gil;
    Py_DECREF(o);
  });
}

// A Python exception raised for the object `name` as a voxpipe::Error: a voxpipe error keeps
// its code, field and offset (a store's FormatError is a format error); otherwise not_found for
// FileNotFoundError, io for the rest. Its message is the detail. Call with the GIL held.
Error error_of(nb::python_error& e, const std::string& name) {
  ErrorCode code = e.matches(PyExc_FileNotFoundError) ? ErrorCode::not_found : ErrorCode::io;
  std::string field;
  std::optional<std::uint64_t> offset;
  nb::handle value = e.value();
  nb::object base = nb::module_::import_("voxpipe._foundation.errors").attr("VoxpipeError");
  if (PyObject_IsInstance(value.ptr(), base.ptr()) == 1) {
    const std::string c = nb::cast<std::string>(nb::str(value.attr("code")));
    for (ErrorCode k : {ErrorCode::not_found, ErrorCode::io, ErrorCode::format,
                        ErrorCode::unsupported, ErrorCode::truncated, ErrorCode::corrupt,
                        ErrorCode::limit, ErrorCode::invalid_argument})
      if (c == error_code_name(k)) code = k;
    field = nb::cast<std::string>(nb::str(value.attr("field")));
    nb::object o = value.attr("offset");
    if (!o.is_none()) offset = nb::cast<std::uint64_t>(o);
  }
  std::string detail = nb::str(value).c_str();
  if (detail.empty()) detail = nb::str(nb::handle(e.type()).attr("__name__")).c_str();
  // The Python layer's messages name the URL first (its credentials redacted); the Error
  // names it again.
  const std::string shown =
      nb::cast<std::string>(nb::module_::import_("voxpipe._foundation.redact").attr("redact")(name));
  if (detail.rfind(shown + ": ", 0) == 0) detail.erase(0, shown.size() + 2);
  return Error(code, name, field, detail, offset);
}

// fetch([(offset, size), ...]) -> [buffer, ...]; its exceptions as error_of.
RangeFetcher python_fetcher(nb::handle fetch, std::string name) {
  std::shared_ptr<PyObject> fn = shared_object(fetch);
  return [fn, name](std::span<const ByteRange> ranges) {
    python::GilAcquire gil;
    std::vector<FetchedBytes> out;
    try {
      nb::list args;
      for (const ByteRange& r : ranges) args.append(nb::make_tuple(r.offset, r.size));
      nb::object result = nb::handle(fn.get())(args);
      for (nb::handle item : result) {
        FetchedBytes f;
        f.owner = python::hold_buffer(item, f.bytes);
        out.push_back(std::move(f));
      }
    } catch (nb::python_error& e) {
      // Ctrl-C reaches Python as KeyboardInterrupt, not as a failed read.
      if (e.matches(PyExc_KeyboardInterrupt)) throw;
      throw error_of(e, name);
    }
    return out;
  };
}

}  // namespace

void bind_remote(nb::module_& m) {
  nb::class_<RemoteInput>(m, "RemoteInput")
      .def(
          "__init__",
          [](RemoteInput* self, const std::string& name, std::uint64_t size, nb::handle fetch,
             nb::handle initial, std::uint64_t min_request, std::uint64_t coalesce_gap,
             std::uint64_t part_size, std::uint64_t max_cached_bytes, const std::string& version) {
            FetchedBytes first;
            if (!initial.is_none()) first.owner = python::hold_buffer(initial, first.bytes);
            RemoteInputOptions options;
            options.min_request = min_request;
            options.coalesce_gap = coalesce_gap;
            options.part_size = part_size;
            options.max_cached_bytes = max_cached_bytes;
            new (self) RemoteInput(name, size, python_fetcher(fetch, name), std::move(first), options,
                                   version);
          },
          nb::arg("name"), nb::arg("size"), nb::arg("fetch"), nb::arg("initial") = nb::none(),
          nb::arg("min_request") = RemoteInputOptions{}.min_request,
          nb::arg("coalesce_gap") = RemoteInputOptions{}.coalesce_gap,
          nb::arg("part_size") = RemoteInputOptions{}.part_size,
          nb::arg("max_cached_bytes") = RemoteInputOptions{}.max_cached_bytes,
          nb::arg("version") = "",
          "An object of `size` bytes read by ranges through `fetch([(offset, size), ...])`, which "
          "returns one buffer per range (each whole; the ranges of one call may be fetched "
          "concurrently). `initial`: bytes already fetched from offset 0. `name` (the URL) "
          "stands for the object in errors; `version` (its ETag) keys its seek-index cache entry.")
      .def_prop_ro("name", &RemoteInput::name)
      .def_prop_ro("size", &RemoteInput::size)
      .def_prop_ro("version", &RemoteInput::version)
      .def_prop_ro(
          "stats",
          [](const RemoteInput& r) {
            const RemoteInputStats s = r.stats();
            return nb::make_tuple(s.requests, s.bytes);
          },
          "(ranges fetched, bytes fetched) so far.")
      .def(
          "prefetch",
          [](const RemoteInput& r, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
            std::vector<ByteRange> rs;
            for (const auto& [offset, size] : ranges) rs.push_back({offset, size});
            python::GilRelease release;
            r.prefetch(rs);
          },
          nb::arg("ranges"), "Fetch [(offset, size), ...] into the cache now.");

  m.def(
      "open_remote",
      [](std::shared_ptr<const RemoteInput> header, std::shared_ptr<const RemoteInput> data) {
        python::GilRelease release;
        return open_nifti_remote(std::move(header), std::move(data));
      },
      nb::arg("header"), nb::arg("data") = nb::none(),
      "Open a NIfTI object read by ranges (RemoteInput), reading the header and extensions only; "
      "`data`: the .img object of a .hdr/.img pair. A Reader of it takes index_mode 'none', or "
      "'path' with a GZIDX file checked against the object's size and last 64 KiB.");

  m.def(
      "set_url_handlers",
      [](nb::handle open, nb::handle index_cache_path, nb::handle put, nb::handle fetch_all,
         nb::handle write_zarr, nb::handle zarr_compression, nb::handle exists,
         nb::handle upload, nb::handle clean, nb::handle open_upload) {
        // Module-level functions that live as long as the process: referenced for good, so
        // that nothing is released after the interpreter has gone.
        for (nb::handle h : {open, index_cache_path, put, fetch_all, write_zarr, zarr_compression,
                             exists, upload, clean, open_upload})
          h.inc_ref();
        PyObject* o = open.ptr();
        PyObject* c = index_cache_path.ptr();
        PyObject* p = put.ptr();
        PyObject* a = fetch_all.ptr();
        PyObject* w = write_zarr.ptr();
        PyObject* z = zarr_compression.ptr();
        UrlHandlers handlers;
        handlers.open = [o](const std::string& url) -> std::shared_ptr<const RemoteInput> {
          python::GilAcquire gil;
          try {
            return nb::cast<std::shared_ptr<RemoteInput>>(nb::handle(o)(url));
          } catch (nb::python_error& e) {
            throw error_of(e, url);
          }
        };
        handlers.index_cache_path = [c](const std::string& url, const std::string& version) {
          python::GilAcquire gil;
          try {
            return nb::cast<std::string>(nb::handle(c)(url, version));
          } catch (nb::python_error& e) {
            throw error_of(e, url);
          }
        };
        handlers.put = [p](const std::string& path, const std::string& url) {
          python::GilAcquire gil;
          try {
            nb::handle fn(p);
            fn(path, url);
          } catch (nb::python_error& e) {
            throw error_of(e, url);
          }
        };
        handlers.fetch_all = [a](const std::string& url) {
          python::GilAcquire gil;
          std::vector<std::pair<std::string, FetchedBytes>> out;
          try {
            for (nb::handle item : nb::handle(a)(url)) {
              FetchedBytes f;
              f.owner = python::hold_buffer(item[1], f.bytes);
              out.emplace_back(nb::cast<std::string>(item[0]), std::move(f));
            }
          } catch (nb::python_error& e) {
            throw error_of(e, url);
          }
          return out;
        };
        handlers.write_zarr = [w](const std::string& input, const std::string& output,
                                  const std::vector<std::pair<std::string, std::string>>& options) {
          python::GilAcquire gil;
          try {
            nb::handle fn(w);
            fn(input, output, options);
          } catch (nb::python_error& e) {
            throw error_of(e, output);
          }
        };
        handlers.zarr_compression = [z](const std::string& path) {
          python::GilAcquire gil;
          try {
            return nb::cast<std::string>(nb::handle(z)(path));
          } catch (nb::python_error& e) {
            throw error_of(e, path);
          }
        };
        if (!exists.is_none()) {
          PyObject* e = exists.ptr();
          handlers.exists = [e](const std::string& url) {
            python::GilAcquire gil;
            try {
              return nb::cast<bool>(nb::handle(e)(url));
            } catch (nb::python_error& ex) {
              throw error_of(ex, url);
            }
          };
        }
        if (!upload.is_none()) {
          PyObject* u = upload.ptr();
          handlers.upload = [u](const std::string& path, const std::string& url, bool overwrite) {
            python::GilAcquire gil;
            try {
              return nb::cast<bool>(nb::handle(u)(path, url, overwrite));
            } catch (nb::python_error& ex) {
              throw error_of(ex, url);
            }
          };
        }
        if (!clean.is_none()) {
          PyObject* k = clean.ptr();
          handlers.clean = [k](const std::string& url, double older_than, bool dry_run) {
            python::GilAcquire gil;
            try {
              return nb::cast<std::vector<std::string>>(nb::handle(k)(url, older_than, dry_run));
            } catch (nb::python_error& ex) {
              throw error_of(ex, url);
            }
          };
        }
        if (!open_upload.is_none()) {
          PyObject* s = open_upload.ptr();
          handlers.open_upload = [s](const std::string& url, bool overwrite,
                                     std::uint64_t max_size) {
            python::GilAcquire gil;
            try {
              nb::object sink = nb::handle(s)(url, overwrite, max_size);
              return python::python_output_stream(
                  sink, [url](nb::python_error& e) { return error_of(e, url); });
            } catch (nb::python_error& ex) {
              throw error_of(ex, url);
            }
          };
        }
        set_url_handlers(std::move(handlers));
      },
      nb::arg("open"), nb::arg("index_cache_path"), nb::arg("put"), nb::arg("fetch_all"),
      nb::arg("write_zarr"), nb::arg("zarr_compression"), nb::arg("exists") = nb::none(),
      nb::arg("upload") = nb::none(), nb::arg("clean") = nb::none(),
      nb::arg("open_upload") = nb::none(),
      "Make calls that take paths (open, build_index, the CLI's commands) read URLs and Zarr "
      "stores: open(url_or_store) -> RemoteInput, index_cache_path(url, version) -> str, "
      "put(path, url), fetch_all(url) -> [(url, buffer), ...] (an object, or those under a "
      "prefix), write_zarr(input, output, [(option, value), ...]), zarr_compression(store) -> "
      "str (how its chunks are compressed); writes to object storage: exists(url) -> bool, "
      "upload(path, url, overwrite) -> bool (False: exists), clean(url, older_than_s, dry_run) "
      "-> [line, ...], open_upload(url, overwrite, max_size) -> a sink (write(bytes), commit(), "
      "abort()) that write_nifti_stream writes into.");

#ifdef VOXPIPE_PYTHON_CLI
  m.def(
      "cli_main",
      [](const std::vector<std::string>& args) {
        nb::module_ sys = nb::module_::import_("sys");
        sys.attr("stdout").attr("flush")();
        sys.attr("stderr").attr("flush")();
        int rc;
        {
          python::GilRelease release;
          rc = cli::run(args, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
          std::cout.flush();
        }
        return rc;
      },
      nb::arg("args"),
      "Run the voxpipe command line (`voxpipe ARGS...`) in this process, where URLs are read "
      "through the handlers set_url_handlers installed; returns the exit status.");
  m.def(
      "cli_dcm2niix",
      [](const std::vector<std::string>& args) {
        std::ostringstream out, err;
        std::vector<std::string> written;
        int rc;
        {
          python::GilRelease release;
          rc = cli::cmd_dcm2niix(args, out, err, &written);
        }
        return std::make_tuple(rc, out.str(), err.str(), written);
      },
      nb::arg("args"),
      "Run `voxpipe dcm2niix ARGS...` (dcm2niix's command line) in this process, its output kept "
      "rather than printed: (exit status, stdout, stderr, [file name without extension of each "
      "series converted]).");
  m.def("cli_install_signal_handlers", &cli::install_signal_handlers,
        "On SIGINT, SIGTERM and SIGHUP, remove unfinished outputs and end by the signal, as the "
        "voxpipe program does.");
#endif
}
