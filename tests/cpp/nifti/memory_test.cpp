// open_nifti_bytes: the bytes of a .nii or .nii.gz file opened from memory give the image the file
// gives (header, extensions, warnings, affine) and the same voxels for every layout (plain,
// single gzip member, voxpipe's sized members, BGZF), selection and thread count; selections read
// only the stored bytes they need; damage gives the file's errors under the buffer's name; the
// buffer lives as long as the image or a reader needs it; names and seek indexes behave as for
// memory they should.
#include <atomic>
#include <random>

#include "core/file.hpp"
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::AxisRange;
using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::GzipLayout;
using voxpipe::NiftiHeader;
using voxpipe::NiftiImage;
using vptest::Bytes;

// The bytes of `file`, copied into a buffer the image owns, opened as `name`.
NiftiImage open_copy(const Bytes& file, const std::string& name) {
  auto owner = std::make_shared<const Bytes>(file);
  return voxpipe::open_nifti_bytes(std::as_bytes(std::span(*owner)), owner, name);
}

std::vector<std::int16_t> pattern_i16(std::size_t n) {
  std::vector<std::int16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int16_t>((i * 7919) % 60001 - 30000);
  return v;
}

std::vector<std::int16_t> random_i16(std::size_t n) {
  std::vector<std::int16_t> v(n);
  std::mt19937_64 rng(11);
  for (auto& x : v) x = static_cast<std::int16_t>(rng());
  return v;
}

// The error `f` throws; fails the test when it throws none.
template <class F>
voxpipe::Error error_of(F&& f) {
  auto err = vptest::catch_error(std::forward<F>(f));
  if (!err) {
    ADD_FAILURE() << "no error";
    return voxpipe::Error(ErrorCode::io, "", "", "none");
  }
  return *err;
}

// The same error, but for the name: code, field, message and offset.
void expect_same_error(const voxpipe::Error& memory, const voxpipe::Error& file,
                       const std::string& name) {
  EXPECT_EQ(memory.code(), file.code()) << memory.what() << " / " << file.what();
  EXPECT_EQ(memory.path(), name);
  EXPECT_EQ(memory.field(), file.field());
  EXPECT_EQ(memory.detail(), file.detail());
  EXPECT_EQ(memory.offset(), file.offset());
}

// Counts the stored bytes read through it.
class CountingInput final : public voxpipe::core::RandomAccessInput {
 public:
  explicit CountingInput(std::shared_ptr<const voxpipe::core::RandomAccessInput> inner)
      : inner_(std::move(inner)) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    const std::size_t n = inner_->read_at(offset, dst);
    read_ += n;
    return n;
  }
  std::uint64_t size() const noexcept override { return inner_->size(); }
  const std::string& path() const noexcept override { return inner_->path(); }
  std::uint64_t bytes_read() const { return read_; }
  void reset() { read_ = 0; }

 private:
  std::shared_ptr<const voxpipe::core::RandomAccessInput> inner_;
  mutable std::atomic<std::uint64_t> read_{0};
};

struct Layout {
  const char* name;
  GzipLayout gzip;
  bool random_access;  // a reader needs no index to read any selection
};
const Layout kLayouts[] = {{"m.nii", GzipLayout::members, true},
                           {"m.nii.gz", GzipLayout::single, false},
                           {"m.nii.gz", GzipLayout::members, true},
                           {"m.nii.gz", GzipLayout::bgzf, true}};

