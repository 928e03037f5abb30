// Files: positional reads with short reads only at EOF, read_exact, atomic output that leaves
// nothing behind without commit (nor after a signal, nor after the writer was killed), error
// codes for missing paths, and special files refused without blocking. Bytes in memory read as
// the same bytes in a file, and stay alive while an input holds them.
#include "core/file.hpp"

#include "core/memory_input.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "test_support.hpp"

namespace {

using voxpipe::ErrorCode;
using voxpipe::core::AtomicOutputFile;
using voxpipe::core::InputByteSource;
using voxpipe::core::InputFile;
using voxpipe::core::MemoryInput;

TEST(InputFile, ReadAtReturnsShortCountOnlyAtEof) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(100, 1);
  vptest::write_file(dir.file("a.bin"), data);
  InputFile f(dir.file("a.bin"));
  EXPECT_EQ(f.size(), 100u);
  EXPECT_EQ(f.path(), dir.file("a.bin"));

  std::vector<std::byte> buf(20);
  EXPECT_EQ(f.read_at(10, buf), 20u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 10, 20), 0);
  EXPECT_EQ(f.read_at(90, buf), 10u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 90, 10), 0);
  EXPECT_EQ(f.read_at(100, buf), 0u);
  EXPECT_EQ(f.read_at(1000, buf), 0u);
  EXPECT_EQ(f.read_at(5, std::span<std::byte>()), 0u);
}

TEST(InputFile, LargeReadIsComplete) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(3 << 20, 2);
  vptest::write_file(dir.file("big.bin"), data);
  InputFile f(dir.file("big.bin"));
  std::vector<std::byte> buf(data.size() + 7);
  ASSERT_EQ(f.read_at(0, buf), data.size());
  EXPECT_EQ(std::memcmp(buf.data(), data.data(), data.size()), 0);
}

// The identity an InputFile records is the file's at open; check_unchanged compares the open
// file (a rewrite in place) and, when asked and the open file has no name left, the path
// (another file renamed over it).
TEST(InputFile, ChecksTheFileAndThePathAgainstTheIdentityAtOpen) {
  vptest::TempDir dir;
  const std::string path = dir.file("a.bin");
  vptest::write_file(path, vptest::random_bytes(100, 1));
  InputFile f(path);
  EXPECT_EQ(f.identity(), voxpipe::path_identity(path));
  EXPECT_EQ(f.identity().size, 100u);
  const voxpipe::FileIdentity opened = f.identity();
  f.check_unchanged(opened, true);
  const auto expect_changed = [&](const InputFile& file, const char* what) {
    auto err = vptest::catch_error([&] { file.check_unchanged(opened, true); });
    ASSERT_TRUE(err);
    EXPECT_EQ(err->code(), ErrorCode::io);
    EXPECT_EQ(err->path(), path);
    const std::string text = err->what();
    EXPECT_NE(text.find("changed since it was opened"), std::string::npos) << text;
    EXPECT_NE(text.find(what), std::string::npos) << text;
  };
  // Renamed over: the descriptor still reads the old file, which has no name left; the path
  // names another.
  vptest::write_file(dir.file("b.bin"), vptest::random_bytes(100, 2));
  ASSERT_EQ(::rename(dir.file("b.bin").c_str(), path.c_str()), 0);
  f.check_unchanged(opened, false);
  expect_changed(f, "another file was put in its place");
  // Renamed away (it keeps a name), or deleted and not replaced: still the file opened (a kept
  // reader reads it).
  vptest::write_file(dir.file("c.bin"), vptest::random_bytes(100, 3));
  InputFile g(dir.file("c.bin"));
  ASSERT_EQ(::rename(dir.file("c.bin").c_str(), dir.file("d.bin").c_str()), 0);
  g.check_unchanged(g.identity(), true);
  ASSERT_EQ(::unlink(dir.file("d.bin").c_str()), 0);
  g.check_unchanged(g.identity(), true);
  auto err = vptest::catch_error([&] { voxpipe::check_same_file(path, opened, std::nullopt); });
  ASSERT_TRUE(err);
  EXPECT_NE(std::string(err->what()).find("removed or renamed"), std::string::npos);
}

