// NIfTI objects read by byte ranges (open_nifti_remote over a RemoteInput): the requests opening
// and reading make (the header in one request; one volume of a .nii in one; a selection's rows
// announced and coalesced into one call; a .nii.gz inflated front to back in growing requests, or
// prefetched whole in parts for the parallel inflater, or one sized member; one volume, or a run
// of volumes, through a seek index in one request after the index's tail check, on one thread as
// on several), the voxels equal to those read from the same bytes in memory, an index built over
// the object equal to the file's, a stale index refused, and the fetcher's failures named by the
// object's URL.
#include <random>

#include "core/memory_input.hpp"
#include "core/recording_fetcher.hpp"
#include "gz/gzip_source.hpp"
#include "gz/seek_index.hpp"
#include "nifti/nifti_support.hpp"
#include "voxpipe/remote.hpp"

namespace {

using voxpipe::AxisRange;
using voxpipe::DType;
using voxpipe::ErrorCode;
using voxpipe::NiftiImage;
using voxpipe::NiftiReader;
using voxpipe::RemoteInputOptions;
using vptest::Bytes;
using vptest::Call;
using vptest::Range;
using vptest::RecordingFetcher;

constexpr std::int64_t kX = 64, kY = 64, kZ = 16;
constexpr std::uint64_t kVolume = kX * kY * kZ * 2;  // bytes of one int16 volume: 128 KiB
constexpr std::uint64_t kFirstRequest = RemoteInputOptions{}.min_request;

struct Image {
  std::vector<std::int64_t> shape;
  std::vector<std::int16_t> values;
};

Image random_image(std::int64_t volumes, std::uint64_t seed) {
  Image img{{kX, kY, kZ, volumes}, std::vector<std::int16_t>(static_cast<std::size_t>(kX * kY * kZ * volumes))};
  std::mt19937_64 rng(seed);
  for (auto& v : img.values) v = static_cast<std::int16_t>(rng());
  return img;
}

// The file write_nifti makes of `img` under `name` (.nii, .nii.gz in a layout, .hdr: the .hdr).
Bytes written(const vptest::TempDir& dir, const std::string& name, const Image& img,
              voxpipe::GzipLayout layout = voxpipe::GzipLayout::members,
              const std::vector<voxpipe::NiftiExtension>& extensions = {}) {
  return vptest::read_file(vptest::write_image(dir, name, vptest::make_header(1, DType::i16, img.shape),
                                               img.values, extensions, 1, layout));
}

std::vector<std::byte> object_of(const Bytes& b) {
  const auto s = std::as_bytes(std::span(b));
  return {s.begin(), s.end()};
}

std::shared_ptr<const voxpipe::RemoteInput> remote(const RecordingFetcher& f,
                                                   const RemoteInputOptions& options = {},
                                                   std::size_t initial = 0) {
  return std::make_shared<const voxpipe::RemoteInput>(
      f.name(), f.size(), f.fetcher(), initial ? f.initial(initial) : voxpipe::FetchedBytes{}, options);
}

std::vector<AxisRange> volume(std::int64_t t) { return {{0, 1, kX}, {0, 1, kY}, {0, 1, kZ}, {t, 1, 1}}; }
std::vector<AxisRange> everything(const Image& img) {
  return {{0, 1, kX}, {0, 1, kY}, {0, 1, kZ}, {0, 1, img.shape[3]}};
}

std::size_t count_of(const std::vector<AxisRange>& sel) {
  std::size_t n = 1;
  for (const AxisRange& a : sel) n *= static_cast<std::size_t>(a.count);
  return n;
}

const voxpipe::OutputSpec kInt16{.type = DType::i16, .apply_scaling = false};

std::vector<std::int16_t> read(NiftiReader& reader, const std::vector<AxisRange>& sel,
                               unsigned threads = 2) {
  std::vector<std::int16_t> out(count_of(sel));
  reader.read(sel, kInt16, std::as_writable_bytes(std::span(out)), voxpipe::ReadOptions{threads});
  return out;
}

// read_nifti_data over the same bytes opened from memory.
std::vector<std::int16_t> read_from_memory(const Bytes& file, const std::string& name,
                                           const std::vector<AxisRange>& sel) {
  auto owner = std::make_shared<const Bytes>(file);
  const NiftiImage img = voxpipe::open_nifti_bytes(std::as_bytes(std::span(*owner)), owner, name);
  return vptest::read_as<std::int16_t>(img, sel, kInt16, 2);
}

// Checks the voxels a reader of the object returns for `sel` against the same bytes read from
// memory and against the values written.
void expect_voxels(NiftiReader& reader, const Bytes& file, const Image& img,
                   const std::vector<AxisRange>& sel, unsigned threads = 2) {
  const std::vector<std::int16_t> got = read(reader, sel, threads);
  EXPECT_EQ(got, read_from_memory(file, "memory.nii" + std::string(file[0] == 0x1f ? ".gz" : ""), sel));
  EXPECT_EQ(got, vptest::naive_select(img.values, img.shape, sel));
}

// The parts of [begin, end) that no range in `held` covers, each split into `part`-sized pieces:
// what a prefetch of [begin, end) asks for when `held` is what was fetched before.
std::vector<Range> missing_parts(std::uint64_t begin, std::uint64_t end, std::vector<Range> held,
                                 std::uint64_t part) {
  std::sort(held.begin(), held.end());
  std::vector<Range> out;
  auto add = [&](std::uint64_t lo, std::uint64_t hi) {
    for (std::uint64_t at = lo; at < hi; at += part) out.emplace_back(at, std::min(part, hi - at));
  };
  std::uint64_t pos = begin;
  for (const Range& h : held) {
    if (h.first + h.second <= pos) continue;
    if (h.first >= end) break;
    if (h.first > pos) add(pos, h.first);
    pos = std::max(pos, h.first + h.second);
  }
  if (pos < end) add(pos, end);
  return out;
}

TEST(NiftiRemote, HeaderAndExtensionsOfANiiAreOneRequest) {
  vptest::TempDir dir;
  const Image img = random_image(5, 1);
  const std::vector<voxpipe::NiftiExtension> ext{{6, vptest::text_bytes(20000, 2)}};
  const Bytes file = written(dir, "e.nii", img, voxpipe::GzipLayout::members, ext);
  RecordingFetcher f(object_of(file), "s3://bucket/sub-01/func/sub-01_bold.nii");
  const NiftiImage got = voxpipe::open_nifti_remote(remote(f));
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}}));

  const NiftiImage local = voxpipe::open_nifti(dir.file("e.nii"));
  vptest::expect_same_header(got.header, local.header);
  ASSERT_EQ(got.extensions.size(), 1u);
  EXPECT_EQ(got.extensions[0].code, 6);
  EXPECT_EQ(got.extensions[0].content, local.extensions[0].content);
  EXPECT_EQ(got.shape, img.shape);
  EXPECT_EQ(got.data_offset, local.data_offset);
  EXPECT_EQ(got.affine, local.affine);
  EXPECT_EQ(got.header_path, f.name());
  EXPECT_EQ(got.data_path, f.name());
  EXPECT_EQ(got.data_file_size, file.size());
  EXPECT_EQ(got.data_compression, voxpipe::Compression::none);

  // With the first bytes already in hand (the response that told the size), none.
  RecordingFetcher g(object_of(file), f.name());
  voxpipe::open_nifti_remote(remote(g, {}, kFirstRequest));
  EXPECT_TRUE(g.calls().empty());
}