TEST(OpenNiftiBytes, OpensAsTheFileOpens) {
  for (const Layout& layout : kLayouts) {
    for (const int version : {1, 2}) {
      SCOPED_TRACE(std::string(layout.name) + " layout " + std::to_string(int(layout.gzip)) +
                   " v" + std::to_string(version));
      vptest::TempDir dir;
      NiftiHeader h = vptest::full_header(version, version == 2);
      h.vox_offset = 0;  // after the extensions
      const std::vector<voxpipe::NiftiExtension> exts{{6, {'a', 'b', 'c'}}, {4, Bytes(30, 7)}};
      const std::string path = vptest::write_image(dir, layout.name, h, pattern_i16(5 * 4 * 3 * 2),
                                                   exts, 1, layout.gzip);
      const NiftiImage file = voxpipe::open_nifti(path);
      // The name is a label: with or without a NIfTI extension, gzip is found by its magic.
      for (const std::string& name : {std::string(layout.name), std::string("<bytes>")}) {
        const NiftiImage memory = open_copy(vptest::read_file(path), name);
        EXPECT_EQ(memory.header_path, name);
        EXPECT_EQ(memory.data_path, name);
        EXPECT_TRUE(memory.data_input);
        EXPECT_FALSE(file.data_input);
        EXPECT_EQ(memory.header_compression, file.header_compression);
        EXPECT_EQ(memory.data_compression, file.data_compression);
        vptest::expect_same_header(memory.header, file.header);
        ASSERT_EQ(memory.extensions.size(), 2u);
        for (std::size_t i = 0; i < 2; ++i) {
          EXPECT_EQ(memory.extensions[i].code, file.extensions[i].code);
          EXPECT_EQ(memory.extensions[i].content, file.extensions[i].content);
        }
        EXPECT_EQ(memory.warnings, file.warnings);
        EXPECT_EQ(memory.shape, file.shape);
        EXPECT_EQ(memory.dtype, file.dtype);
        EXPECT_EQ(memory.data_offset, file.data_offset);
        EXPECT_EQ(memory.scaling.slope, file.scaling.slope);
        EXPECT_EQ(memory.scaling.inter, file.scaling.inter);
        EXPECT_EQ(memory.affine, file.affine);
        EXPECT_EQ(memory.data_file_size, file.data_file_size);
        EXPECT_EQ(voxpipe::NiftiReader(memory).random_access(), layout.random_access);
      }
    }
  }
}

TEST(OpenNiftiBytes, HeaderErrorsAndLimitsAreTheFiles) {
  vptest::TempDir dir;
  const std::string path =
      vptest::write_image(dir, "l.nii.gz", vptest::make_header(1, DType::i16, {10, 10, 10}),
                          pattern_i16(1000), {}, 1, GzipLayout::single);
  voxpipe::OpenOptions small;
  small.limits.max_voxels = 999;
  expect_same_error(error_of([&] {
                      auto owner = std::make_shared<const Bytes>(vptest::read_file(path));
                      voxpipe::open_nifti_bytes(std::as_bytes(std::span(*owner)), owner, "<l>", small);
                    }),
                    error_of([&] { voxpipe::open_nifti(path, small); }), "<l>");
  // A bad magic, in a plain and in a gzipped header.
  Bytes bad = vptest::gunzip(vptest::read_file(path));
  bad[344] = 'x';
  vptest::write_file(dir.file("bad.nii"), bad);
  vptest::write_file(dir.file("bad.nii.gz"), vptest::gzip_compress(bad));
  for (const char* name : {"bad.nii", "bad.nii.gz"})
    expect_same_error(error_of([&] { open_copy(vptest::read_file(dir.file(name)), "<b>"); }),
                      error_of([&] { voxpipe::open_nifti(dir.file(name)); }), "<b>");
  // Cut inside the header.
  const Bytes cut(bad.begin(), bad.begin() + 200);
  vptest::write_file(dir.file("cut.nii"), cut);
  expect_same_error(error_of([&] { open_copy(cut, "<c>"); }),
                    error_of([&] { voxpipe::open_nifti(dir.file("cut.nii")); }), "<c>");
}

TEST(OpenNiftiBytes, NamesSayWhatTheyCan) {
  vptest::TempDir dir;
  const std::string path =
      vptest::write_image(dir, "n.nii", vptest::make_header(1, DType::u8, {4, 4}), Bytes(16, 3));
  const Bytes plain = vptest::read_file(path);
  // A .gz name promises gzip, as for files.
  auto err = error_of([&] { open_copy(plain, "x.nii.gz"); });
  EXPECT_EQ(err.code(), ErrorCode::format);
  EXPECT_EQ(err.path(), "x.nii.gz");
  EXPECT_EQ(err.field(), "gzip magic");
  // Pairs are files only; bz2 and zstd are not read, as for files.
  for (const char* name : {"x.hdr", "x.IMG", "x.hdr.gz", "x.img.gz", "x.nii.bz2", "x.nii.zst"}) {
    err = error_of([&] { open_copy(plain, name); });
    EXPECT_EQ(err.code(), ErrorCode::unsupported) << name;
    EXPECT_EQ(err.path(), name);
  }
  // Empty bytes are an empty file.
  vptest::write_file(dir.file("e.nii"), Bytes{});
  expect_same_error(error_of([&] { open_copy(Bytes{}, "e"); }),
                    error_of([&] { voxpipe::open_nifti(dir.file("e.nii")); }), "e");
  // A .nii name over gzip bytes: the magic decides.
  const NiftiImage gz = open_copy(vptest::gzip_compress(plain), "n.nii");
  EXPECT_EQ(gz.data_compression, voxpipe::Compression::gzip);
  EXPECT_EQ(vptest::read_as<std::uint8_t>(gz, {}, {.type = DType::u8, .apply_scaling = false}),
            Bytes(16, 3));
}

