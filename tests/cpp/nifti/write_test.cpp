// write_nifti: the bytes it lays down (header, extension flag, padding, data) for every storage
// kind, gzip output, and that a failure never leaves a file behind.
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::NiftiHeader;
using vptest::Bytes;

NiftiHeader expected_on_disk(NiftiHeader h, bool single, double vox_offset) {
  h.magic = {'n', single ? '+' : 'i', h.version == 2 ? '2' : '1', 0};
  h.sizeof_hdr = h.version == 2 ? 540 : 348;
  h.vox_offset = vox_offset;
  return h;
}

TEST(WriteNifti, SingleFileLayout) {
  for (int version : {1, 2}) {
    for (bool big : {false, true}) {
      vptest::TempDir dir;
      NiftiHeader h = vptest::make_header(version, DType::i16, {3, 2}, big);
      h.sizeof_hdr = 0;           // set by the writer
      h.magic = {'x', 'x', 'x', 0};  // set by the writer
      const std::vector<std::int16_t> v{1, -2, 3, -4, 5, -6};
      vptest::write_image(dir, "s.nii", h, v);
      const Bytes f = vptest::read_file(dir.file("s.nii"));
      const std::size_t hs = version == 2 ? 540 : 348;
      ASSERT_EQ(f.size(), hs + 4 + 12);
      EXPECT_EQ(Bytes(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(hs)),
                voxpipe::encode_nifti_header(expected_on_disk(h, true, static_cast<double>(hs + 4))));
      EXPECT_EQ(Bytes(f.begin() + static_cast<std::ptrdiff_t>(hs), f.begin() + static_cast<std::ptrdiff_t>(hs + 4)), Bytes(4, 0));
      EXPECT_EQ(Bytes(f.begin() + static_cast<std::ptrdiff_t>(hs + 4), f.end()), vptest::to_bytes(v, big));
      if (version == 1) {
        EXPECT_EQ(vptest::field<float>(f, 108, big), 352.0f);
        EXPECT_EQ(Bytes(f.begin() + 344, f.begin() + 348), (Bytes{'n', '+', '1', 0}));
      } else {
        EXPECT_EQ(vptest::field<std::int64_t>(f, 168, big), 544);
        EXPECT_EQ(Bytes(f.begin() + 4, f.begin() + 12), (Bytes{'n', '+', '2', 0, 13, 10, 26, 10}));
      }
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"s.nii"});
    }
  }
}

TEST(WriteNifti, PairLayout) {
  for (int version : {1, 2}) {
    vptest::TempDir dir;
    const NiftiHeader h = vptest::make_header(version, DType::u8, {4}, true);
    vptest::write_image(dir, "p.img", h, std::vector<std::uint8_t>{9, 8, 7, 6});
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"p.hdr", "p.img"}));
    // No extensions: the .hdr is the header alone (no extension flag), the .img the data alone.
    EXPECT_EQ(vptest::read_file(dir.file("p.hdr")), voxpipe::encode_nifti_header(expected_on_disk(h, false, 0)));
    EXPECT_EQ(vptest::read_file(dir.file("p.img")), (Bytes{9, 8, 7, 6}));
    // With extensions the .hdr carries the flag and them; the .img is unchanged.
    vptest::write_image(dir, "q.hdr", h, std::vector<std::uint8_t>{1, 2, 3, 4}, {{2, {'a'}}});
    const Bytes hdr = vptest::read_file(dir.file("q.hdr"));
    const std::size_t hs = version == 2 ? 540 : 348;
    ASSERT_EQ(hdr.size(), hs + 4 + 16);
    EXPECT_EQ(hdr[hs], 1);
    EXPECT_EQ(vptest::field<std::int32_t>(hdr, hs + 4, true), 16);
    EXPECT_EQ(vptest::field<std::int32_t>(hdr, hs + 8, true), 2);
    EXPECT_EQ(hdr[hs + 12], 'a');
    EXPECT_EQ(vptest::read_file(dir.file("q.img")), (Bytes{1, 2, 3, 4}));
  }
}