TEST(NiftiRemote, OneVolumeOfANiiIsOneRequest) {
  vptest::TempDir dir;
  const Image img = random_image(5, 3);
  const Bytes file = written(dir, "v.nii", img);
  RecordingFetcher f(object_of(file), "s3://bucket/v.nii");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(f));
  f.clear();
  NiftiReader reader(opened);
  EXPECT_TRUE(reader.random_access());
  EXPECT_TRUE(f.calls().empty());
  expect_voxels(reader, file, img, volume(3));
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{opened.data_offset + 3 * kVolume, kVolume}}}));
}

TEST(NiftiRemote, RowsOfASelectionAreAnnouncedAndCoalesced) {
  vptest::TempDir dir;
  const Image img = random_image(5, 4);
  const Bytes file = written(dir, "s.nii", img);
  const std::vector<AxisRange> first_and_last{{0, 1, kX}, {0, 1, kY}, {0, 1, kZ}, {0, 4, 2}};
  {
    // 384 KiB between the volumes: one range with the default coalesce gap (1 MiB).
    RecordingFetcher f(object_of(file), "https://example.org/s.nii");
    NiftiReader reader(voxpipe::open_nifti_remote(remote(f)));
    ASSERT_EQ(reader.image().data_offset, 352u);
    f.clear();
    expect_voxels(reader, file, img, first_and_last);
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{kFirstRequest, 352 + 5 * kVolume - kFirstRequest}}}));
  }
  {
    // Two ranges in one call when the gap is wider than coalesce_gap.
    RemoteInputOptions o;
    o.coalesce_gap = 100 << 10;
    RecordingFetcher f(object_of(file), "https://example.org/s.nii");
    NiftiReader reader(voxpipe::open_nifti_remote(remote(f, o)));
    f.clear();
    expect_voxels(reader, file, img, first_and_last);
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{kFirstRequest, 352 + kVolume - kFirstRequest},
                                             {352 + 4 * kVolume, kVolume}}}));
  }
  {
    // A slab of short rows 128 bytes apart: one range from the first row to the last.
    RecordingFetcher f(object_of(file), "https://example.org/s.nii");
    NiftiReader reader(voxpipe::open_nifti_remote(remote(f)));
    f.clear();
    const std::vector<AxisRange> slab{{10, 1, 10}, {0, 1, kY}, {5, 1, 1}, {2, 1, 1}};
    expect_voxels(reader, file, img, slab);
    const std::uint64_t first = 352 + 2 * (10 + 5 * kX * kY + 2 * kX * kY * kZ);
    const std::uint64_t last_end = 352 + 2 * (19 + 63 * kX + 5 * kX * kY + 2 * kX * kY * kZ) + 2;
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{first, last_end - first}}}));
  }
}