TEST(ReadNiftiBytes, SameVoxelsAsTheFileForEverySelection) {
  const std::vector<std::int64_t> shape{13, 11, 6, 4};
  const std::vector<std::int16_t> values = random_i16(13 * 11 * 6 * 4);
  std::mt19937_64 rng(5);
  for (const Layout& layout : kLayouts) {
    for (const bool big : {false, true}) {
      SCOPED_TRACE(std::string(layout.name) + " layout " + std::to_string(int(layout.gzip)) +
                   (big ? " BE" : " LE"));
      vptest::TempDir dir;
      NiftiHeader h = vptest::make_header(1, DType::i16, shape, big);
      h.scl_slope = 0.25;
      h.scl_inter = 7;
      const std::string path = vptest::write_image(dir, layout.name, h, values, {}, 1, layout.gzip);
      const NiftiImage file = voxpipe::open_nifti(path);
      const NiftiImage memory = open_copy(vptest::read_file(path), "<m>");
      for (const unsigned threads : {1u, 2u}) {
        EXPECT_EQ(vptest::read_as<std::int16_t>(memory, {}, {.type = DType::i16, .apply_scaling = false}, threads),
                  values);
        EXPECT_EQ(vptest::read_as<double>(memory, {}, {.type = DType::f64}, threads),
                  vptest::read_as<double>(file, {}, {.type = DType::f64}, threads));
      }
      // Selections through one reader each, as a proxy keeps one: ascending, then at random.
      voxpipe::NiftiReader from_memory(memory), from_file(file);
      for (int k = 0; k < 40; ++k) {
        std::vector<AxisRange> sel;
        for (std::int64_t d : shape) {
          const std::int64_t start = static_cast<std::int64_t>(rng() % d);
          const std::int64_t step = (rng() % 2 ? 1 : -1) * static_cast<std::int64_t>(1 + rng() % 2);
          const std::int64_t room = step > 0 ? (d - 1 - start) / step : start / -step;
          sel.push_back({start, step, 1 + static_cast<std::int64_t>(rng() % (room + 1))});
        }
        if (k < 4) sel = {{0, 1, 13}, {0, 1, 11}, {0, 1, 6}, {k, 1, 1}};  // volume k
        std::size_t n = 1;
        for (const auto& a : sel) n *= static_cast<std::size_t>(a.count);
        std::vector<float> a(n), b(n);
        from_memory.read(sel, {.type = DType::f32}, std::as_writable_bytes(std::span(a)));
        from_file.read(sel, {.type = DType::f32}, std::as_writable_bytes(std::span(b)));
        ASSERT_EQ(a, b) << k;
        const auto want = vptest::naive_select(values, shape, sel);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(a[i], static_cast<float>(vptest::nib_scale(want[i], 0.25, 7))) << k << " " << i;
      }
    }
  }
}

TEST(ReadNiftiBytes, LargeImagesThroughEveryEngine) {
  // 3 MiB of incompressible int16: the direct parallel copy (.nii), the member-parallel inflate,
  // and, for one member of more than 2 MiB compressed, the speculative parallel engine on a
  // whole read and the sequential inflate on a later volume.
  const std::vector<std::int64_t> shape{512, 512, 2, 3};
  const std::vector<std::int16_t> values = random_i16(512 * 512 * 2 * 3);
  for (const Layout& layout : kLayouts) {
    if (layout.gzip == GzipLayout::bgzf) continue;
    SCOPED_TRACE(std::string(layout.name) + " layout " + std::to_string(int(layout.gzip)));
    vptest::TempDir dir;
    const std::string path = vptest::write_image(
        dir, layout.name, vptest::make_header(1, DType::i16, shape), values, {}, 1, layout.gzip);
    const NiftiImage memory = open_copy(vptest::read_file(path), "<big>");
    ASSERT_EQ(vptest::read_as<std::int16_t>(memory, {}, {.type = DType::i16, .apply_scaling = false}, 2),
              values);
    const std::vector<AxisRange> last{{0, 1, 512}, {0, 1, 512}, {0, 1, 2}, {2, 1, 1}};
    ASSERT_EQ(vptest::read_as<std::int16_t>(memory, last, {.type = DType::i16, .apply_scaling = false}, 2),
              vptest::naive_select(values, shape, last));
  }
}