TEST(InputFile, ARewriteInPlaceShowsInTheSizeOrTheTime) {
  vptest::TempDir dir;
  const std::string path = dir.file("a.bin");
  vptest::write_file(path, vptest::random_bytes(100, 1));
  InputFile f(path);
  const voxpipe::FileIdentity opened = f.identity();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  // The same size, a later time (as the next tick of the clock gives it).
  timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_nsec = (times[1].tv_nsec + 1) % 1000000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  auto err = vptest::catch_error([&] { f.check_unchanged(opened, false); });
  ASSERT_TRUE(err);
  EXPECT_NE(std::string(err->what()).find("modified at"), std::string::npos) << err->what();
  // Cut shorter.
  ASSERT_EQ(::truncate(path.c_str(), 10), 0);
  err = vptest::catch_error([&] { f.check_unchanged(opened, false); });
  ASSERT_TRUE(err);
  EXPECT_NE(std::string(err->what()).find("100 bytes, now 10"), std::string::npos) << err->what();
  // Nothing was there, and now a file is.
  err = vptest::catch_error([&] { voxpipe::check_same_file(path, std::nullopt, opened); });
  ASSERT_TRUE(err);
  EXPECT_NE(std::string(err->what()).find("no file was there"), std::string::npos) << err->what();
  voxpipe::check_same_file(path, std::nullopt, std::nullopt);
  voxpipe::check_same_file(path, opened, opened);
}

TEST(InputFile, MissingFileIsNotFound) {
  vptest::TempDir dir;
  auto err = vptest::catch_error([&] { InputFile f(dir.file("missing.nii")); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::not_found);
  EXPECT_EQ(err->path(), dir.file("missing.nii"));
  // A path through a regular file (ENOTDIR) is also "not found".
  vptest::write_file(dir.file("plain"), vptest::Bytes{1});
  EXPECT_VP_ERROR(InputFile f(dir.file("plain/x.nii")), ErrorCode::not_found);
}

TEST(InputFile, DirectoryIsAnIoError) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(InputFile f(dir.path()), ErrorCode::io);
}

// The error of opening `path`, which must come at once: a FIFO that is waited on gets a writer
// after a few seconds so that the test fails instead of hanging.
std::optional<voxpipe::Error> open_error(const std::string& path, bool fifo) {
  auto opened = std::async(std::launch::async, [&] { return vptest::catch_error([&] { InputFile f(path); }); });
  if (opened.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "opening " << path << " blocked";
    if (fifo) ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));
  }
  return opened.get();
}

void expect_not_regular(const std::optional<voxpipe::Error>& err, const std::string& path,
                        const std::string& kind) {
  ASSERT_TRUE(err) << path << " was opened";
  EXPECT_EQ(err->code(), ErrorCode::io);
  EXPECT_EQ(err->path(), path);
  EXPECT_NE(std::string(err->what()).find("expected a regular file, but found a " + kind),
            std::string::npos)
      << err->what();
}

TEST(InputFile, FifoIsRefusedWithoutBlocking) {
  vptest::TempDir dir;
  const std::string path = dir.file("fifo.nii");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expect_not_regular(open_error(path, true), path, "FIFO");
  // A symlink to it too.
  vptest::fs::create_symlink(path, dir.file("link.nii"));
  expect_not_regular(open_error(dir.file("link.nii"), true), dir.file("link.nii"), "FIFO");
}

TEST(InputFile, SocketAndDevicesAreRefused) {
  vptest::TempDir dir;
  const std::string path = dir.file("sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  expect_not_regular(open_error(path, false), path, "socket");
  ::close(s);
  // /dev/zero would read forever (its size is 0, so voxpipe would report it empty), /dev/null
  // as an empty file: neither is a file of data.
  expect_not_regular(open_error("/dev/null", false), "/dev/null", "character device");
  expect_not_regular(open_error("/dev/zero", false), "/dev/zero", "character device");
}

TEST(InputByteSource, IsRandomAccessAndReadsLikeTheFile) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(64, 3);
  vptest::write_file(dir.file("s.bin"), data);
  InputByteSource src(std::make_shared<const InputFile>(dir.file("s.bin")));
  EXPECT_TRUE(src.random_access());
  EXPECT_EQ(src.size(), 64u);
  std::vector<std::byte> buf(8);
  EXPECT_EQ(src.read_at(60, buf), 4u);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 60, 4), 0);
}