TEST(NiftiRemote, WholeNiiIsTheBytesNotHeldInPartSizeParts) {
  vptest::TempDir dir;
  const Image img = random_image(5, 5);
  const Bytes file = written(dir, "w.nii", img);
  RemoteInputOptions o;
  o.part_size = 128 << 10;
  RecordingFetcher f(object_of(file), "s3://bucket/w.nii");
  NiftiReader reader(voxpipe::open_nifti_remote(remote(f, o)));
  f.clear();
  expect_voxels(reader, file, img, everything(img), 4);
  EXPECT_EQ(f.calls(), (std::vector<Call>{missing_parts(0, file.size(), {{0, kFirstRequest}}, o.part_size)}));
}

TEST(NiftiRemote, NiiGzHeaderIsOneRequestAndAVolumeInflatesFrontToBackInGrowingRequests) {
  vptest::TempDir dir;
  const Image img = random_image(8, 6);
  const Bytes file = vptest::gzip_compress(written(dir, "g.nii", img), 6);  // one zlib member
  RecordingFetcher f(object_of(file), "s3://bucket/g.nii.gz");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(f));
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}}));
  EXPECT_EQ(opened.data_compression, voxpipe::Compression::gzip);
  f.clear();
  voxpipe::DataSourceOptions none;
  none.index = voxpipe::DataSourceOptions::Index::none;
  NiftiReader reader(opened, none);
  EXPECT_TRUE(f.calls().empty());
  expect_voxels(reader, file, img, volume(5));
  // Each request starts where the last ended and is twice as long, up to part_size and the end.
  const std::vector<Call> calls = f.calls();
  ASSERT_FALSE(calls.empty());
  Range last{0, kFirstRequest};
  for (const Call& c : calls) {
    ASSERT_EQ(c.size(), 1u);
    const std::uint64_t at = last.first + last.second;
    EXPECT_EQ(c[0], Range(at, std::min({2 * last.second, RemoteInputOptions{}.part_size, file.size() - at})));
    last = c[0];
  }
  // Volume 5 of 8 needs most of the stream, not all of it.
  EXPECT_GT(last.first + last.second, file.size() / 2);
}

