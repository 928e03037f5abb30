// Where a writer sends the bytes of an output instead of a file: an upload to object storage
// (voxpipe's Python package opens one for a URL: voxpipe/remote.hpp UrlHandlers::open_upload),
// written in order and made visible whole or not at all.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

namespace voxpipe {

struct OutputStream {
  // Takes the next bytes of the output, in order, from the writing thread (one call at a time);
  // the span is valid during the call only. May block (back-pressure from a slower consumer)
  // and may throw: the write then stops with that error.
  std::function<void(std::span<const std::byte>)> write;
  // Every byte has been written: make the output appear whole (complete the upload). Throws
  // when it cannot (nothing appears then).
  std::function<void()> commit;
  // The write failed or was abandoned before commit: discard what was sent (abort the upload).
  // Must not throw.
  std::function<void()> abort;
};

}  // namespace voxpipe
