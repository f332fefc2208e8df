// Bad disks (docs/RELIABILITY.md, item 3): a read-only directory, a directory that is a file, a
// missing parent, permission denied, a full disk. Each case runs the runtime in a process of its
// own and asserts: every cubin still arrives (memory-only caching), exactly one warning in that
// process however many runtimes and stores hit the directory, no temp file left behind, and
// `dsa-indexer cache verify` exits non-zero naming the path.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "families/sm90_indexer_reference.hpp"
#include "jit/disk_cache.hpp"
#include "core/env.hpp"
#include "process_support.hpp"
#include "jit/runtime.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;
using dsa_test::slurp;
using dsa_test::spit;

namespace {

KernelSpec ref_spec(int heads) {
  return reference_spec(heads, dsa_indexer::DType::bf16, false, Layout::bshd);
}

struct Outcome {
  int cubins_ok = -1, from_disk = -1, writable = -1;
  long long warnings = -1;
  std::string output;
  int code = -1;
};

// In a child: `setup`, then two runtimes over `dir` fetch three cubins; reports what happened.
Outcome run_library(const std::string& dir, const std::function<bool()>& setup = {}) {
  auto r = dsa_test::run_in_child([&] {
    if (setup && !setup()) {
      std::printf("setup failed\n");
      return 101;
    }
    const uint64_t w0 = disk_cache_warnings();
    EnvConfig cfg;
    cfg.cache_dir = dir;
    int ok = 0, disk = 0;
    bool writable = false;
    auto fetch = [&](Runtime& rt, const KernelSpec& s) {
      bool from_disk = false;
      CacheEntry e = rt.entry(s, &from_disk);
      ok += cubin_problem(e.cubin, e.kernels).empty() ? 1 : 0;
      disk += from_disk ? 1 : 0;
    };
    {
      Runtime a(cfg);
      fetch(a, ref_spec(16));
      fetch(a, ref_spec(32));
    }
    {
      Runtime b(cfg);
      fetch(b, ref_spec(16));
      writable = b.disk().writable();
    }
    std::printf("RESULT %d %d %d %llu\n", ok, disk, writable ? 1 : 0,
                static_cast<unsigned long long>(disk_cache_warnings() - w0));
    return 0;
  });
  Outcome o;
  o.output = r.output;
  o.code = r.code;
  std::istringstream in(r.output.substr(std::min(r.output.size(), r.output.find("RESULT ") + 7)));
  in >> o.cubins_ok >> o.from_disk >> o.writable >> o.warnings;
  return o;
}

dsa_test::ChildResult verify(const std::string& dir, const std::function<bool()>& setup = {}) {
  return dsa_test::run_program({DSA_TEST_TOOL, "cache", "verify", "--cache-dir", dir}, setup);
}

std::vector<std::string> g_temps;
std::vector<std::string> temp_files(const std::string& dir) {
  g_temps.clear();
  ::nftw(dir.c_str(), [](const char* p, const struct stat*, int, FTW* f) {
    if (std::string(p + f->base).rfind(".tmp.", 0) == 0) g_temps.emplace_back(p);
    return 0;
  }, 16, FTW_PHYS);
  return g_temps;
}

// The assertions every degraded case shares.
void check_degraded(const Outcome& o, const std::string& dir, const std::string& path_in_warning) {
  INFO("child output:\n" << o.output);
  REQUIRE(o.code == 0);
  CHECK(o.cubins_ok == 3);  // every call still got a working cubin
  CHECK(o.from_disk == 0);  // memory-only: nothing came back from disk
  CHECK(o.writable == 0);
  CHECK(o.warnings == 1);   // one warning for the whole process, two runtimes, three stores
  if (env().log_level >= LogLevel::warn) {
    CHECK(dsa_test::count_of(o.output, "kernel disk cache ") == 1);
    // Read-only (still read) where only stores fail; disabled (not read) where it is not trusted.
    CHECK(dsa_test::count_of(o.output, "is read-only from now on (its entries are still read") +
              dsa_test::count_of(o.output, "disabled (not read, nothing stored)") == 1);
    CHECK_THAT(o.output, Catch::Contains(path_in_warning));
  }
  CHECK(temp_files(dir).empty());
}

void check_verify_reports(const dsa_test::ChildResult& v, const std::string& path) {
  INFO("cache verify output:\n" << v.output);
  CHECK(v.exited);
  CHECK(v.code != 0);
  CHECK_THAT(v.output, Catch::Contains(path));
}


// Root ignores permission bits: those cases drop to `nobody` in the child, or are skipped
// (reported, not passed) where that is impossible.
bool permission_cases_possible(const dsa_test::TempDir& t) {
  if (::geteuid() != 0) return true;
  if (!dsa_test::can_drop_root()) {
    WARN("SKIPPED: running as root and cannot drop to uid 65534, so permission bits cannot be tested here");
    return false;
  }
  ::chmod(t.path().c_str(), 0755);  // let the unprivileged child reach the test directory
  return true;
}

}  // namespace