TEST(NiftiRemote, WholeNiiGzIsFetchedAheadInPartsForTheParallelInflater) {
  vptest::TempDir dir;
  const Image img = random_image(20, 7);  // 2.5 MiB of random voxels: over 2 MiB compressed
  const Bytes file = vptest::gzip_compress(written(dir, "p.nii", img), 1);
  ASSERT_GE(file.size(), 2u << 20);
  RemoteInputOptions o;
  o.part_size = 1 << 20;
  RecordingFetcher f(object_of(file), "gs://bucket/p.nii.gz");
  voxpipe::DataSourceOptions none;
  none.index = voxpipe::DataSourceOptions::Index::none;
  NiftiReader reader(voxpipe::open_nifti_remote(remote(f, o)), none);
  f.clear();
  expect_voxels(reader, file, img, everything(img), 2);
  EXPECT_EQ(f.calls(), (std::vector<Call>{missing_parts(0, file.size(), {{0, kFirstRequest}}, o.part_size)}));
}

TEST(NiftiRemote, VolumeOfASizedMemberFileFetchesItsMemberOnly) {
  vptest::TempDir dir;
  const Image img = random_image(24, 8);  // 3 MiB of random voxels in 1 MiB members
  const Bytes file = written(dir, "m.nii.gz", img, voxpipe::GzipLayout::members);
  auto owner = std::make_shared<const Bytes>(file);
  const voxpipe::gz::GzipSource table(std::make_shared<const voxpipe::core::MemoryInput>(
      std::as_bytes(std::span(*owner)), owner, "m.nii.gz"));
  ASSERT_TRUE(table.members());
  const std::vector<voxpipe::gz::Member>& members = *table.members();
  ASSERT_GE(members.size(), 3u);

  RecordingFetcher f(object_of(file), "s3://bucket/m.nii.gz");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(f));
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}}));
  NiftiReader reader(opened);
  EXPECT_TRUE(reader.random_access());
  // Reading the member table: at most one request per member.
  EXPECT_LE(f.calls().size(), 1 + members.size());
  const std::vector<Range> held = f.ranges();
  f.clear();

  const std::uint64_t begin = opened.data_offset + 20 * kVolume;
  const voxpipe::gz::Member* m = nullptr;
  for (const auto& x : members)
    if (x.uncompressed_offset <= begin && begin < x.uncompressed_offset + x.uncompressed_size) m = &x;
  ASSERT_NE(m, nullptr);
  ASSERT_LE(begin + kVolume, m->uncompressed_offset + m->uncompressed_size) << "the volume spans two members";
  expect_voxels(reader, file, img, volume(20));
  EXPECT_EQ(f.calls(), (std::vector<Call>{missing_parts(m->offset, m->offset + m->size, held,
                                                        RemoteInputOptions{}.part_size)}));
}

// A 4D .nii.gz in one zlib member (as nibabel and Python's gzip write it), 1 MiB of random voxels.
struct IndexedObject {
  vptest::TempDir dir;
  Image img = random_image(8, 9);
  Bytes file = vptest::gzip_compress(written(dir, "i.nii", img), 6);
  std::string index = dir.file("remote.gzidx");
};

