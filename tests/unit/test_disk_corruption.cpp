// Corruption and staleness (docs/RELIABILITY.md, item 2): every kind of entry (reference,
// reference with its LSE kernel, generic) damaged every way; each must be detected when loaded
// (size, sha256, key, kernel manifest, format and NVRTC version), recompiled, never loaded, and
// the entry on disk repaired. Caches of another format version or NVRTC version are ignored.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "jit/disk_cache.hpp"
#include "jit/runtime.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;
using dsa_test::slurp;
using dsa_test::spit;

namespace {


EnvConfig cfg_for(const std::string& dir, const std::string& prebuilt = "") {
  EnvConfig c;
  c.cache_dir = dir;
  c.prebuilt_dir = prebuilt;
  c.log_level = LogLevel::quiet;
  return c;
}

KernelSpec kind(const std::string& name) {
  KernelSpec s = reference_spec(16, dsa_indexer::DType::bf16, name == "reference+lse", Layout::bshd);
  if (name == "generic") s = generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd);
  return s;
}

std::string header_of(const std::string& entry) { return entry.substr(0, entry.find("\nend\n") + 5); }

// The ways an entry gets damaged, each a function of (good entry, a valid entry of another key,
// a valid cubin of another family or kernel set).
using Damage = std::function<std::string(const std::string&, const std::string&, const std::string&)>;
std::map<std::string, Damage> damages() {
  std::map<std::string, Damage> d;
  d["truncated cubin"] = [](const std::string& g, auto&, auto&) { return g.substr(0, g.size() - 100); };
  d["truncated header"] = [](const std::string& g, auto&, auto&) { return g.substr(0, 50); };
  d["empty file"] = [](auto&, auto&, auto&) { return std::string(); };
  d["zeroed"] = [](const std::string& g, auto&, auto&) { return std::string(g.size(), '\0'); };
  d["bit flip in the cubin"] = [](const std::string& g, auto&, auto&) {
    std::string b = g;
    b[header_of(g).size() + (g.size() - header_of(g).size()) / 2] ^= 0x04;
    return b;
  };
  d["bit flip in the header"] = [](const std::string& g, auto&, auto&) {
    std::string b = g;
    b[g.find("cubin-sha256 ") + 20] ^= 0x01;
    return b;
  };
  d["trailing bytes"] = [](const std::string& g, auto&, auto&) { return g + "xx"; };
  d["another valid entry"] = [](auto&, const std::string& other, auto&) { return other; };
  d["another valid cubin, header kept"] = [](const std::string& g, auto&, const std::string& cubin) {
    return header_of(g) + cubin;
  };
  d["another valid cubin, header rewritten to match"] = [](const std::string& g, auto&, const std::string& cubin) {
    std::string why;
    CacheEntry e = *parse_entry(g, &why);
    e.cubin = cubin;
    return serialize_entry(e);  // size and digest agree: only the kernel manifest catches it
  };
  d["other format version"] = [](const std::string& g, auto&, auto&) {
    std::string b = g;
    const std::string here = fmt::format(" {}\n", kCacheFormatVersion);
    b.replace(b.find(here), here.size(), fmt::format(" {}\n", kCacheFormatVersion + 1));
    return b;
  };
  d["other NVRTC version"] = [](const std::string& g, auto&, auto&) {
    std::string why;
    CacheEntry e = *parse_entry(g, &why);
    e.nvrtc_version = "12.8";
    return serialize_entry(e);
  };
  return d;
}

}  // namespace

