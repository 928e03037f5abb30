// Sized-member files for the gz tests (members_test.cpp, member_writer_test.cpp): what
// MemberWriter writes, fed in pieces.
#pragma once

#include <algorithm>
#include <string>

#include "core/file.hpp"
#include "gz/member_writer.hpp"
#include "test_support.hpp"

namespace gztest {

// Writes `data` through a MemberWriter as m.gz (m.bgz for BGZF) in `dir`, in writes of `piece`
// bytes (0: one write); returns its path.
inline std::string write_members(const vptest::TempDir& dir, const vptest::Bytes& data, int level,
                                 voxpipe::GzipLayout layout, unsigned threads,
                                 std::size_t piece = 0) {
  const std::string path = dir.file(layout == voxpipe::GzipLayout::bgzf ? "m.bgz" : "m.gz");
  voxpipe::core::AtomicOutputFile out(path);
  voxpipe::gz::MemberWriter w(out, level, layout, threads);
  if (piece == 0) piece = data.size() + 1;
  for (std::size_t i = 0; i < data.size(); i += piece)
    w.write(vptest::as_bytes(data).subspan(i, std::min(piece, data.size() - i)));
  w.finish();
  out.commit();
  return path;
}

}  // namespace gztest
