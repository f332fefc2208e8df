#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "cubin_support.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "jit/disk_cache.hpp"
#include "jit/runtime.hpp"
#include "core/sha256.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;
using dsa_test::slurp;
using dsa_test::spit;

namespace {

// An entry around a real (tiny) cubin: the loader checks the ELF structure and the symbols.
CacheEntry sample(const std::string& seed = "x") {
  const dsa_test::TinyCubin c = dsa_test::tiny_cubin(seed);
  CacheEntry e;
  e.key = sha256_hex(seed);
  e.nvrtc_version = "13.0";
  e.arch = "sm_90a";
  e.source_name = "test.cu";
  e.kernels = {c.kernel};
  e.cubin = c.cubin;
  return e;
}


EnvConfig cfg_for(const std::string& dir) {
  EnvConfig c;
  c.cache_dir = dir;
  c.log_level = LogLevel::quiet;
  return c;
}

KernelSpec small_spec() {
  return reference_spec(16, dsa_indexer::DType::bf16, false, Layout::bshd);
}

}  // namespace

TEST_CASE("disk cache: a published entry is a verified hit", "[disk_cache]") {
  dsa_test::TempDir t;
  DiskCache d(t.path(), "", "13.0");
  CacheEntry e = sample();
  CHECK_FALSE(d.load(e.key));
  REQUIRE(d.store(e));
  auto got = d.load(e.key);
  REQUIRE(got);
  CHECK(got->cubin == e.cubin);
  CHECK(got->kernels == e.kernels);
  struct stat st {};
  REQUIRE(::stat(fmt::format("{}/v{}", t.path(), kCacheFormatVersion).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  auto list = d.list();
  REQUIRE(list.size() == 1);
  CHECK(list[0].ok);
}

TEST_CASE("disk cache: corrupted entries are misses and get replaced", "[disk_cache]") {
  dsa_test::TempDir t;
  DiskCache d(t.path(), "", "13.0");
  CacheEntry e = sample();
  REQUIRE(d.store(e));
  const std::string path = d.entry_path(t.path(), e.key);
  const std::string good = slurp(path);
  std::map<std::string, std::string> bad;
  bad["truncated"] = good.substr(0, good.size() - 10);
  bad["header only"] = good.substr(0, good.find("\nend\n") + 5);
  bad["zeroed"] = std::string(good.size(), '\0');
  std::string flip = good;
  flip[flip.size() - 3] ^= 0x10;
  bad["bit flip"] = flip;
  CacheEntry other = sample("other");
  bad["another valid entry"] = serialize_entry(other);
  CacheEntry oldfmt = e;
  std::string old = serialize_entry(oldfmt);
  old.replace(old.find(fmt::format(" {}\n", kCacheFormatVersion)), 3, " 0\n");
  bad["other format"] = old;
  CacheEntry newer = e;
  newer.nvrtc_version = "12.8";
  bad["other nvrtc"] = serialize_entry(newer);
  for (const auto& [what, bytes] : bad) {
    INFO(what);
    spit(path, bytes);
    CHECK_FALSE(d.load(e.key));
    CHECK(::access(path.c_str(), F_OK) != 0);  // removed, so the next store replaces it
    REQUIRE(d.store(e));
    CHECK(d.load(e.key));
  }
}

TEST_CASE("disk cache: the prebuilt directory is read-only and searched second", "[disk_cache]") {
  dsa_test::TempDir t, pre;
  CacheEntry e = sample();
  {
    DiskCache writer(pre.path(), "", "13.0");
    REQUIRE(writer.store(e));
  }
  DiskCache d(t.path(), pre.path(), "13.0");
  auto got = d.load(e.key);
  REQUIRE(got);
  CHECK(got->cubin == e.cubin);
}

TEST_CASE("disk cache: an unwritable directory degrades to memory-only", "[disk_cache]") {
  if (::geteuid() == 0) {
    // root ignores permission bits; use a path below a regular file instead
    dsa_test::TempDir t;
    spit(t.path() + "/file", "x");
    DiskCache d(t.path() + "/file/cache", "", "13.0");
    CHECK_FALSE(d.store(sample()));
    CHECK_FALSE(d.writable());
    CHECK_FALSE(d.directory_problem().empty());
    return;
  }
  dsa_test::TempDir t;
  ::chmod(t.path().c_str(), 0500);
  DiskCache d(t.path() + "/sub", "", "13.0");
  CHECK_FALSE(d.store(sample()));
  CHECK_FALSE(d.writable());
}

TEST_CASE("disk cache: a directory that is a file degrades to memory-only", "[disk_cache]") {
  dsa_test::TempDir t;
  spit(t.path() + "/notadir", "x");
  DiskCache d(t.path() + "/notadir", "", "13.0");
  CHECK_FALSE(d.store(sample()));
  CHECK_FALSE(d.writable());
  CHECK_THAT(d.directory_problem(), Catch::Contains("not a directory"));
}

TEST_CASE("disk cache: no temp files remain after publishing", "[disk_cache]") {
  dsa_test::TempDir t;
  DiskCache d(t.path(), "", "13.0");
  for (int i = 0; i < 5; ++i) REQUIRE(d.store(sample(std::to_string(i))));
  for (const auto& r : d.list()) CHECK(r.ok);
  CHECK(d.list().size() == 5);
  const ClearReport cleared = d.clear();
  CHECK(cleared.removed == 5);
  CHECK(cleared.problems.empty());
  CHECK(d.list().empty());
}

TEST_CASE("disk key changes when any template file it includes changes", "[disk_cache]") {
  const TemplateSet& emb = TemplateSet::embedded();
  KernelSpec spec = small_spec();
  const std::string k0 = prepare(spec, emb).disk_key;
  CHECK(k0 == prepare(spec, emb).disk_key);  // stable
  std::map<std::string, std::string> files = emb.files();
  files["dsa_window.cuh"] += "\n// a comment changes the key\n";
  TemplateSet edited(files);
  CHECK(prepare(spec, edited).disk_key != k0);
  std::map<std::string, std::string> files2 = emb.files();
  files2["ptx/wgmma.cuh"] += "\n";  // not included by the reference family
  CHECK(prepare(spec, TemplateSet(files2)).disk_key == k0);
  KernelSpec g = generic_spec(16, dsa_indexer::DType::bf16, false, Layout::bshd);
  CHECK(prepare(g, TemplateSet(files2)).disk_key != prepare(g, emb).disk_key);
}

TEST_CASE("disk key covers options, arch and NVRTC version, not paths", "[disk_cache]") {
  GeneratedSource src = render(small_spec());
  const TemplateSet& ts = TemplateSet::embedded();
  auto opts = compile_options("sm_90a");
  const std::string k = compute_disk_key(src, opts, "sm_90a", "13.0", ts);
  CHECK(compute_disk_key(src, opts, "sm_90a", "13.1", ts) != k);
  CHECK(compute_disk_key(src, opts, "sm_100a", "13.0", ts) != k);
  auto opts2 = opts;
  opts2.push_back("-lineinfo");
  CHECK(compute_disk_key(src, opts2, "sm_90a", "13.0", ts) != k);
  for (const auto& o : opts) CHECK(o.find('/') == std::string::npos);
}

TEST_CASE("runtime: truncated cache entry is recompiled, never loaded", "[disk_cache]") {
  dsa_test::TempDir t;
  KernelSpec spec = small_spec();
  Runtime rt(cfg_for(t.path()));
  bool from_disk = true;
  CacheEntry e1 = rt.entry(spec, &from_disk);
  CHECK_FALSE(from_disk);
  CHECK(rt.stats().compiles == 1);
  rt.entry(spec, &from_disk);
  CHECK(from_disk);
  CHECK(rt.stats().compiles == 1);
  const std::string path = rt.disk().entry_path(t.path(), e1.key);
  spit(path, slurp(path).substr(0, 200));
  CacheEntry e3 = rt.entry(spec, &from_disk);
  CHECK_FALSE(from_disk);
  CHECK(rt.stats().compiles == 2);
  CHECK(e3.cubin == e1.cubin);
  CHECK(rt.disk().load(e1.key));
}

TEST_CASE("runtime: an unwritable cache directory still compiles (memory-only)", "[disk_cache]") {
  dsa_test::TempDir t;
  spit(t.path() + "/file", "x");
  Runtime rt(cfg_for(t.path() + "/file/sub"));
  bool from_disk = true;
  CacheEntry e = rt.entry(small_spec(), &from_disk);
  CHECK_FALSE(from_disk);
  CHECK_FALSE(e.cubin.empty());
  CHECK_FALSE(rt.disk().writable());
}

// Run under ThreadSanitizer by tests/tsan/run_tsan.sh: one cache object shared by threads, and
// a degrading directory hit from several threads (the process-wide warning registry).
TEST_CASE("disk cache: concurrent stores, loads and lists on one object", "[disk_cache]") {
  dsa_test::TempDir t;
  DiskCache d(t.path(), "", "13.0");
  std::vector<CacheEntry> entries;
  for (int i = 0; i < 4; ++i) entries.push_back(sample("k" + std::to_string(i)));
  std::atomic<int> failed_stores{0}, failed_loads{0}, bad_reports{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 8; ++th)
    threads.emplace_back([&, th] {
      for (int i = 0; i < 50; ++i) {
        const CacheEntry& e = entries[static_cast<std::size_t>((th + i) % 4)];
        if (!d.store(e)) ++failed_stores;
        auto got = d.load(e.key);
        if (!got || got->cubin != e.cubin) ++failed_loads;  // the entry is there, whole
        if (i % 10 == 0)
          for (const auto& r : d.list())  // in-flight temp files may show; a bad entry may not
            if (!r.ok && r.path.find("/.tmp.") == std::string::npos) ++bad_reports;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failed_stores.load() == 0);
  CHECK(failed_loads.load() == 0);
  CHECK(bad_reports.load() == 0);
  auto list = d.list();
  CHECK(list.size() == 4);
  for (const auto& r : list) CHECK(r.ok);
}

TEST_CASE("disk cache: a bad directory hit from many threads and objects warns once", "[disk_cache]") {
  dsa_test::TempDir t;
  spit(t.path() + "/file", "x");
  const uint64_t before = disk_cache_warnings();
  std::vector<std::thread> threads;
  std::atomic<int> stored{0};
  for (int th = 0; th < 6; ++th)
    threads.emplace_back([&] {
      DiskCache d(t.path() + "/file/cache", "", "13.0");
      for (int i = 0; i < 5; ++i) stored += d.store(sample(std::to_string(i))) ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  CHECK(stored.load() == 0);
  CHECK(disk_cache_warnings() - before == 1);
}

TEST_CASE("runtime: concurrent entry() calls over one cache directory", "[disk_cache]") {
  dsa_test::TempDir t;
  Runtime rt(cfg_for(t.path()));
  std::vector<std::thread> threads;
  std::vector<std::string> cubins(8);
  for (int th = 0; th < 8; ++th)
    threads.emplace_back([&, th] {
      KernelSpec s = reference_spec(th % 2 ? 16 : 32, dsa_indexer::DType::bf16, false, Layout::bshd);
      bool from_disk = false;
      cubins[static_cast<std::size_t>(th)] = rt.entry(s, &from_disk).cubin;
    });
  for (auto& th : threads) th.join();
  for (int th = 2; th < 8; ++th) CHECK(cubins[static_cast<std::size_t>(th)] == cubins[static_cast<std::size_t>(th % 2)]);
  CHECK(rt.stats().compiles + rt.stats().disk_hits == 8);
  CHECK(rt.disk().list().size() == 2);
}

TEST_CASE("concurrent maintenance: a writer racing cache clear keeps its disk cache", "[concurrent_maintenance]") {
  dsa_test::TempDir t;
  std::vector<CacheEntry> entries;
  for (int i = 0; i < 4; ++i) entries.push_back(sample("m" + std::to_string(i)));
  DiskCache writer(t.path(), "", "13.0"), cleaner(t.path(), "", "13.0");
  const uint64_t w0 = disk_cache_warnings();
  std::atomic<bool> done{false};
  std::atomic<int> failed{0};
  std::atomic<uint64_t> removed{0};
  // A clear every millisecond: far more maintenance than any real cache sees, and each one
  // catches a store between its create and its rename with fair probability.
  std::thread clear_loop([&] {
    while (!done.load()) {
      removed += cleaner.clear().removed;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int i = 0; i < 400; ++i)
    if (!writer.store(entries[static_cast<std::size_t>(i % 4)])) ++failed;
  done = true;
  clear_loop.join();
  INFO("stores that failed twice: " << failed.load() << ", files the cleaner removed: " << removed.load());
  CHECK(writer.writable());  // never disabled for the rest of the process
  CHECK(disk_cache_warnings() == w0);
  CHECK(failed.load() < 400);  // a store fails only when clears hit both of its attempts
  CHECK(removed.load() > 0);
  REQUIRE(writer.store(entries[0]));
  CHECK(writer.load(entries[0].key));
}

TEST_CASE("concurrent maintenance: verify does not report another process's temp file in flight", "[concurrent_maintenance]") {
  dsa_test::TempDir t;
  DiskCache d(t.path(), "", "13.0");
  const CacheEntry e = sample("inflight");
  REQUIRE(d.store(e));
  const std::string path = d.entry_path(t.path(), e.key);
  const std::string tmp = path.substr(0, path.rfind('/')) + "/.tmp." + e.key + ".12345.0.00000000deadbeef";
  spit(tmp, serialize_entry(e).substr(0, 100));  // half written, as a writer in flight leaves it
  for (const auto& r : d.list()) CHECK(r.ok);
  CHECK(d.list().size() == 1);
  struct timespec old[2] = {{std::time(nullptr) - 86400, 0}, {std::time(nullptr) - 86400, 0}};
  REQUIRE(::utimensat(AT_FDCWD, tmp.c_str(), old, 0) == 0);  // a day old: an interrupted publish
  auto list = d.list();
  REQUIRE(list.size() == 2);
  int leftovers = 0;
  for (const auto& r : list) leftovers += !r.ok && r.path == tmp && r.problem.find("leftover") != std::string::npos;
  CHECK(leftovers == 1);
}
