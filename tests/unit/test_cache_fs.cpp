// The disk cache's file-system rules (docs/RELIABILITY.md, items 2 and 7): special files never
// block (FIFOs, sockets, devices and links to them, in the writable and the prebuilt
// directory, through the library and the tool), directories are trusted only as ssh would
// trust them, and `cache clear` never leaves its directory. Every case that could hang runs in a
// child under alarm(), so a regression fails the test (SIGALRM) instead of hanging CI.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <sstream>

#include "jit/cache_fs.hpp"
#include "cubin_support.hpp"
#include "jit/disk_cache.hpp"
#include "process_support.hpp"
#include "jit/runtime.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;
using dsa_test::slurp;
using dsa_test::spit;

namespace {

constexpr unsigned kAlarm = 60;  // far above any case here (a few seconds), far below CTest's limit

CacheEntry tiny_entry(const std::string& seed) {
  const dsa_test::TinyCubin c = dsa_test::tiny_cubin(seed);
  CacheEntry e;
  e.key = sha256_hex(seed);
  e.nvrtc_version = nvrtc_version();
  e.arch = "sm_90a";
  e.source_name = "tiny.cu";
  e.kernels = {c.kernel};
  e.cubin = c.cubin;
  return e;
}

void mkdir_p(const std::string& p) { REQUIRE(std::system(fmt::format("mkdir -p -m 0700 '{}'", p).c_str()) == 0); }
std::string parent_of(const std::string& p) { return p.substr(0, p.rfind('/')); }

enum class Node { fifo, socket, link_to_fifo, device, link_to_device };
const char* node_name(Node n) {
  switch (n) {
    case Node::fifo: return "FIFO";
    case Node::socket: return "socket";
    case Node::link_to_fifo: return "symlink to a FIFO";
    case Node::device: return "character device";
    case Node::link_to_device: return "symlink to /dev/zero";
  }
  return "?";
}

// Creates the special file; false (reported) where this machine cannot make one.
bool make_node(Node n, const std::string& path, const std::string& scratch) {
  switch (n) {
    case Node::fifo: return ::mkfifo(path.c_str(), 0600) == 0;
    case Node::socket: {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      if (path.size() >= sizeof a.sun_path) return false;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
      const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(s);
      return ok;
    }
    case Node::link_to_fifo: {
      const std::string f = scratch + "/target.fifo";
      ::unlink(f.c_str());
      return ::mkfifo(f.c_str(), 0600) == 0 && ::symlink(f.c_str(), path.c_str()) == 0;
    }
    case Node::device: return ::mknod(path.c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0;  // like /dev/zero
    case Node::link_to_device: return ::symlink("/dev/zero", path.c_str()) == 0;
  }
  return false;
}

bool is_regular_nofollow(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

dsa_test::ChildResult tool(std::vector<std::string> args, const std::function<bool()>& setup = {}) {
  args.insert(args.begin(), DSA_TEST_TOOL);
  return dsa_test::run_program(args, [setup] {
    ::alarm(kAlarm);  // survives exec: a hanging tool dies by SIGALRM
    return !setup || setup();
  });
}

KernelSpec ref_spec(int heads) { return reference_spec(heads, dsa_indexer::DType::bf16, false, Layout::bshd); }

}  // namespace

TEST_CASE("special files: FIFO, socket, device and links as entries never block, are bad, and are replaced",
          "[special_files]") {
  for (Node n : {Node::fifo, Node::socket, Node::link_to_fifo, Node::device, Node::link_to_device}) {
    for (bool prebuilt : {false, true}) {
      INFO(node_name(n) << (prebuilt ? " in the prebuilt directory" : " in the writable directory"));
      dsa_test::TempDir t;
      const CacheEntry e = tiny_entry("special");
      const std::string root = t.path() + "/cache";
      DiskCache probe(root, "", e.nvrtc_version);
      const std::string path = probe.entry_path(root, e.key);
      mkdir_p(parent_of(path));
      if (!make_node(n, path, t.path())) {
        WARN("SKIPPED: cannot create a " << node_name(n) << " here: " << std::strerror(errno));
        continue;
      }
      auto r = dsa_test::run_in_child([&] {
        ::alarm(kAlarm);
        DiskCache d(prebuilt ? t.path() + "/writable" : root, prebuilt ? root : "", e.nvrtc_version);
        bool reported = false;
        for (const auto& rep : d.list())
          reported = reported || (rep.path == path && !rep.ok && rep.problem.find("not a regular file") != std::string::npos);
        if (!reported) return 11;
        if (d.load(e.key)) return 10;  // a miss (and, in the writable directory, removed)
        if (!d.store(e)) return 12;
        if (!d.load(e.key)) return 13;
        return 0;
      });
      INFO(r.output);
      REQUIRE(r.signal == 0);  // SIGALRM: it blocked
      CHECK(r.code == 0);
      if (prebuilt) {
        CHECK_FALSE(is_regular_nofollow(path));  // the read-only directory is never written
      } else {
        CHECK(is_regular_nofollow(path));  // replaced by the entry
        CHECK((slurp(path) == serialize_entry(e)));
      }
    }
  }
}

TEST_CASE("special files: cache ls, cache verify and warmup over a FIFO entry return, warmup replaces it",
          "[special_files]") {
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/cache";
  const std::string manifest = t.path() + "/m.txt";
  spit(manifest, "sq=64 sk=64 heads=16 family=reference\n");
  DiskCache d(dir, "", nvrtc_version());
  const std::string path = d.entry_path(dir, prepare(ref_spec(16)).disk_key);
  mkdir_p(parent_of(path));
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  for (const char* sub : {"ls", "verify"}) {
    auto r = tool({"cache", sub, "--cache-dir", dir});
    INFO(sub << ":\n" << r.output);
    REQUIRE(r.signal == 0);
    CHECK_THAT(r.output, Catch::Contains(path) && Catch::Contains("a FIFO, not a regular file"));
    if (std::string(sub) == "verify") CHECK(r.code != 0);
  }
  auto w = tool({"warmup", "--manifest", manifest, "--cache-dir", dir});
  INFO(w.output);
  REQUIRE(w.signal == 0);
  CHECK(w.code == 0);
  CHECK(is_regular_nofollow(path));
  auto v = tool({"cache", "verify", "--cache-dir", dir});
  INFO(v.output);
  CHECK(v.code == 0);
}

TEST_CASE("special files: a manifest that is a directory, /dev/zero or a FIFO is a clear error", "[special_files]") {
  dsa_test::TempDir t;
  const std::string fifo = t.path() + "/m.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& m : {t.path(), std::string("/dev/zero"), fifo}) {
    auto r = tool({"warmup", "--manifest", m, "--cache-dir", t.path() + "/cache"});
    INFO(m << ":\n" << r.output);
    REQUIRE(r.signal == 0);
    CHECK(r.code != 0);
    CHECK_THAT(r.output, Catch::Contains("not a regular file"));
    CHECK_THAT(r.output, !Catch::Contains("0 problems"));
  }
}

namespace {

struct LibraryRun {
  int code = -1, from_disk = -1, writable = -1;
  long long warnings = -1;
  std::string output;
};

// In a child (after `setup`): a runtime over dir (+ prebuilt) fetches reference h16 twice.
LibraryRun run_library(const std::string& dir, const std::string& prebuilt, const std::function<bool()>& setup = {}) {
  auto r = dsa_test::run_in_child([&] {
    ::alarm(kAlarm);
    if (setup && !setup()) return 101;
    const uint64_t w0 = disk_cache_warnings();
    EnvConfig cfg;
    cfg.cache_dir = dir;
    cfg.prebuilt_dir = prebuilt;
    Runtime rt(cfg);
    bool a = false, b = false;
    const CacheEntry e = rt.entry(ref_spec(16), &a);
    rt.entry(ref_spec(16), &b);
    if (!cubin_problem(e.cubin, e.kernels).empty()) return 102;
    std::printf("RESULT %d %d %llu\n", (a ? 1 : 0) + (b ? 1 : 0), rt.disk().writable() ? 1 : 0,
                static_cast<unsigned long long>(disk_cache_warnings() - w0));
    return 0;
  });
  LibraryRun o;
  o.code = r.code;
  o.output = r.output;
  std::istringstream in(r.output.substr(std::min(r.output.size(), r.output.find("RESULT ") + 7)));
  in >> o.from_disk >> o.writable >> o.warnings;
  return o;
}

// A cache directory holding a valid entry for reference h16, written by this process.
void warm(const std::string& dir) {
  EnvConfig cfg;
  cfg.cache_dir = dir;
  cfg.log_level = LogLevel::quiet;
  Runtime rt(cfg);
  bool d = false;
  rt.entry(ref_spec(16), &d);
  REQUIRE(rt.disk().list().size() == 1);
}

void check_refused(const LibraryRun& o, const std::string& reason) {
  INFO(o.output);
  REQUIRE(o.code == 0);
  CHECK(o.from_disk == 0);  // the planted entry is never read
  CHECK(o.writable == 0);   // memory-only
  CHECK(o.warnings == 1);
  if (env().log_level >= LogLevel::warn) CHECK_THAT(o.output, Catch::Contains(reason));
}

bool can_run_as_nobody(const dsa_test::TempDir& t) {
  if (::geteuid() != 0) return false;
  if (!dsa_test::can_drop_root()) return false;
  ::chmod(t.path().c_str(), 0755);
  return true;
}

}  // namespace

TEST_CASE("trust: a cache directory writable by group or others is not used", "[trust]") {
  for (const char* what : {"root group-writable", "root world-writable", "format directory group-writable"}) {
    INFO(what);
    dsa_test::TempDir t;
    const std::string dir = t.path() + "/cache", vdir = fmt::format("{}/v{}", dir, kCacheFormatVersion);
    warm(dir);
    const std::string w = what;
    const std::string target = w.rfind("root", 0) == 0 ? dir : vdir;
    ::chmod(target.c_str(), w.find("world") != std::string::npos ? 0702 : 0770);
    check_refused(run_library(dir, ""), target);
    auto v = tool({"cache", "verify", "--cache-dir", dir});
    INFO(v.output);
    CHECK(v.code != 0);
    CHECK_THAT(v.output, Catch::Contains(target) && Catch::Contains("writable by"));
  }
}

TEST_CASE("trust: a group-writable or foreign-owned entry in our directory is not loaded and is replaced", "[trust]") {
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/cache";
  warm(dir);
  DiskCache d(dir, "", nvrtc_version());
  const std::string path = d.list().at(0).path;
  ::chmod(path.c_str(), 0660);
  LibraryRun o = run_library(dir, "");
  INFO(o.output);
  CHECK(o.from_disk == 1);  // the first fetch recompiled and replaced it; the second read the new one
  CHECK(o.writable == 1);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  if (::geteuid() == 0) {
    REQUIRE(::chown(path.c_str(), dsa_test::kNobody, dsa_test::kNobody) == 0);
    o = run_library(dir, "");
    CHECK(o.from_disk == 1);
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(st.st_uid == 0);
  }
}

TEST_CASE("trust: a cache directory owned by another user is not used", "[trust]") {
  dsa_test::TempDir t;
  if (::geteuid() != 0) {
    WARN("SKIPPED: not root, so no directory of another user can be made here");
    return;
  }
  const std::string dir = t.path() + "/cache";
  warm(dir);
  // Owned by uid 65534, used by root.
  REQUIRE(std::system(fmt::format("chown -R {0}:{0} '{1}'", dsa_test::kNobody, dir).c_str()) == 0);
  check_refused(run_library(dir, ""), "owned by uid 65534");
  auto v = tool({"cache", "verify", "--cache-dir", dir});
  CHECK(v.code != 0);
  CHECK_THAT(v.output, Catch::Contains("owned by uid 65534"));
  // Owned by root, used by an unprivileged user.
  if (!can_run_as_nobody(t)) {
    WARN("SKIPPED: cannot drop to uid 65534 here");
    return;
  }
  REQUIRE(std::system(fmt::format("chown -R 0:0 '{0}' && chmod -R go+rX '{0}'", dir).c_str()) == 0);
  check_refused(run_library(dir, "", dsa_test::drop_root_if_needed), "owned by uid 0");
  v = tool({"cache", "verify", "--cache-dir", dir}, dsa_test::drop_root_if_needed);
  CHECK(v.code != 0);
  CHECK_THAT(v.output, Catch::Contains("owned by uid 0"));
}

TEST_CASE("trust: a prebuilt directory is used only when nobody but root or this user can write it", "[trust]") {
  dsa_test::TempDir t;
  const std::string pre = t.path() + "/pre", own = t.path() + "/own";
  warm(pre);
  // Sound: read from it (one disk hit per fetch), never written.
  mkdir_p(own);
  LibraryRun o = run_library(own, pre);
  INFO(o.output);
  CHECK(o.from_disk == 2);
  // Group-writable: ignored with a warning; the writable directory serves the second fetch.
  ::chmod(pre.c_str(), 0770);
  ::system(fmt::format("rm -rf '{}'", own).c_str());
  o = run_library(own, pre);
  INFO(o.output);
  CHECK(o.from_disk == 1);
  if (env().log_level >= LogLevel::warn) CHECK_THAT(o.output, Catch::Contains("ignoring the prebuilt") && Catch::Contains("writable by"));
  ::chmod(pre.c_str(), 0700);
  // A group-writable entry in it is ignored.
  DiskCache d("", pre, nvrtc_version());
  const std::string entry = d.list().at(0).path;
  ::chmod(entry.c_str(), 0620);
  ::system(fmt::format("rm -rf '{}'", own).c_str());
  CHECK(run_library(own, pre).from_disk == 1);
  CHECK_THAT(d.list().at(0).problem, Catch::Contains("untrusted entry"));
  ::chmod(entry.c_str(), 0600);
  if (!can_run_as_nobody(t)) {
    WARN("SKIPPED: not root or cannot drop to uid 65534: the foreign-owner cases did not run");
    return;
  }
  // Owned by another (non-root) user: ignored.
  REQUIRE(std::system(fmt::format("chown -R {0}:{0} '{1}'", dsa_test::kNobody, pre).c_str()) == 0);
  ::system(fmt::format("rm -rf '{}'", own).c_str());
  o = run_library(own, pre);
  CHECK(o.from_disk == 1);
  if (env().log_level >= LogLevel::warn) CHECK_THAT(o.output, Catch::Contains("owned by uid 65534"));
  // Owned by root and read by an unprivileged user: trusted (an image's prebuilt cache).
  REQUIRE(std::system(fmt::format("chown -R 0:0 '{0}' && chmod -R go+rX '{0}'", pre).c_str()) == 0);
  const std::string nob = t.path() + "/nobody";
  mkdir_p(nob);
  REQUIRE(::chown(nob.c_str(), dsa_test::kNobody, dsa_test::kNobody) == 0);
  o = run_library(nob + "/cache", pre, dsa_test::drop_root_if_needed);
  INFO(o.output);
  CHECK(o.from_disk == 2);
  auto v = tool({"cache", "verify", "--prebuilt-dir", pre}, dsa_test::drop_root_if_needed);
  INFO(v.output);
  CHECK(v.code == 0);
}

TEST_CASE("clear: never follows a symlinked subdirectory or entry", "[clear]") {
  dsa_test::TempDir t;
  const std::string dir = t.path() + "/cache", victim = t.path() + "/victim";
  warm(dir);
  // The victim holds files that look like ours.
  const CacheEntry e = tiny_entry("victim");
  const std::string vfan = victim + "/" + e.key.substr(0, 2);
  mkdir_p(vfan);
  const std::string victim_entry = vfan + "/" + e.key + ".dsak", victim_tmp = vfan + "/.tmp.x";
  spit(victim_entry, serialize_entry(e));
  spit(victim_tmp, "x");
  const std::string vdir = fmt::format("{}/v{}", dir, kCacheFormatVersion);
  const std::string fan_link = vdir + "/" + e.key.substr(0, 2);
  ::system(fmt::format("rm -rf '{}'", fan_link).c_str());
  REQUIRE(::symlink(vfan.c_str(), fan_link.c_str()) == 0);  // a fan-out directory that is a link
  DiskCache d(dir, "", nvrtc_version());
  // An entry of a real fan-out directory (the listing order, and so which entry comes first,
  // depends on the directory's hash order).
  std::string real;
  for (const auto& r : d.list())
    if (r.ok && r.path.rfind(fan_link, 0) != 0) {
      real = r.path;
      break;
    }
  REQUIRE_FALSE(real.empty());
  const std::string entry_link = parent_of(real) + "/" + std::string(64, 'f') + ".dsak";
  REQUIRE(::symlink(victim_entry.c_str(), entry_link.c_str()) == 0);  // an entry that is a link
  auto r = tool({"cache", "clear", "--cache-dir", dir});
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(is_regular_nofollow(victim_entry));  // the targets are untouched
  CHECK(is_regular_nofollow(victim_tmp));
  struct stat st {};
  CHECK(::lstat(fan_link.c_str(), &st) != 0);  // the links themselves are gone
  CHECK(::lstat(entry_link.c_str(), &st) != 0);
  CHECK(::lstat(real.c_str(), &st) != 0);
  CHECK(d.list().empty());
  // The same with a symlinked format directory.
  ::system(fmt::format("rm -rf '{}'", vdir).c_str());
  REQUIRE(::symlink(victim.c_str(), vdir.c_str()) == 0);
  r = tool({"cache", "clear", "--cache-dir", dir});
  CHECK(r.code == 0);
  CHECK(is_regular_nofollow(victim_entry));
}

TEST_CASE("clear: a non-zero status when something found could not be removed or read", "[clear]") {
  dsa_test::TempDir t;
  {
    const std::string file = t.path() + "/file";
    spit(file, "x");
    auto r = tool({"cache", "clear", "--cache-dir", file});
    INFO(r.output);
    CHECK(r.code != 0);
    CHECK_THAT(r.output, Catch::Contains(file) && Catch::Contains("Not a directory"));
  }
  if (!can_run_as_nobody(t) && ::geteuid() == 0) {
    WARN("SKIPPED: running as root and cannot drop to uid 65534: the permission cases did not run");
    return;
  }
  // Entries in a fan-out directory this user may not write (what a read-only mount gives too:
  // unlink fails), and a fan-out directory it may not read.
  const std::string dir = t.path() + "/cache";
  warm(dir);
  DiskCache d(dir, "", nvrtc_version());
  const std::string entry = d.list().at(0).path;
  auto as_user = [] { return ::geteuid() != 0 || dsa_test::drop_root_if_needed(); };
  ::system(fmt::format("chmod -R a+rX '{}'", dir).c_str());
  ::chmod(parent_of(entry).c_str(), 0555);
  auto r = tool({"cache", "clear", "--cache-dir", dir}, as_user);
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK_THAT(r.output, Catch::Contains(entry) && Catch::Contains("Permission denied"));
  CHECK(is_regular_nofollow(entry));
  ::chmod(parent_of(entry).c_str(), 0000);
  r = tool({"cache", "clear", "--cache-dir", dir}, as_user);
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK_THAT(r.output, Catch::Contains(parent_of(entry)) && Catch::Contains("Permission denied"));
  ::chmod(parent_of(entry).c_str(), 0700);
}