TEST(ReadNiftiBytes, SelectionsReadOnlyTheStoredBytesTheyNeed) {
  // 4 volumes of 1 MiB: one volume of the sized-member layout is two or three members.
  const std::vector<std::int64_t> shape{512, 512, 2, 4};
  const std::vector<std::int16_t> values = random_i16(512 * 512 * 2 * 4);
  const std::uint64_t volume_bytes = 512 * 512 * 2 * 2;
  const std::vector<AxisRange> volume2{{0, 1, 512}, {0, 1, 512}, {0, 1, 2}, {2, 1, 1}};
  for (const char* name : {"v.nii", "v.nii.gz"}) {
    SCOPED_TRACE(name);
    vptest::TempDir dir;
    const std::string path =
        vptest::write_image(dir, name, vptest::make_header(1, DType::i16, shape), values);
    NiftiImage memory = open_copy(vptest::read_file(path), "<v>");
    auto counting = std::make_shared<CountingInput>(memory.data_input);
    memory.data_input = counting;
    voxpipe::NiftiReader reader(memory);
    counting->reset();  // the member table was read when the reader opened
    std::vector<std::int16_t> out(volume_bytes / 2);
    reader.read(volume2, {.type = DType::i16, .apply_scaling = false},
                std::as_writable_bytes(std::span(out)));
    ASSERT_EQ(out, vptest::naive_select(values, shape, volume2));
    if (std::string(name) == "v.nii") {
      EXPECT_EQ(counting->bytes_read(), volume_bytes);
    } else {  // at most three 1 MiB members of incompressible data, of the eight and a bit
      EXPECT_GT(counting->bytes_read(), volume_bytes);
      EXPECT_LT(counting->bytes_read(), 3 * volume_bytes + 3 * 1024);
    }
  }
}

TEST(ReadNiftiBytes, TruncatedBytesAreTruncatedAsTheFileIs) {
  const std::vector<std::int64_t> shape{128, 128, 16};
  const std::vector<std::int16_t> values = random_i16(128 * 128 * 16);
  for (const Layout& layout : kLayouts) {
    vptest::TempDir dir;
    const std::string path = vptest::write_image(
        dir, layout.name, vptest::make_header(1, DType::i16, shape), values, {}, 1, layout.gzip);
    const Bytes whole = vptest::read_file(path);
    for (const std::size_t cut : {whole.size() - 1, whole.size() - 20, whole.size() / 2, std::size_t{400}}) {
      SCOPED_TRACE(std::string(layout.name) + " layout " + std::to_string(int(layout.gzip)) +
                   " cut at " + std::to_string(cut));
      const Bytes part(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut));
      vptest::write_file(path, part);
      if (const auto failed = vptest::catch_error([&] { voxpipe::open_nifti(path); })) {
        expect_same_error(error_of([&] { open_copy(part, "<cut>"); }), *failed, "<cut>");
        continue;
      }
      const NiftiImage file = voxpipe::open_nifti(path);
      const NiftiImage memory = open_copy(part, "<cut>");
      EXPECT_EQ(memory.data_file_size, cut);
      if (layout.gzip == GzipLayout::members && std::string(layout.name) == "m.nii.gz") {
        // The member table finds the cut when a reader opens.
        const auto err = error_of([&] { voxpipe::NiftiReader r(memory); });
        EXPECT_EQ(err.code(), ErrorCode::truncated);
        expect_same_error(err, error_of([&] { voxpipe::NiftiReader r(file); }), "<cut>");
        continue;
      }
      if (std::string(layout.name) == "m.nii") {
        expect_same_error(error_of([&] { voxpipe::NiftiReader(memory).check_data_size(); }),
                          error_of([&] { voxpipe::NiftiReader(file).check_data_size(); }), "<cut>");
        expect_same_error(error_of([&] { voxpipe::check_data_size(memory); }),
                          error_of([&] { voxpipe::check_data_size(file); }), "<cut>");
      }
      for (const unsigned threads : {1u, 2u}) {
        const auto err = error_of([&] {
          vptest::read_as<std::int16_t>(memory, {}, {.type = DType::i16, .apply_scaling = false}, threads);
        });
        EXPECT_EQ(err.code(), ErrorCode::truncated) << err.what();
        expect_same_error(err, error_of([&] {
                            vptest::read_as<std::int16_t>(file, {}, {.type = DType::i16, .apply_scaling = false}, threads);
                          }),
                          "<cut>");
      }
    }
  }
}