TEST_CASE("bad disk: a read-only cache directory", "[disk_faults]") {
  dsa_test::TempDir t;
  if (!permission_cases_possible(t)) return;
  const std::string dir = t.path() + "/ro";
  REQUIRE(::mkdir(dir.c_str(), 0555) == 0);
  check_degraded(run_library(dir, dsa_test::drop_root_if_needed), dir, dir);
  check_verify_reports(verify(dir, dsa_test::drop_root_if_needed), dir);
}

TEST_CASE("bad disk: the cache directory is a regular file", "[disk_faults]") {
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/file";
  spit(dir, "not a directory");
  check_degraded(run_library(dir), t.path(), dir);
  check_verify_reports(verify(dir), dir);
}

TEST_CASE("bad disk: a missing parent is created; one that cannot be created degrades", "[disk_faults]") {
  dsa_test::TempDir t;
  {
    const std::string dir = t.path() + "/a/b/c/cache";
    Outcome o = run_library(dir);
    INFO(o.output);
    CHECK(o.cubins_ok == 3);
    CHECK(o.from_disk == 1);  // the second runtime read what the first published
    CHECK(o.writable == 1);
    CHECK(o.warnings == 0);
    struct stat st {};
    REQUIRE(::stat(t.path().c_str(), &st) == 0);
    CHECK(::stat((t.path() + "/a").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    auto v = verify(dir);
    INFO(v.output);
    CHECK(v.code == 0);
    CHECK_THAT(v.output, Catch::Contains("2 entries ok, 0 bad"));
  }
  if (!permission_cases_possible(t)) return;
  const std::string locked = t.path() + "/locked";
  REQUIRE(::mkdir(locked.c_str(), 0555) == 0);
  const std::string dir = locked + "/missing/cache";
  check_degraded(run_library(dir, dsa_test::drop_root_if_needed), t.path(), locked + "/missing");
  check_verify_reports(verify(dir, dsa_test::drop_root_if_needed), dir);
}

TEST_CASE("bad disk: permission denied on the directory and on an entry", "[disk_faults]") {
  dsa_test::TempDir t;
  if (!permission_cases_possible(t)) return;
  {
    const std::string dir = t.path() + "/denied";
    REQUIRE(::mkdir(dir.c_str(), 0000) == 0);
    check_degraded(run_library(dir, dsa_test::drop_root_if_needed), t.path(), dir);
    check_verify_reports(verify(dir, dsa_test::drop_root_if_needed), dir);
  }
  // An entry this user may not read, in a fan-out directory it may not write.
  const std::string dir = t.path() + "/entry";
  Outcome first = run_library(dir);
  REQUIRE(first.writable == 1);
  DiskCache d(dir, "", nvrtc_version());
  auto list = d.list();
  REQUIRE(list.size() == 2);
  const std::string entry = list[0].path;
  for (const auto& r : list) ::chmod(r.path.c_str(), 0000);
  const std::string vdir = fmt::format("{}/v{}", dir, kCacheFormatVersion);
  ::chmod(vdir.c_str(), 0755);
  ::chmod(dir.c_str(), 0755);
  for (const auto& r : list) ::chmod(r.path.substr(0, r.path.rfind('/')).c_str(), 0555);
  // Dropped to another user, the directory is no longer the effective user's own: untrusted.
  check_degraded(run_library(dir, dsa_test::drop_root_if_needed), dir, ::geteuid() == 0 ? dir : vdir);
  check_verify_reports(verify(dir, dsa_test::drop_root_if_needed), entry);
}

TEST_CASE("bad disk: a full disk (RLIMIT_FSIZE below an entry's size)", "[disk_faults]") {
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/full";
  auto full = [] { return dsa_test::limit_file_size(4096); };
  check_degraded(run_library(dir, full), dir, dir);
  check_verify_reports(verify(dir, full), dir);
  // The same directory without the limit is healthy: the failure above was the limit's.
  auto v = verify(dir);
  INFO(v.output);
  CHECK(v.code == 0);
}

TEST_CASE("bad disk: a cache that can no longer store is reported read-only, and is still read", "[disk_faults]") {
  // Before, the warning said "kernel disk cache disabled" while load() went on reading the
  // directory; the message now says what happens: read-only, entries still read.
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/cache";
  Outcome first = run_library(dir);  // fills it: ref 16 and ref 32
  INFO(first.output);
  REQUIRE(first.code == 0);
  REQUIRE(first.writable == 1);
  auto r = dsa_test::run_in_child([&] {
    if (!dsa_test::limit_file_size(4096)) return 101;  // no store can succeed
    EnvConfig cfg;
    cfg.cache_dir = dir;
    Runtime rt(cfg);
    bool d16 = false, d64 = false, again = false;
    (void)rt.entry(ref_spec(16), &d16);  // on disk
    (void)rt.entry(ref_spec(64), &d64);  // compiled, its store fails: read-only from now on
    const bool writable = rt.disk().writable();
    (void)rt.entry(ref_spec(32), &again);  // on disk, first asked for now: still read
    std::printf("RESULT %d %d %d %d\n", d16 ? 1 : 0, d64 ? 1 : 0, again ? 1 : 0, writable ? 1 : 0);
    return 0;
  });
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("RESULT 1 0 1 0"));
  if (env().log_level >= LogLevel::warn) {
    CHECK(dsa_test::count_of(r.output, "kernel disk cache " + dir) == 1);
    CHECK_THAT(r.output, Catch::Contains("is read-only from now on (its entries are still read"));
    CHECK_THAT(r.output, !Catch::Contains("disabled"));
  }
}

TEST_CASE("bad disk: a cache path past PATH_MAX creates nothing", "[disk_faults]") {
  // Before, the levels were made one by one until mkdir failed with ENAMETOOLONG, leaving
  // every level that fit (81 directories in the case) behind.
  dsa_test::TempDir t;
  std::string dir = t.path() + "/long";
  while (dir.size() < 5000) dir += "/" + std::string(60, 'd');
  Outcome o = run_library(dir);
  INFO("child output:\n" << o.output);
  REQUIRE(o.code == 0);
  CHECK(o.cubins_ok == 3);
  CHECK(o.writable == 0);
  struct stat st {};
  CHECK(::lstat((t.path() + "/long").c_str(), &st) != 0);  // not even the first level
  if (env().log_level >= LogLevel::warn) CHECK_THAT(o.output, Catch::Contains("(PATH_MAX): nothing created"));
}

TEST_CASE("bad disk: levels created before a failure are removed again", "[disk_faults]") {
  // A regular file two levels down: the levels above it that this call made go away again.
  dsa_test::TempDir t;
  const std::string top = t.path() + "/a";
  REQUIRE(::mkdir(top.c_str(), 0700) == 0);
  // The path makes a/x, a/x/y and a/x/y/z, then walks back up to a/b/c, the file.
  REQUIRE(::mkdir((top + "/b").c_str(), 0700) == 0);
  spit(top + "/b/c", "a file in the way");
  Outcome o = run_library(top + "/x/y/z/../../../b/c/d/e");
  INFO("child output:\n" << o.output);
  REQUIRE(o.code == 0);
  CHECK(o.writable == 0);
  struct stat st {};
  CHECK(::lstat((top + "/x").c_str(), &st) != 0);  // x, x/y, x/y/z were made, then removed
  CHECK(slurp(top + "/b/c") == "a file in the way");
}