TEST(NiftiRemote, IndexBuiltOverAnObjectEqualsTheFilesIndex) {
  IndexedObject o;
  RecordingFetcher f(object_of(o.file), "s3://bucket/i.nii.gz");
  voxpipe::GzipIndexOptions options;
  options.output = o.index;
  const voxpipe::GzipIndexSummary got =
      voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(f)), options);
  vptest::write_file(o.dir.file("i.nii.gz"), o.file);
  options.output = o.dir.file("local.gzidx");
  const voxpipe::GzipIndexSummary want = voxpipe::build_nifti_gzip_index(o.dir.file("i.nii.gz"), options);
  EXPECT_EQ(got.index_path, o.index);
  EXPECT_EQ(got.compressed_size, want.compressed_size);
  EXPECT_EQ(got.uncompressed_size, want.uncompressed_size);
  EXPECT_EQ(got.points, want.points);
  EXPECT_GE(got.points, 8u);  // the data start and every volume
  const voxpipe::gz::SeekIndex a = voxpipe::gz::read_gzidx_file(o.index);
  const voxpipe::gz::SeekIndex b = voxpipe::gz::read_gzidx_file(options.output);
  ASSERT_EQ(a.points.size(), b.points.size());
  for (std::size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_EQ(a.points[i].compressed_bit, b.points[i].compressed_bit) << i;
    EXPECT_EQ(a.points[i].uncompressed, b.points[i].uncompressed) << i;
  }
  // The index is keyed by the object's size and tail.
  std::optional<voxpipe::gz::IndexKey> key;
  voxpipe::gz::read_gzidx_file(o.index, &key);
  ASSERT_TRUE(key);
  EXPECT_EQ(key->size, o.file.size());
  EXPECT_EQ(key->mtime_ns, 0);
}

TEST(NiftiRemote, OneVolumeThroughASeekIndexIsOneRequestAfterTheTailCheck) {
  IndexedObject o;
  {
    RecordingFetcher builder(object_of(o.file), "s3://bucket/i.nii.gz");
    voxpipe::GzipIndexOptions options;
    options.output = o.index;
    voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(builder)), options);
  }
  const voxpipe::gz::SeekIndex index = voxpipe::gz::read_gzidx_file(o.index);
  RecordingFetcher f(object_of(o.file), "s3://bucket/i.nii.gz");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(f));
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}}));
  f.clear();
  voxpipe::DataSourceOptions with_index;
  with_index.index = voxpipe::DataSourceOptions::Index::path;
  with_index.index_path = o.index;
  NiftiReader reader(opened, with_index);
  EXPECT_TRUE(reader.random_access());
  // The index is checked against the object's size and last 64 KiB.
  const std::uint64_t tail = o.file.size() - (64 << 10);
  EXPECT_EQ(f.calls(), (std::vector<Call>{{{tail, 64 << 10}}}));
  f.clear();

  expect_voxels(reader, o.file, o.img, volume(3));
  const std::vector<Call> calls = f.calls();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].size(), 1u);
  // From the last point at or before the volume's start to past the first point at or after its
  // end (the decoder reads its input 64 KiB at a time).
  const std::uint64_t begin = opened.data_offset + 3 * kVolume, end = begin + kVolume;
  const voxpipe::gz::SeekPoint* from = nullptr;
  const voxpipe::gz::SeekPoint* stop = nullptr;
  for (const auto& p : index.points) {
    if (p.uncompressed <= begin) from = &p;
    if (!stop && p.uncompressed >= end) stop = &p;
  }
  ASSERT_TRUE(from && stop);
  EXPECT_EQ(calls[0][0].first, from->compressed_bit / 8);
  const std::uint64_t fetched_end = calls[0][0].first + calls[0][0].second;
  EXPECT_GE(fetched_end, (stop->compressed_bit + 7) / 8);
  EXPECT_LE(fetched_end, std::min<std::uint64_t>(tail, stop->compressed_bit / 8 + (68 << 10)));

  // Every other volume too, each in at most one request.
  for (std::int64_t t = 0; t < 8; ++t) {
    f.clear();
    expect_voxels(reader, o.file, o.img, volume(t));
    EXPECT_LE(f.calls().size(), 1u) << "volume " << t;
  }
}