TEST_CASE("corruption: every damaged entry of every kind is recompiled, never loaded", "[disk_corruption]") {
  dsa_test::TempDir t;
  Runtime rt(cfg_for(t.path()));
  bool from_disk = true;
  // A valid entry of another key and valid cubins of another kernel set, as replacements.
  const CacheEntry other = rt.entry(kind("reference+lse"), &from_disk);
  const CacheEntry other_family = rt.entry(kind("generic"), &from_disk);
  const std::string other_bytes = slurp(rt.disk().entry_path(t.path(), other.key));
  int cases = 0;
  for (const std::string k : {"reference", "reference+lse", "generic"}) {
    const KernelSpec spec = kind(k);
    const CacheEntry good = rt.entry(spec, &from_disk);
    const std::string path = rt.disk().entry_path(t.path(), good.key);
    const std::string good_bytes = slurp(path);
    REQUIRE(parse_entry(good_bytes, nullptr));
    const CacheEntry& repl_entry = k == "reference+lse" ? rt.entry(kind("reference"), &from_disk) : other;
    const std::string& repl_bytes = k == "reference+lse" ? slurp(rt.disk().entry_path(t.path(), repl_entry.key)) : other_bytes;
    // reference+lse names two kernels: a reference cubin has only the first of them.
    const std::string& repl_cubin = k == "generic" ? other.cubin : k == "reference+lse" ? repl_entry.cubin : other_family.cubin;
    for (const auto& [what, damage] : damages()) {
      INFO(k << ": " << what);
      spit(path, damage(good_bytes, repl_bytes, repl_cubin));
      std::string why;
      CHECK_FALSE(rt.disk().load(good.key));  // detected on load...
      spit(path, damage(good_bytes, repl_bytes, repl_cubin));
      const uint64_t compiles = rt.stats().compiles;
      const CacheEntry got = rt.entry(spec, &from_disk);
      CHECK_FALSE(from_disk);                           // ...recompiled...
      CHECK(rt.stats().compiles == compiles + 1);
      CHECK(got.cubin == good.cubin);                   // ...never the damaged bytes...
      CHECK(got.kernels == good.kernels);
      CHECK(cubin_problem(got.cubin, got.kernels).empty());
      CHECK(slurp(path) == good_bytes);                 // ...and the entry is repaired
      rt.entry(spec, &from_disk);
      CHECK(from_disk);
      ++cases;
    }
  }
  CHECK(cases == 36);
}

TEST_CASE("corruption: a damaged prebuilt entry is ignored and left alone", "[disk_corruption]") {
  dsa_test::TempDir t, pre;
  const KernelSpec spec = kind("reference");
  CacheEntry good;
  {
    Runtime writer(cfg_for(pre.path()));
    bool d = false;
    good = writer.entry(spec, &d);
  }
  const std::string path = DiskCache(pre.path(), "", nvrtc_version()).entry_path(pre.path(), good.key);
  std::string bad = slurp(path);
  bad[bad.size() / 2] ^= 0x10;
  spit(path, bad);
  Runtime rt(cfg_for(t.path(), pre.path()));
  bool from_disk = true;
  const CacheEntry got = rt.entry(spec, &from_disk);
  CHECK_FALSE(from_disk);
  CHECK(got.cubin == good.cubin);
  CHECK(slurp(path) == bad);  // the read-only directory is never written
  CHECK(rt.disk().load(good.key));  // served by the writable directory now
}

TEST_CASE("staleness: caches of another format or NVRTC version are ignored", "[disk_corruption]") {
  dsa_test::TempDir t;
  const KernelSpec spec = kind("reference");
  const PreparedSource ps = prepare(spec);
  CacheEntry e;
  {
    Runtime rt(cfg_for(t.path()));
    bool d = false;
    e = rt.entry(spec, &d);
  }
  const std::string here = DiskCache(t.path(), "", nvrtc_version()).entry_path(t.path(), e.key);
  const std::string bytes = slurp(here);
  ::unlink(here.c_str());
  // A tree of another format version holding a valid-looking entry for this very key.
  for (int v : {kCacheFormatVersion - 1, kCacheFormatVersion + 1}) {
    std::string fan = fmt::format("{}/v{}/{}", t.path(), v, e.key.substr(0, 2));
    REQUIRE(std::system(fmt::format("mkdir -p '{}'", fan).c_str()) == 0);
    std::string b = bytes;
    const std::string current = fmt::format(" {}\n", kCacheFormatVersion);
    b.replace(b.find(current), current.size(), fmt::format(" {}\n", v));
    spit(fmt::format("{}/{}.dsak", fan, e.key), b);
  }
  // An entry another NVRTC version wrote lives under another key (the version is hashed in).
  const std::string old_key = compute_disk_key(ps.source, ps.options, spec.arch, "12.8", TemplateSet::embedded());
  CHECK(old_key != e.key);
  CacheEntry old = e;
  old.key = old_key;
  old.nvrtc_version = "12.8";
  DiskCache old_cache(t.path(), "", "12.8");
  REQUIRE(old_cache.store(old));
  CHECK(old_cache.load(old_key));  // valid for the NVRTC that wrote it...
  Runtime rt(cfg_for(t.path()));
  bool from_disk = true;
  rt.entry(spec, &from_disk);
  CHECK_FALSE(from_disk);  // ...never loaded by this one
  CHECK(rt.stats().compiles == 1);
  CHECK_FALSE(rt.disk().load(old_key));  // the same file read by this NVRTC is stale
}
