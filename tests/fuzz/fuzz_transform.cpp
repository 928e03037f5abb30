// The transform readers' text parsers (resample/transform_io.hpp) over arbitrary bytes. The first
// byte chooses the format (automatic, ITK, FSL, plain matrix), whether a reference and a moving
// grid are given, and the file name the automatic rule looks at; the rest is the file. Each call
// either throws voxpipe::Error or returns at least one transform, every value finite. The same
// bytes also go to each parser directly (ITK text, ITK MATLAB, matrix, list), whose successes
// must agree with how the bytes were classified.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "resample/transform_io.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/transform.hpp"

namespace {

using namespace voxpipe;

// An oblique reference (positive determinant: FSL flips its x) and a moving grid with a
// negative one, so that both branches of FSL's conversion run.
const Grid kReference{{20, 24, 18},
                      {1.98, -0.25, -0.15, -20.5, 0.18, 2.44, -0.6, 30.25, 0.14, 0.48, 2.94, -12,
                       0, 0, 0, 1}};
const Grid kMoving{{30, 16, 22},
                   {-1.45, 0.25, 0.3, 40, 0.29, 1.23, -0.1, -35.5, 0.23, 0.02, 1.98, 10.75, 0, 0,
                    0, 1}};

void check(const std::vector<Matrix4>& out) {
  if (out.empty()) std::abort();
  for (const auto& m : out)
    for (double v : m)
      if (!std::isfinite(v)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t spec = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  AffineReadOptions options;
  options.format = static_cast<AffineFormat>(spec & 3);
  if (spec & 4) options.reference = &kReference;
  if (spec & 8) options.moving = &kMoving;
  const std::string path = (spec & 16) ? "in.mat" : "in.txt";

  const auto kind = resample::classify_transform_text(text);
  try {
    check(resample::parse_affines_text(text, path, options));
    if (kind == resample::TransformText::list) std::abort();  // a list is never a transform
  } catch (const Error&) {
  }
  try {
    const auto entries = resample::parse_transform_list(text, path);
    if (entries.empty()) std::abort();
    for (const auto& e : entries)
      if (e.path.empty() || e.path.front() == '#' || e.line == 0) std::abort();
  } catch (const Error&) {
  }
  try {
    const auto itk = resample::parse_itk_text(text, path);
    check(itk);
    if (kind != resample::TransformText::itk) std::abort();
  } catch (const Error&) {
  }
  try {
    const Matrix4 m = resample::parse_itk_matlab(text, path);
    check({m});
    if (kind != resample::TransformText::itk_matlab) std::abort();
  } catch (const Error&) {
  }
  try {
    (void)resample::parse_matrix_text(text, path, (spec & 32) != 0);
  } catch (const Error&) {
  }
  return 0;
}