TEST(ReadNiftiBytes, CorruptGzipIsCorruptAsTheFileIs) {
  const std::vector<std::int16_t> values = random_i16(64 * 64 * 8);
  for (const Layout& layout : kLayouts) {
    if (layout.gzip == GzipLayout::members && std::string(layout.name) == "m.nii") continue;
    SCOPED_TRACE("layout " + std::to_string(int(layout.gzip)));
    vptest::TempDir dir;
    const std::string path = vptest::write_image(
        dir, layout.name, vptest::make_header(1, DType::i16, {64, 64, 8}), values, {}, 1, layout.gzip);
    Bytes gz = vptest::read_file(path);
    // The CRC32 of the last member with data (BGZF ends with an empty one).
    gz[gz.size() - (layout.gzip == GzipLayout::bgzf ? 28 + 8 : 8)] ^= 0xff;
    vptest::write_file(path, gz);
    const NiftiImage memory = open_copy(gz, "<crc>");
    for (const unsigned threads : {1u, 2u}) {
      const auto err = error_of([&] {
        vptest::read_as<std::int16_t>(memory, {}, {.type = DType::i16, .apply_scaling = false}, threads);
      });
      EXPECT_EQ(err.code(), ErrorCode::corrupt) << err.what();
      expect_same_error(err, error_of([&] {
                          vptest::read_as<std::int16_t>(voxpipe::open_nifti(path), {},
                                                        {.type = DType::i16, .apply_scaling = false}, threads);
                        }),
                        "<crc>");
    }
  }
}

TEST(ReadNiftiBytes, TheBufferLivesAsLongAsTheImageOrAReader) {
  vptest::TempDir dir;
  const std::vector<std::int16_t> values = pattern_i16(6 * 5 * 4);
  for (const char* name : {"k.nii", "k.nii.gz"}) {
    const std::string path =
        vptest::write_image(dir, name, vptest::make_header(1, DType::i16, {6, 5, 4}), values);
    auto owner = std::make_shared<const Bytes>(vptest::read_file(path));
    const std::weak_ptr<const Bytes> watch = owner;
    auto image = std::make_unique<NiftiImage>(
        voxpipe::open_nifti_bytes(std::as_bytes(std::span(*owner)), owner, name));
    owner.reset();
    const NiftiImage copy = *image;
    auto reader = std::make_unique<voxpipe::NiftiReader>(*image);
    image.reset();
    EXPECT_FALSE(watch.expired());
    std::vector<std::int16_t> out(values.size());
    reader->read({}, {.type = DType::i16, .apply_scaling = false}, std::as_writable_bytes(std::span(out)));
    EXPECT_EQ(out, values);
    reader.reset();
    EXPECT_FALSE(watch.expired());  // `copy` still holds it
    EXPECT_EQ(vptest::read_as<std::int16_t>(copy, {}, {.type = DType::i16, .apply_scaling = false}), values);
  }
}

TEST(ReadNiftiBytes, IndexFilesBelongToFiles) {
  vptest::TempDir dir;
  const std::vector<std::int64_t> shape{32, 32, 4, 3};
  const std::vector<std::int16_t> values = pattern_i16(32 * 32 * 4 * 3);
  const std::string path = vptest::write_image(dir, "i.nii.gz", vptest::make_header(1, DType::i16, shape),
                                               values, {}, 1, GzipLayout::single);
  voxpipe::build_nifti_gzip_index(path);  // the sidecar i.nii.gz.gzidx
  ASSERT_TRUE(voxpipe::NiftiReader(voxpipe::open_nifti(path)).random_access());
  // Named as the file, the bytes in memory still have no index: the sidecar's key is the file's.
  const NiftiImage memory = open_copy(vptest::read_file(path), path);
  EXPECT_FALSE(voxpipe::NiftiReader(memory).random_access());
  voxpipe::DataSourceOptions explicit_index;
  explicit_index.index = voxpipe::DataSourceOptions::Index::path;
  explicit_index.index_path = path + ".gzidx";
  const auto err = error_of([&] { voxpipe::NiftiReader r(memory, explicit_index); });
  EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(err.path(), path);
  voxpipe::DataSourceOptions none;
  none.index = voxpipe::DataSourceOptions::Index::none;
  voxpipe::NiftiReader reader(memory, none);
  std::vector<std::int16_t> out(values.size());
  reader.read({}, {.type = DType::i16, .apply_scaling = false}, std::as_writable_bytes(std::span(out)));
  EXPECT_EQ(out, values);
}

}  // namespace