TEST(ReadExact, ThrowsTruncatedNamingFieldAndOffset) {
  vptest::TempDir dir;
  vptest::write_file(dir.file("t.bin"), vptest::random_bytes(50, 4));
  InputByteSource src(std::make_shared<const InputFile>(dir.file("t.bin")));
  std::vector<std::byte> buf(20);
  voxpipe::core::read_exact(src, 30, buf, "data");  // exactly to the end: fine
  auto err = vptest::catch_error([&] { voxpipe::core::read_exact(src, 40, buf, "data"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->field(), "data");
  EXPECT_EQ(err->path(), dir.file("t.bin"));
  ASSERT_TRUE(err->offset());
  EXPECT_EQ(*err->offset(), 40u);
}

TEST(MemoryInput, ReadsLikeTheSameBytesInAFile) {
  vptest::TempDir dir;
  const auto data = vptest::random_bytes(100, 6);
  vptest::write_file(dir.file("m.bin"), data);
  const InputFile file(dir.file("m.bin"));
  const MemoryInput memory(std::as_bytes(std::span(data)), nullptr, "m.bin in memory");
  EXPECT_EQ(memory.size(), file.size());
  EXPECT_EQ(memory.path(), "m.bin in memory");
  for (const std::uint64_t offset : {0, 1, 37, 90, 99, 100, 101, 1000}) {
    for (const std::size_t n : {0, 1, 10, 63, 200}) {
      std::vector<std::byte> a(n, std::byte{0xee}), b(n, std::byte{0xee});
      ASSERT_EQ(memory.read_at(offset, a), file.read_at(offset, b)) << offset << " " << n;
      EXPECT_EQ(a, b) << offset << " " << n;
    }
  }
  // read_exact's error names the buffer as it names a file.
  InputByteSource src(std::make_shared<const MemoryInput>(std::as_bytes(std::span(data)), nullptr,
                                                          "m.bin in memory"));
  std::vector<std::byte> buf(20);
  auto err = vptest::catch_error([&] { voxpipe::core::read_exact(src, 90, buf, "data"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code(), ErrorCode::truncated);
  EXPECT_EQ(err->path(), "m.bin in memory");
  ASSERT_TRUE(err->offset());
  EXPECT_EQ(*err->offset(), 90u);
}

TEST(MemoryInput, KeepsItsOwnerAliveUntilTheLastHolderEnds) {
  auto bytes = std::make_shared<const std::vector<std::uint8_t>>(vptest::random_bytes(16, 7));
  const std::weak_ptr<const std::vector<std::uint8_t>> watch = bytes;
  auto input = std::make_shared<const MemoryInput>(std::as_bytes(std::span(*bytes)), bytes, "b");
  auto src = std::make_unique<InputByteSource>(input);
  bytes.reset();
  input.reset();
  ASSERT_FALSE(watch.expired());  // the source still holds the input, which holds the owner
  std::vector<std::byte> buf(16);
  EXPECT_EQ(src->read_at(0, buf), 16u);
  EXPECT_EQ(std::memcmp(buf.data(), watch.lock()->data(), 16), 0);
  src.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(AtomicOutputFile, NothingIsLeftWithoutCommit) {
  vptest::TempDir dir;
  {
    AtomicOutputFile out(dir.file("o.nii"));
    const auto data = vptest::random_bytes(1000, 5);
    out.write(vptest::as_bytes(data));
    EXPECT_EQ(dir.entries().size(), 1u);  // the temporary name only
    EXPECT_FALSE(vptest::fs::exists(dir.file("o.nii")));
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicOutputFile, NothingIsLeftWhenAnExceptionUnwinds) {
  vptest::TempDir dir;
  try {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes(10, 1)));
    throw std::runtime_error("producer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicOutputFile, CommitPublishesExactlyTheBytesWritten) {
  vptest::TempDir dir;
  const auto a = vptest::random_bytes(3000, 6), b = vptest::random_bytes(17, 7);
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(a));
    out.write(vptest::as_bytes(b));
    out.write({});
    out.commit();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.nii"});
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), vptest::concat({a, b}));
}

TEST(AtomicOutputFile, CommitReplacesAnExistingFileAndAbortKeepsIt) {
  vptest::TempDir dir;
  vptest::write_file(dir.file("o.nii"), vptest::Bytes{1, 2, 3});
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes{9, 9}));
  }  // no commit: the old file stays untouched
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{1, 2, 3}));
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes{7}));
    out.commit();
  }
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{7}));
  EXPECT_EQ(dir.entries().size(), 1u);
}

TEST(AtomicOutputFile, MissingDirectoryIsNotFound) {
  vptest::TempDir dir;
  EXPECT_VP_ERROR(AtomicOutputFile out(dir.file("no/such/dir/o.nii")), ErrorCode::not_found);
}

