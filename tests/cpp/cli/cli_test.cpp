// The voxpipe command line, called as a function: info (text and JSON), convert round trips,
// bench-load's counts and failures, and the documented exit codes for usage errors and failures.
#include <sstream>

#include "commands.hpp"
#include "nifti/nifti_support.hpp"

namespace {

using voxpipe::DType;
using vptest::Bytes;

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = voxpipe::cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

// A 4x5x6 int16 image with scaling and an extension.
std::string sample(const vptest::TempDir& dir, const std::string& name, bool big = false) {
  voxpipe::NiftiHeader h = vptest::make_header(1, DType::i16, {4, 5, 6}, big);
  h.scl_slope = 0.5;
  h.scl_inter = -2;
  h.pixdim = {1, 2, 2.5, 3, 1, 1, 1, 1};
  h.descrip = vptest::chars<80>("cli sample");
  std::vector<std::int16_t> v(120);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int16_t>(i * 11 - 600);
  return vptest::write_image(dir, name, h, v, {{6, {'c', 'o', 'm', 'm', 'e', 'n', 't'}}});
}

TEST(Cli, InfoTextShowsShapeAndDtype) {
  vptest::TempDir dir;
  const auto r = run({"info", sample(dir, "a.nii")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("shape:       (4, 5, 6)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dtype:       int16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NIfTI-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cli sample"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(Cli, InfoJsonHasTheShape) {
  vptest::TempDir dir;
  const auto r = run({"info", "--json", sample(dir, "a.nii.gz", true)});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.front(), '{');
  EXPECT_NE(r.out.find("\"shape\": [4, 5, 6]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"dtype\": \"int16\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"compression\": \"gzip\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"byte_order\": \"big\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"scl_slope\": 0.5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"extensions\": [{\"code\": 6, \"size\": 7}]"), std::string::npos) << r.out;
  // Option order does not matter.
  EXPECT_EQ(run({"info", dir.file("a.nii.gz"), "--json"}).out, r.out);
}

TEST(Cli, ConvertRoundTripKeepsStoredValuesAndScaling) {
  vptest::TempDir dir;
  const auto src = voxpipe::open_nifti(sample(dir, "a.nii", true));
  auto r = run({"convert", dir.file("a.nii"), dir.file("b.nii.gz")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = run({"convert", dir.file("b.nii.gz"), dir.file("c.hdr"), "--level", "9"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name : {"b.nii.gz", "c.hdr"}) {
    const auto img = voxpipe::open_nifti(dir.file(name));
    EXPECT_EQ(img.shape, src.shape) << name;
    EXPECT_EQ(img.dtype, DType::i16) << name;
    EXPECT_EQ(img.header.big_endian, true) << name;
    EXPECT_EQ(img.scaling.slope, 0.5) << name;
    EXPECT_EQ(img.scaling.inter, -2.0) << name;
    EXPECT_EQ(img.affine, src.affine) << name;
    ASSERT_EQ(img.extensions.size(), 1u) << name;
    EXPECT_EQ(img.extensions[0].content, (Bytes{'c', 'o', 'm', 'm', 'e', 'n', 't'}));
    EXPECT_EQ(vptest::read_as<std::int16_t>(img, {}, {.type = DType::i16, .apply_scaling = false}),
              vptest::read_as<std::int16_t>(src, {}, {.type = DType::i16, .apply_scaling = false}))
        << name;
  }
  EXPECT_EQ(vptest::read_file(dir.file("b.nii.gz"))[8], 4);  // default gzip level 1
}

TEST(Cli, ConvertToFloat32StoresTheScaledValues) {
  vptest::TempDir dir;
  const auto src = voxpipe::open_nifti(sample(dir, "a.nii"));
  ASSERT_EQ(run({"convert", dir.file("a.nii"), dir.file("b.nii.gz")}).code, 0);
  const auto r = run({"convert", dir.file("b.nii.gz"), dir.file("f.nii"), "--dtype", "float32"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("f.nii"), std::string::npos);
  const auto img = voxpipe::open_nifti(dir.file("f.nii"));
  EXPECT_EQ(img.dtype, DType::f32);
  EXPECT_FALSE(img.scaling.active());
  EXPECT_EQ(img.shape, src.shape);
  const auto stored = vptest::read_as<std::int16_t>(src, {}, {.type = DType::i16, .apply_scaling = false});
  const auto values = vptest::read_as<float>(img, {}, {.type = DType::f32, .apply_scaling = false});
  ASSERT_EQ(values.size(), stored.size());
  for (std::size_t i = 0; i < stored.size(); ++i)
    EXPECT_EQ(values[i], static_cast<float>(vptest::nib_scale(stored[i], 0.5, -2.0))) << i;
  // float64 as well, then back: unchanged values.
  ASSERT_EQ(run({"convert", dir.file("f.nii"), dir.file("d.nii.gz"), "--dtype", "float64"}).code, 0);
  const auto d = vptest::read_as<double>(voxpipe::open_nifti(dir.file("d.nii.gz")), {}, {.type = DType::f64});
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(d[i], static_cast<double>(values[i])) << i;
}

TEST(Cli, UsageErrorsExit2) {
  vptest::TempDir dir;
  const std::string a = sample(dir, "a.nii");
  const std::vector<std::vector<std::string>> cases{
      {},
      {"frobnicate"},
      {"info"},
      {"info", "--yaml", a},
      {"convert", a},
      {"convert", a, dir.file("b.nii"), dir.file("c.nii")},
      {"convert", a, dir.file("b.nii"), "--level"},
      {"convert", a, dir.file("b.nii"), "--level", "10"},
      {"convert", a, dir.file("b.nii"), "--level", "x"},
      {"convert", a, dir.file("b.nii"), "--dtype", "float16"},
      {"convert", a, dir.file("b.nii"), "--dtype", "int32"},
      {"convert", a, dir.file("b.nii"), "--fast"},
      {"bench-load"},
      {"bench-load", "--no-nibabel"},
      {"bench-load", a, "--repeat", "0"},
      {"bench-load", a, "--repeat", "x"},
      {"bench-load", a, "--repeat"},
      {"bench-load", a, "--threads", "-1"},
      {"bench-load", a, "--io-threads", "0"},
      {"bench-load", a, "--dtype", "float64"},
      {"bench-load", a, "--python"},
      {"bench-load", a, "--fast"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& s : args) joined += s + " ";
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << joined << "\n" << r.err;
    EXPECT_FALSE(r.err.empty()) << joined;
  }
  EXPECT_FALSE(vptest::fs::exists(dir.file("b.nii")));
  const auto help = run({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: voxpipe"), std::string::npos);
  EXPECT_NE(help.out.find("bench-load"), std::string::npos);
  // Every command has its own help on stdout, and names it when an option is unknown.
  for (const std::string cmd : {"info", "convert", "index", "bench-load", "dcm2nii", "resample"}) {
    for (const char* flag : {"--help", "-h"}) {
      const auto r = run({cmd, flag});
      EXPECT_EQ(r.code, 0) << cmd << " " << flag << "\n" << r.err;
      EXPECT_NE(r.out.find("usage: voxpipe " + cmd), std::string::npos) << cmd << "\n" << r.out;
    }
  }
  for (const std::string cmd : {"info", "convert", "index"}) {
    const auto r = run({cmd, "--no-such-option"});
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.err.find("usage: voxpipe " + cmd), std::string::npos) << cmd << "\n" << r.err;
  }
}

TEST(Cli, FailuresExitWithTheirCodes) {
  vptest::TempDir dir;
  EXPECT_EQ(run({"info", dir.file("missing.nii")}).code, 3);
  EXPECT_EQ(run({"convert", dir.file("missing.nii"), dir.file("o.nii")}).code, 3);
  vptest::write_file(dir.file("text.nii"), vptest::text_bytes(500, 1));
  const auto bad = run({"info", dir.file("text.nii")});
  EXPECT_EQ(bad.code, 5);
  EXPECT_NE(bad.err.find("format"), std::string::npos) << bad.err;
  EXPECT_EQ(run({"info", dir.file("x.txt")}).code, 5);
  voxpipe::NiftiHeader h = vptest::make_header(1, DType::u8, {4});
  h.datatype = 1536;
  vptest::write_file(dir.file("f128.nii"), vptest::concat({voxpipe::encode_nifti_header(h), Bytes(4, 0)}));
  EXPECT_EQ(run({"info", dir.file("f128.nii")}).code, 6);
  // Truncated data: info still works (header only), convert fails with 7 and writes nothing.
  const std::string t = sample(dir, "t.nii");
  std::filesystem::resize_file(t, std::filesystem::file_size(t) - 10);
  EXPECT_EQ(run({"info", t}).code, 0);
  EXPECT_EQ(run({"convert", t, dir.file("t2.nii")}).code, 7);
  EXPECT_FALSE(vptest::fs::exists(dir.file("t2.nii")));
  // Corrupt gzip data: 8.
  sample(dir, "c.nii.gz");
  Bytes gz = vptest::read_file(dir.file("c.nii.gz"));
  gz[gz.size() - 5] ^= 0xff;
  vptest::write_file(dir.file("c.nii.gz"), gz);
  EXPECT_EQ(run({"convert", dir.file("c.nii.gz"), dir.file("c2.nii")}).code, 8);
  // Output into a directory that does not exist: not found (3).
  EXPECT_EQ(run({"convert", sample(dir, "ok.nii"), dir.file("no/such/out.nii")}).code, 3);
}

std::uint64_t disk_size(const std::vector<std::string>& paths) {
  std::uint64_t n = 0;
  for (const auto& p : paths) n += std::filesystem::file_size(p);
  return n;
}

TEST(Cli, BenchLoadCountsFilesAndBytes) {
  vptest::TempDir dir;
  const std::string a = sample(dir, "a.nii"), b = sample(dir, "b.nii.gz", true);
  const std::string c = sample(dir, "c.hdr");  // a pair: both files count on disk
  const std::uint64_t disk = disk_size({a, b, c, dir.file("c.img")});
  // 3 files of 4x5x6 voxels: float32 as get_fdata(dtype=float32); scaled int16 reads as float64
  // with --dtype native, as np.asanyarray(img.dataobj).
  for (const auto& [dtype, item] : {std::pair{"float32", 4}, std::pair{"native", 8}}) {
    const auto r = run({"bench-load", "--no-nibabel", "--repeat", "2", "--threads", "2", "--dtype",
                        dtype, a, b, c});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("files:      3\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("on disk:    " + std::to_string(disk) + " bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("decoded:    " + std::to_string(3 * 120 * item) + " bytes"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("page cache warmed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nvoxpipe "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2 files at once"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("nibabel "), std::string::npos) << r.out;
    // Not a terminal: no progress bar, nothing on stderr.
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  // One file read at a time still loads them all.
  const auto one = run({"bench-load", "--no-nibabel", "--repeat", "1", "--io-threads", "1", a, b, c});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("files:      3\n"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("1 file at a time"), std::string::npos) << one.out;
}

TEST(Cli, BenchLoadNamesFailingFilesMeasuresTheOthersAndExitsWithTheFirstCode) {
  vptest::TempDir dir;
  const std::string a = sample(dir, "a.nii"), b = sample(dir, "b.nii.gz");
  const std::string missing = dir.file("missing.nii");
  sample(dir, "c.nii.gz");
  Bytes gz = vptest::read_file(dir.file("c.nii.gz"));
  gz[gz.size() - 5] ^= 0xff;  // ISIZE no longer matches: corrupt (8)
  vptest::write_file(dir.file("c.nii.gz"), gz);
  const std::string corrupt = dir.file("c.nii.gz");

  const auto r = run({"bench-load", "--no-nibabel", "--repeat", "1", a, missing, corrupt, b});
  EXPECT_EQ(r.code, 3) << r.err;  // the first failure on the command line: not_found
  EXPECT_NE(r.err.find("error (not_found): " + missing), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error (corrupt): " + corrupt), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(a), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("files:      2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("failed:     2 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on disk:    " + std::to_string(disk_size({a, b})) + " bytes"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("decoded:    " + std::to_string(2 * 120 * 4) + " bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nvoxpipe "), std::string::npos) << r.out;

  const auto swapped = run({"bench-load", "--no-nibabel", "--repeat", "1", corrupt, a, missing});
  EXPECT_EQ(swapped.code, 8) << swapped.err;
  const auto none = run({"bench-load", "--no-nibabel", missing});
  EXPECT_EQ(none.code, 3) << none.err;
  EXPECT_NE(none.out.find("files:      0\n"), std::string::npos) << none.out;
}

TEST(Cli, BenchLoadWithoutPythonReportsVoxpipeAlone) {
  vptest::TempDir dir;
  const std::string a = sample(dir, "a.nii");
  // A Python that does not exist, and one that fails at once: one line, voxpipe's figures, exit 0.
  for (const std::string& python : {dir.file("no-such-python"), std::string("false")}) {
    const auto r = run({"bench-load", "--repeat", "1", "--python", python, a});
    EXPECT_EQ(r.code, 0) << python << "\n" << r.err;
    EXPECT_NE(r.out.find("\nvoxpipe "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("nibabel:    not measured (" + python + ": "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("voxpipe / nibabel"), std::string::npos) << r.out;
  }
}

// A stand-in for Python that ignores the script and prints the child's JSON as given.
std::string fake_python(const vptest::TempDir& dir, const std::string& name, const std::string& json) {
  const std::string path = dir.file(name);
  vptest::write_file(path, Bytes(json.begin(), json.end()));
  std::string script = "#!/bin/sh\ncat '" + path + "'\n";
  vptest::write_file(path + ".sh", Bytes(script.begin(), script.end()));
  std::filesystem::permissions(path + ".sh", std::filesystem::perms::owner_all);
  return path + ".sh";
}

TEST(Cli, BenchLoadReadsTheNibabelChildsJson) {
  vptest::TempDir dir;
  const std::string a = sample(dir, "a.nii"), b = sample(dir, "b.nii.gz");
  // Progress dots before the JSON line are skipped; the median of 0.5, 0.25, 1.0 s is 500 ms.
  const std::string ok = fake_python(
      dir, "ok.json", ".\n.\n{\"nibabel\": \"9.9.9\", \"python\": \"3.0.1\", \"rounds\": [0.5, 0.25, 1.0], \"errors\": {}}\n");
  auto r = run({"bench-load", "--repeat", "3", "--python", ok, a, b});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nnibabel        500.000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nibabel 9.9.9, Python 3.0.1, one file at a time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("voxpipe / nibabel: voxpipe is "), std::string::npos) << r.out;

  // A file nibabel failed on is named (escapes decoded), and the ratio is not given.
  const std::string failed = fake_python(
      dir, "failed.json",
      "{\"nibabel\": \"9.9.9\", \"python\": \"3.0.1\", \"rounds\": [0.5], "
      "\"errors\": {\"1\": \"ValueError: caf\\u00e9 \\\"x\\\" \\ud83d\\ude00\"}}");
  r = run({"bench-load", "--repeat", "1", "--python", failed, a, b});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("nibabel failed on " + b + ": ValueError: caf\u00e9 \"x\" \U0001F600\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not compared (nibabel failed on 1 of the files)"), std::string::npos) << r.out;

  // Output that is not the expected JSON: not measured, not an error.
  const std::string garbage = fake_python(dir, "garbage.json", "{\"rounds\": [0.5,\n");
  r = run({"bench-load", "--repeat", "1", "--python", garbage, a});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("nibabel:    not measured (" + garbage + ": "), std::string::npos) << r.out;
}

}  // namespace
