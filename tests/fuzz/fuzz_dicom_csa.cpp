// The Siemens CSA header parser and the Phoenix protocol parser on arbitrary bytes: parse_csa
// either throws Error(format) with an offset inside the input (shifted by the base offset
// given), or returns elements whose item text fits in the input, no more items than the header's
// counts allow (a lying count is refused before anything is allocated from it), and accessors
// that throw nothing; parse_ascconv on the same bytes as text returns keys without blanks.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "dicom/csa.hpp"
#include "voxpipe/error.hpp"

namespace {

using namespace voxpipe;
using namespace voxpipe::dicom;

constexpr std::uint64_t kBase = 1000;

void check_csa(std::span<const std::uint8_t> in) {
  CsaHeader h;
  try {
    h = parse_csa(in, "fuzz.dcm (0029,1010)", kBase);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::format || !e.offset()) std::abort();
    if (*e.offset() < kBase || *e.offset() > kBase + in.size()) std::abort();
    return;
  }
  // Each element takes 84 bytes and each item 16 at least: the counts are bounded by the input.
  if (h.elements().size() * 84 > in.size()) std::abort();
  std::size_t text = 0, items = 0;
  for (const CsaElement& e : h.elements()) {
    if (e.name.size() > 64 || e.vr.size() > 4) std::abort();
    if (e.vm > 0 && e.items.size() > std::size_t(e.vm)) std::abort();
    for (const std::string& s : e.items) {
      if (s.empty()) std::abort();
      text += s.size();
    }
    items += e.items.size();
    (void)h.numbers(e.name);
    (void)h.number(e.name, 1);
    (void)h.string(e.name);
    if (h.find(e.name) == nullptr) std::abort();
  }
  if (text + items * 16 > in.size()) std::abort();
}

void check_ascconv(std::span<const std::uint8_t> in) {
  const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
  for (const auto& [key, value] : parse_ascconv(text)) {
    if (key.empty() || key.find_first_of(" \t\r\n=\"#") != std::string::npos) std::abort();
    if (value.find('\n') != std::string::npos) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  check_csa(in);
  check_ascconv(in);
  return 0;
}