TEST(WriteNifti, SingleLayoutGzipIsWhatPythonsGzipWrites) {
  vptest::TempDir dir;
  const NiftiHeader h = vptest::make_header(1, DType::f32, {50, 40});
  std::vector<float> v(2000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  vptest::write_image(dir, "g.nii", h, v);
  for (int level : {0, 1, 9}) {
    vptest::write_image(dir, "g.nii.gz", h, v, {}, level, voxpipe::GzipLayout::single);
    const Bytes gz = vptest::read_file(dir.file("g.nii.gz"));
    EXPECT_EQ(Bytes(gz.begin(), gz.begin() + 8), (Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}));
    EXPECT_EQ(gz[8], level == 1 ? 4 : level == 9 ? 2 : 0);
    EXPECT_EQ(gz[9], 0xff);
    EXPECT_EQ(vptest::gunzip(gz), vptest::read_file(dir.file("g.nii"))) << "level " << level;
  }
  // Pairs compress both files.
  vptest::write_image(dir, "g.hdr.gz", h, v, {}, 1, voxpipe::GzipLayout::single);
  vptest::write_image(dir, "g.hdr", h, v);
  EXPECT_EQ(vptest::gunzip(vptest::read_file(dir.file("g.hdr.gz"))), vptest::read_file(dir.file("g.hdr")));
  EXPECT_EQ(vptest::gunzip(vptest::read_file(dir.file("g.img.gz"))), vptest::read_file(dir.file("g.img")));
}

TEST(WriteNifti, DefaultGzipIsSizedMembersThatZlibAndVoxpipeRead) {
  vptest::TempDir dir;
  const NiftiHeader h = vptest::make_header(1, DType::i16, {64, 64, 200});
  std::vector<std::int16_t> v(64 * 64 * 200);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int16_t>((i * 7) % 1000 - 300);
  vptest::write_image(dir, "m.nii", h, v);
  for (auto layout : {voxpipe::GzipLayout::members, voxpipe::GzipLayout::bgzf}) {
    vptest::write_image(dir, "m.nii.gz", h, v, {}, 1, layout);
    const Bytes gz = vptest::read_file(dir.file("m.nii.gz"));
    EXPECT_EQ(Bytes(gz.begin(), gz.begin() + 4), (Bytes{0x1f, 0x8b, 8, 4}));  // FEXTRA: sizes
    EXPECT_EQ(vptest::gunzip(gz), vptest::read_file(dir.file("m.nii")));
    const auto img = voxpipe::open_nifti(dir.file("m.nii.gz"));
    std::vector<std::int16_t> back(v.size());
    voxpipe::read_nifti_data(img, {}, voxpipe::OutputSpec{DType::i16, false},
                             std::as_writable_bytes(std::span(back)));
    EXPECT_EQ(back, v);
  }
  // Pairs compress both files.
  vptest::write_image(dir, "g.hdr.gz", h, v);
  vptest::write_image(dir, "g.hdr", h, v);
  EXPECT_EQ(vptest::gunzip(vptest::read_file(dir.file("g.hdr.gz"))), vptest::read_file(dir.file("g.hdr")));
  EXPECT_EQ(vptest::gunzip(vptest::read_file(dir.file("g.img.gz"))), vptest::read_file(dir.file("g.img")));
}

TEST(WriteNifti, LargerVoxOffsetIsPaddedWithZeros) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::u8, {3});
  h.vox_offset = 1024;
  vptest::write_image(dir, "o.nii", h, std::vector<std::uint8_t>{5, 6, 7});
  const Bytes f = vptest::read_file(dir.file("o.nii"));
  ASSERT_EQ(f.size(), 1027u);
  EXPECT_EQ(Bytes(f.begin() + 348, f.begin() + 1024), Bytes(1024 - 348, 0));
  const auto img = voxpipe::open_nifti(dir.file("o.nii"));
  EXPECT_EQ(img.data_offset, 1024u);
  EXPECT_EQ(vptest::read_as<std::uint8_t>(img, {}, {.type = DType::u8, .apply_scaling = false}),
            (std::vector<std::uint8_t>{5, 6, 7}));
}

TEST(WriteNifti, VoxOffsetTooSmallForTheExtensionsIsRefused) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::u8, {3});
  h.vox_offset = 352;
  auto err = vptest::catch_error([&] {
    vptest::write_image(dir, "o.nii", h, std::vector<std::uint8_t>{1, 2, 3}, {{6, Bytes(20, 'x')}});
  });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::invalid_argument);
  EXPECT_EQ(err->field(), "vox_offset");
  EXPECT_TRUE(dir.entries().empty());
}

// A producer that delivers `good` bytes, then throws.
voxpipe::DataProducer failing_producer(std::size_t good) {
  auto sent = std::make_shared<std::size_t>(0);
  return [sent, good](std::span<std::byte> buf) -> std::size_t {
    if (*sent >= good) throw std::runtime_error("source failed");
    const std::size_t n = std::min(buf.size(), good - *sent);
    std::memset(buf.data(), 0x5a, n);
    *sent += n;
    return n;
  };
}