TEST(NiftiRemote, RunOfVolumesThroughASeekIndexIsOneRequestAfterTheTailCheck) {
  vptest::TempDir dir;
  const Image img = random_image(16, 16);  // 2 MiB of random voxels in one zlib member
  const Bytes file = vptest::gzip_compress(written(dir, "r.nii", img), 1);
  const std::string index_path = dir.file("r.gzidx");
  {
    RecordingFetcher builder(object_of(file), "s3://bucket/r.nii.gz");
    voxpipe::GzipIndexOptions options;
    options.output = index_path;
    voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(builder)), options);
  }
  const voxpipe::gz::SeekIndex index = voxpipe::gz::read_gzidx_file(index_path);
  voxpipe::DataSourceOptions with_index;
  with_index.index = voxpipe::DataSourceOptions::Index::path;
  with_index.index_path = index_path;
  const std::uint64_t tail = file.size() - (64 << 10);
  // Volumes 1 to 15, one row of the selection: one read from the point at or before volume 1 to
  // the end of the stream, on one thread (a DataLoader worker's) as on several.
  const std::vector<AxisRange> run{{0, 1, kX}, {0, 1, kY}, {0, 1, kZ}, {1, 1, 15}};
  for (unsigned threads : {1u, 2u}) {
    RecordingFetcher f(object_of(file), "s3://bucket/r.nii.gz");
    NiftiReader reader(voxpipe::open_nifti_remote(remote(f)), with_index);
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}, {{tail, 64 << 10}}}));
    f.clear();
    expect_voxels(reader, file, img, run, threads);
    // From the point inflate_range starts at (here the member's first, close enough to check
    // the member), less the bytes the first request holds.
    const std::uint64_t begin = reader.image().data_offset + kVolume;
    const std::uint64_t end = reader.image().data_offset + 16 * kVolume;
    const std::uint64_t start =
        index.points[voxpipe::gz::start_point(index, begin, end, "r")].compressed_bit / 8;
    const std::uint64_t from = std::max<std::uint64_t>(start, kFirstRequest);
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{from, tail - from}}})) << threads << " threads";
  }
}

TEST(NiftiRemote, IndexOfOtherBytesOfTheSameSizeIsStale) {
  vptest::TempDir dir;
  // Stored (level 0) members of two images of the same shape: the same size, other bytes.
  const Bytes a = vptest::gzip_compress(written(dir, "a.nii", random_image(4, 10)), 0);
  const Bytes b = vptest::gzip_compress(written(dir, "b.nii", random_image(4, 11)), 0);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_NE(a, b);
  const std::string index = dir.file("a.gzidx");
  RecordingFetcher fa(object_of(a), "s3://bucket/x.nii.gz");
  voxpipe::GzipIndexOptions options;
  options.output = index;
  voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(fa)), options);

  RecordingFetcher fb(object_of(b), "s3://bucket/x.nii.gz");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(fb));
  voxpipe::DataSourceOptions with_index;
  with_index.index = voxpipe::DataSourceOptions::Index::path;
  with_index.index_path = index;
  auto err = vptest::catch_error([&] { NiftiReader r(opened, with_index); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(err->what()).find("stale"), std::string::npos) << err->what();
  EXPECT_NE(std::string(err->what()).find(fb.name()), std::string::npos) << err->what();
  // Still good for the bytes it was built for.
  NiftiReader ok(voxpipe::open_nifti_remote(remote(fa)), with_index);
  EXPECT_TRUE(ok.random_access());
}

TEST(NiftiRemote, BuildingAnIndexNeedsGzipDataAndAnOutput) {
  vptest::TempDir dir;
  const Image img = random_image(2, 12);
  RecordingFetcher plain(object_of(written(dir, "n.nii", img)), "s3://bucket/n.nii");
  voxpipe::GzipIndexOptions options;
  options.output = dir.file("n.gzidx");
  EXPECT_VP_ERROR(voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(plain)), options),
                  ErrorCode::invalid_argument);
  RecordingFetcher gz(object_of(vptest::gzip_compress(written(dir, "z.nii", img))), "s3://bucket/z.nii.gz");
  EXPECT_VP_ERROR(voxpipe::build_nifti_gzip_index(voxpipe::open_nifti_remote(remote(gz)), {}),
                  ErrorCode::invalid_argument);
}

