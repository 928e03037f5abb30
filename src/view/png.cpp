// encode_png and write_png (voxpipe/view.hpp), through libpng's simplified API, which reports
// errors as a return value and a message (no longjmp through our frames).
#include <png.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/view.hpp"

namespace voxpipe {

std::vector<std::uint8_t> encode_png(const GrayImage& image) {
  const std::size_t expected = static_cast<std::size_t>(image.width) * image.height;
  if (image.width == 0 || image.height == 0 || image.pixels.size() != expected)
    throw Error(ErrorCode::invalid_argument, "", "image",
                "expected " + std::to_string(expected) +
                    " pixels of a non-empty picture, but received " +
                    std::to_string(image.pixels.size()));
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = image.width;
  png.height = image.height;
  png.format = PNG_FORMAT_GRAY;
  // The first call measures, the second writes into a buffer of that size.
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(),
                                 static_cast<png_int_32>(image.width), nullptr))
    throw Error(ErrorCode::invalid_argument, "", "image", std::string("libpng: ") + png.message);
  std::vector<std::uint8_t> out(size);
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(),
                                 static_cast<png_int_32>(image.width), nullptr))
    throw Error(ErrorCode::invalid_argument, "", "image", std::string("libpng: ") + png.message);
  out.resize(size);
  return out;
}

void write_png(const std::string& path, const GrayImage& image) {
  const std::vector<std::uint8_t> bytes = encode_png(image);
  core::AtomicOutputFile file(path);
  file.write(std::as_bytes(std::span(bytes)));
  file.commit();
}

}  // namespace voxpipe