TEST(AtomicOutputFile, DiscardRemovesTheTemporariesOfUnfinishedOutputsOnly) {
  vptest::TempDir dir;
  {
    AtomicOutputFile done(dir.file("done.nii"));
    done.write(vptest::as_bytes(vptest::Bytes{1}));
    done.commit();
  }
  AtomicOutputFile committed(dir.file("committed.nii"));
  committed.write(vptest::as_bytes(vptest::Bytes{2}));
  committed.commit();
  AtomicOutputFile a(dir.file("a.nii")), b(dir.file("b.nii.gz"));
  a.write(vptest::as_bytes(vptest::Bytes(5000, 3)));
  EXPECT_EQ(dir.entries().size(), 4u);
  voxpipe::core::discard_unfinished_outputs();  // as the CLI's signal handler does
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"committed.nii", "done.nii"}));
  // A write that goes on fails at its commit; nothing appears.
  EXPECT_VP_ERROR(a.commit(), ErrorCode::not_found);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"committed.nii", "done.nii"}));
}

// A process ID that is not in use: a child's, after it was reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(AtomicOutputFile, RemovesTheStaleTemporariesOfItsDestination) {
  vptest::TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getppid());
  const std::vector<std::string> stale = {"o.nii.tmp-" + dead + "-0", "o.nii.tmp-" + dead + "-17"};
  std::vector<std::string> kept = {
      "o.nii",  // the destination itself, and names that only look alike:
      "o.nii.tmp-" + live + "-0",  // a live process's temporary
      "o.nii.tmp-" + dead + "-0x", "o.nii.tmp-" + dead, "o.nii.tmp-" + dead + "-", "o.nii.tmp--1-0",
      "o.nii.tmp-0-0", "o.nii.tmp-0" + dead + "-1", "o.nii.tmp-+" + dead + "-1",
      "o.nii.tmp-" + dead + "-1-2", "o.nii.tmp-99999999999999999999-1", "p.nii.tmp-" + dead + "-0",
      "xo.nii.tmp-" + dead + "-0", "o.nii.gz.tmp-" + dead + "-0"};
  for (const auto& name : stale) vptest::write_file(dir.file(name), vptest::Bytes(100, 1));
  for (const auto& name : kept) vptest::write_file(dir.file(name), vptest::Bytes{7});
  // A temporary whose lock is held (its writer lives on a host that shares the folder).
  const std::string locked = "o.nii.tmp-" + dead + "-5";
  vptest::write_file(dir.file(locked), vptest::Bytes{7});
  const int fd = ::open(dir.file(locked).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  kept.push_back(locked);
  // Not a regular file: left alone.
  const std::string folder = "o.nii.tmp-" + dead + "-6";
  vptest::fs::create_directory(dir.file(folder));
  kept.push_back(folder);
  {
    AtomicOutputFile out(dir.file("o.nii"));
    out.write(vptest::as_bytes(vptest::Bytes{9}));
    out.commit();
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(dir.entries(), kept);
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), vptest::Bytes{9});
  // Relative to the working folder too (a name without '/').
  vptest::write_file(dir.file(stale[0]), vptest::Bytes(100, 1));
  const auto cwd = vptest::fs::current_path();
  vptest::fs::current_path(dir.path());
  { AtomicOutputFile out("o.nii"); }
  vptest::fs::current_path(cwd);
  EXPECT_EQ(dir.entries(), kept);
  // Once its lock is free, the dead writer's temporary goes too.
  ::close(fd);
  { AtomicOutputFile out(dir.file("o.nii")); }
  kept.erase(std::find(kept.begin(), kept.end(), locked));
  EXPECT_EQ(dir.entries(), kept);
}

TEST(AtomicOutputFile, TheTemporaryIsLockedWhileWritten) {
  vptest::TempDir dir;
  AtomicOutputFile out(dir.file("o.nii"));
  ASSERT_EQ(dir.entries().size(), 1u);
  const int fd = ::open(dir.file(dir.entries()[0]).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  ::close(fd);
}

TEST(AtomicOutputFile, TwoWritersOfOneNameDoNotCollide) {
  vptest::TempDir dir;
  AtomicOutputFile a(dir.file("o.nii")), b(dir.file("o.nii"));
  a.write(vptest::as_bytes(vptest::Bytes{1}));
  b.write(vptest::as_bytes(vptest::Bytes{2}));
  a.commit();
  b.commit();
  EXPECT_EQ(vptest::read_file(dir.file("o.nii")), (vptest::Bytes{2}));
}

}  // namespace