TEST(WriteNifti, NoFileIsLeftWhenTheProducerThrows) {
  for (const char* name : {"f.nii", "f.nii.gz", "f.hdr", "f.img.gz"}) {
    SCOPED_TRACE(name);
    vptest::TempDir dir;
    const NiftiHeader h = vptest::make_header(1, DType::f32, {100, 100, 100});
    EXPECT_THROW(voxpipe::write_nifti(dir.file(name), h, {}, failing_producer(3000000)), std::runtime_error);
    EXPECT_TRUE(dir.entries().empty()) << dir.entries().front();
    EXPECT_THROW(voxpipe::write_nifti(dir.file(name), h, {}, failing_producer(0)), std::runtime_error);
    EXPECT_TRUE(dir.entries().empty());
  }
}

TEST(WriteNifti, AFailedWriteKeepsTheOldFile) {
  vptest::TempDir dir;
  const NiftiHeader h = vptest::make_header(1, DType::u8, {4});
  vptest::write_image(dir, "k.nii", h, std::vector<std::uint8_t>{1, 2, 3, 4});
  const Bytes before = vptest::read_file(dir.file("k.nii"));
  EXPECT_THROW(voxpipe::write_nifti(dir.file("k.nii"), h, {}, failing_producer(2)), std::runtime_error);
  EXPECT_EQ(vptest::read_file(dir.file("k.nii")), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"k.nii"});
}

TEST(WriteNifti, WrongDataSizeIsRefusedAndLeavesNoFile) {
  for (const char* name : {"w.nii", "w.hdr.gz"}) {
    vptest::TempDir dir;
    const NiftiHeader h = vptest::make_header(2, DType::i32, {10, 10});
    const Bytes short_data(399, 1), long_data(401, 1), exact(400, 1);
    EXPECT_VP_ERROR(voxpipe::write_nifti(dir.file(name), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(short_data))),
                    ErrorCode::invalid_argument);
    EXPECT_TRUE(dir.entries().empty());
    EXPECT_VP_ERROR(voxpipe::write_nifti(dir.file(name), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(long_data))),
                    ErrorCode::invalid_argument);
    EXPECT_TRUE(dir.entries().empty());
    voxpipe::write_nifti(dir.file(name), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(exact)));
    EXPECT_EQ(dir.entries().size(), voxpipe::nifti_is_pair_path(name) ? 2u : 1u);
  }
}

TEST(WriteNifti, InvalidHeadersAreRefusedBeforeAnythingIsWritten) {
  vptest::TempDir dir;
  NiftiHeader h = vptest::make_header(1, DType::u8, {4});
  h.datatype = 1536;
  EXPECT_VP_ERROR(voxpipe::write_nifti(dir.file("b.nii"), h, {}, failing_producer(4)), ErrorCode::unsupported);
  h = vptest::make_header(1, DType::u8, {4});
  h.dim[1] = -4;
  // The header is both the caller's argument and a bad header field: either code is fair.
  auto err = vptest::catch_error([&] { voxpipe::write_nifti(dir.file("b.nii"), h, {}, failing_producer(4)); });
  ASSERT_TRUE(err);
  EXPECT_TRUE(err->code() == ErrorCode::invalid_argument || err->code() == ErrorCode::format) << err->what();
  EXPECT_EQ(err->field().rfind("dim", 0), 0u) << err->field();
  h = vptest::make_header(1, DType::u8, {4});
  EXPECT_VP_ERROR(voxpipe::write_nifti(dir.file("b.txt"), h, {}, failing_producer(4)), ErrorCode::format);
  EXPECT_VP_ERROR(voxpipe::write_nifti(dir.file("b.nii.gz"), h, {}, failing_producer(4), {.gzip_level = 10}),
                  ErrorCode::invalid_argument);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WriteNifti, EmptyImageFromAnEmptySpan) {
  // A zero-voxel image written from an empty buffer: the producer must not touch the (null)
  // data pointer of the empty span.
  vptest::TempDir dir;
  for (auto shape : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{0, 4}}) {
    voxpipe::write_nifti(dir.file("e.nii"), vptest::make_header(1, DType::f32, shape), {},
                         voxpipe::producer_from_bytes(std::span<const std::byte>()));
    EXPECT_EQ(voxpipe::open_nifti(dir.file("e.nii")).voxel_count(), 0u);
  }
  auto producer = voxpipe::producer_from_bytes(std::span<const std::byte>());
  std::vector<std::byte> buf(16);
  EXPECT_EQ(producer(buf), 0u);
}