TEST(NiftiRemote, ObjectWithoutANiftiNameIsKnownByItsMagicInTheSameRequest) {
  vptest::TempDir dir;
  const Image img = random_image(3, 13);
  const Bytes nii = written(dir, "u.nii", img);
  for (const Bytes& file : {nii, vptest::gzip_compress(nii, 6)}) {
    RecordingFetcher f(object_of(file), "https://example.org/download?id=7&sig=abc.nii");
    const NiftiImage opened = voxpipe::open_nifti_remote(remote(f));
    EXPECT_EQ(opened.data_compression,
              file[0] == 0x1f ? voxpipe::Compression::gzip : voxpipe::Compression::none);
    EXPECT_EQ(f.calls(), (std::vector<Call>{{{0, kFirstRequest}}}));
    NiftiReader reader(opened);
    expect_voxels(reader, file, img, volume(1));
  }
}

TEST(NiftiRemote, PairReadsTheHeaderObjectAndTheImageObject) {
  vptest::TempDir dir;
  const Image img = random_image(4, 14);
  const Bytes hdr = written(dir, "p.hdr", img);
  const Bytes data = vptest::read_file(dir.file("p.img"));
  RecordingFetcher fh(object_of(hdr), "s3://bucket/p.hdr");
  RecordingFetcher fi(object_of(data), "s3://bucket/p.img");
  const NiftiImage opened = voxpipe::open_nifti_remote(remote(fh), remote(fi));
  EXPECT_EQ(fh.calls(), (std::vector<Call>{{{0, hdr.size()}}}));
  EXPECT_TRUE(fi.calls().empty());
  EXPECT_EQ(opened.header_path, fh.name());
  EXPECT_EQ(opened.data_path, fi.name());
  EXPECT_EQ(opened.data_file_size, data.size());
  NiftiReader reader(opened);
  const std::vector<std::int16_t> got = read(reader, volume(2));
  EXPECT_EQ(fi.calls(), (std::vector<Call>{{{2 * kVolume, kVolume}}}));
  EXPECT_EQ(got, vptest::read_as<std::int16_t>(voxpipe::open_nifti(dir.file("p.hdr")), volume(2), kInt16));
  EXPECT_EQ(got, vptest::naive_select(img.values, img.shape, volume(2)));
  // Names that do not make a pair.
  EXPECT_VP_ERROR(voxpipe::open_nifti_remote(remote(fh)), ErrorCode::invalid_argument);
  EXPECT_VP_ERROR(voxpipe::open_nifti_remote(remote(fi), remote(fh)), ErrorCode::invalid_argument);
}

TEST(NiftiRemote, FetcherFailuresAreErrorsNamingTheObject) {
  vptest::TempDir dir;
  const Image img = random_image(3, 15);
  const Bytes file = written(dir, "f.nii", img);
  RecordingFetcher f(object_of(file), "s3://bucket/f.nii");
  f.inject(RecordingFetcher::Fault::error);
  auto err = vptest::catch_error([&] { voxpipe::open_nifti_remote(remote(f)); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::io);
  EXPECT_EQ(err->path(), f.name());

  f.inject(RecordingFetcher::Fault::short_answer);
  err = vptest::catch_error([&] { voxpipe::open_nifti_remote(remote(f)); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), f.name());
  EXPECT_EQ(err->offset(), std::optional<std::uint64_t>(0));

  NiftiReader reader(voxpipe::open_nifti_remote(remote(f)));
  f.inject(RecordingFetcher::Fault::short_answer);
  err = vptest::catch_error([&] { read(reader, volume(2)); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), f.name());
  // The next read fetches the volume again and succeeds.
  expect_voxels(reader, file, img, volume(2));
}

}  // namespace