TEST(WriteNifti, RoundTripOfEveryDtype) {
  vptest::TempDir dir;
  const DType types[] = {DType::u8,  DType::i8,  DType::u16, DType::i16, DType::u32,  DType::i32,  DType::u64,
                         DType::i64, DType::f32, DType::f64, DType::c64, DType::c128, DType::rgb24, DType::rgba32};
  for (DType t : types) {
    for (bool big : {false, true}) {
      SCOPED_TRACE(std::string(voxpipe::dtype_name(t)) + (big ? " BE" : " LE"));
      const std::size_t size = voxpipe::dtype_size(t);
      const Bytes data = vptest::random_bytes(size * 30, static_cast<std::uint64_t>(t));
      const NiftiHeader h = vptest::make_header(2, t, {5, 6}, big);
      voxpipe::write_nifti(dir.file("r.nii.gz"), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(data)));
      const auto img = voxpipe::open_nifti(dir.file("r.nii.gz"));
      EXPECT_EQ(img.dtype, t);
      EXPECT_EQ(img.header.big_endian, big);
      Bytes back(data.size());
      voxpipe::read_nifti_data(img, {}, {.type = t, .apply_scaling = false, .file_byte_order = true},
                               std::as_writable_bytes(std::span(back)));
      EXPECT_EQ(back, data);
    }
  }
}

// An OutputStream that records what it is given and how it ends.
struct RecordingStream {
  Bytes bytes;
  int commits = 0, aborts = 0;
  voxpipe::OutputStream stream() {
    return {[this](std::span<const std::byte> b) {
              const auto* p = reinterpret_cast<const std::uint8_t*>(b.data());
              bytes.insert(bytes.end(), p, p + b.size());
            },
            [this] { ++commits; }, [this] { ++aborts; }};
  }
};

TEST(WriteNiftiStream, TheStreamGetsTheBytesOfTheFileThenOneCommit) {
  for (const char* name : {"s.nii", "s.nii.gz"}) {
    for (voxpipe::GzipLayout layout : {voxpipe::GzipLayout::members, voxpipe::GzipLayout::single}) {
      SCOPED_TRACE(name);
      vptest::TempDir dir;
      const NiftiHeader h = vptest::make_header(1, DType::i16, {64, 64, 40});
      const Bytes data = vptest::random_bytes(2 * 64 * 64 * 40, 7);
      const voxpipe::WriteOptions options{1, layout, 2};
      voxpipe::write_nifti(dir.file(name), h, {{4, {'x', 'y'}}},
                           voxpipe::producer_from_bytes(vptest::as_bytes(data)), options);
      RecordingStream out;
      voxpipe::write_nifti_stream(std::string("s3://b/") + name, out.stream(), h, {{4, {'x', 'y'}}},
                                  voxpipe::producer_from_bytes(vptest::as_bytes(data)), options);
      EXPECT_EQ(out.bytes, vptest::read_file(dir.file(name)));
      EXPECT_EQ(out.commits, 1);
      EXPECT_EQ(out.aborts, 0);
    }
  }
}

TEST(WriteNiftiStream, AFailedWriteAbortsTheStreamAndNeverCommits) {
  for (const char* name : {"f.nii", "f.nii.gz"}) {
    SCOPED_TRACE(name);
    RecordingStream out;
    const NiftiHeader h = vptest::make_header(1, DType::f32, {100, 100, 100});
    EXPECT_THROW(voxpipe::write_nifti_stream(name, out.stream(), h, {}, failing_producer(3000000)),
                 std::runtime_error);
    EXPECT_EQ(out.commits, 0);
    EXPECT_GE(out.aborts, 1);
  }
  // A stream whose write fails (the upload failed) ends the write with its error.
  voxpipe::OutputStream failing{[](std::span<const std::byte>) { throw std::runtime_error("upload failed"); },
                                [] { FAIL() << "committed"; }, [] {}};
  const NiftiHeader h = vptest::make_header(1, DType::u8, {4});
  const Bytes data{1, 2, 3, 4};
  EXPECT_THROW(voxpipe::write_nifti_stream("x.nii", failing, h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(data))),
               std::runtime_error);
}

TEST(WriteNiftiStream, APairIsRefusedBeforeAnythingIsSent) {
  RecordingStream out;
  const NiftiHeader h = vptest::make_header(1, DType::u8, {4});
  const Bytes data{1, 2, 3, 4};
  try {
    voxpipe::write_nifti_stream("s3://b/p.hdr", out.stream(), h, {}, voxpipe::producer_from_bytes(vptest::as_bytes(data)));
    FAIL() << "no error";
  } catch (const voxpipe::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
  EXPECT_TRUE(out.bytes.empty());
  EXPECT_EQ(out.commits, 0);
}

}  // namespace
