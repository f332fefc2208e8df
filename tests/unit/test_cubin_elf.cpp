// The cubin check and the entry digest (docs/RELIABILITY.md, item 2): a minimal fake ELF that
// merely names the kernel, a cubin for another SM, and a cubin or a whole entry copied from
// another variant with the same kernel names must not verify as an entry.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <sstream>

#include "jit/cubin_elf.hpp"
#include "cubin_support.hpp"
#include "jit/disk_cache.hpp"
#include "jit/runtime.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "core/sha256.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;
using dsa_test::slurp;
using dsa_test::spit;

namespace {

// What passed the old check: an EM_CUDA ELF header and the kernel's name as a string.
std::string fake_elf(const std::string& kernel) {
  std::string c(64, '\0');
  c.replace(0, 4, "\x7f" "ELF");
  c[4] = 2;
  c[5] = 1;
  c[16] = 2;  // ET_EXEC
  c[18] = static_cast<char>(190);
  c[48] = 0x04;
  c[49] = 0x5a;  // e_flags as NVRTC 13 writes them for sm_90
  c[8] = 8;
  return c + std::string(1, '\0') + kernel + std::string(1, '\0') + std::string(1000, 'c');
}

KernelSpec ref_spec(int heads) { return reference_spec(heads, dsa_indexer::DType::bf16, false, Layout::bshd); }

std::string header_of(const std::string& entry) { return entry.substr(0, entry.find("\nend\n") + 5); }
std::string body_of(const std::string& entry) { return entry.substr(entry.find("\nend\n") + 5); }

// Rewrites the header lines a copier would fix up: the key, the cubin size, and a plain
// sha256 of the cubin wherever the header has one.
std::string fix_up(const std::string& header, const std::string& key, const std::string& cubin) {
  std::istringstream in(header);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("key ", 0) == 0) line = "key " + key;
    if (line.rfind("cubin-size ", 0) == 0) line = fmt::format("cubin-size {}", cubin.size());
    if (line.rfind("cubin-sha256 ", 0) == 0) line = "cubin-sha256 " + sha256_hex(cubin);
    out += line + "\n";
  }
  return out + cubin;
}

}  // namespace

TEST_CASE("cubin check: a real cubin passes; a fake ELF, another SM and a missing kernel do not", "[cubin_elf]") {
  const dsa_test::TinyCubin c = dsa_test::tiny_cubin("elf");
  CHECK(cubin_problem(c.cubin, {c.kernel}, "sm_90a") == "");
  CHECK_THAT(cubin_problem(fake_elf(c.kernel), {c.kernel}, "sm_90a"), Catch::Contains("section header"));
  CHECK_THAT(cubin_problem(c.cubin, {"_Z5otherv"}, "sm_90a"), Catch::Contains("no kernel _Z5otherv"));
  CHECK_THAT(cubin_problem(c.cubin, {c.kernel}, "sm_100a"), Catch::Contains("sm_90"));
  auto sm80 = nvrtc_compile({"tiny80.cu", "__global__ void kernel(unsigned* p) { *p = 1u; }\n", {"kernel"},
                             compile_options("sm_80"), nullptr});
  CHECK_THAT(cubin_problem(sm80.cubin, sm80.lowered_names, "sm_90a"), Catch::Contains("is for sm_80"));
  // Every truncation of a real cubin is rejected without reading past its end.
  for (std::size_t n : {std::size_t(0), std::size_t(63), std::size_t(64), c.cubin.size() / 2, c.cubin.size() - 1})
    CHECK_FALSE(cubin_problem(c.cubin.substr(0, n), {c.kernel}, "sm_90a").empty());
  CHECK(arch_sm("sm_90a") == 90);
  CHECK(arch_sm("compute_90") == -1);
}

TEST_CASE("entry digest: a fake ELF entry does not verify", "[cubin_elf]") {
  dsa_test::TempDir t;
  const dsa_test::TinyCubin c = dsa_test::tiny_cubin("fake");
  CacheEntry e;
  e.key = sha256_hex("fake");
  e.nvrtc_version = nvrtc_version();
  e.arch = "sm_90a";
  e.source_name = "fake.cu";
  e.kernels = {c.kernel};
  e.cubin = fake_elf(c.kernel);
  DiskCache d(t.path(), "", e.nvrtc_version);
  const std::string path = d.entry_path(t.path(), e.key);
  REQUIRE(std::system(fmt::format("mkdir -p -m 0700 '{}'", path.substr(0, path.rfind('/'))).c_str()) == 0);
  spit(path, serialize_entry(e));
  CHECK_FALSE(d.load(e.key));
  e.cubin = c.cubin;
  spit(path, serialize_entry(e));
  CHECK(d.load(e.key));
}

TEST_CASE("entry digest: a cubin or an entry copied from another variant does not verify", "[cubin_elf]") {
  dsa_test::TempDir t;
  EnvConfig cfg;
  cfg.cache_dir = t.path();
  cfg.log_level = LogLevel::quiet;
  Runtime rt(cfg);
  bool from_disk = false;
  // Two variants whose kernels have the same lowered names: only the key tells them apart.
  const CacheEntry h16 = rt.entry(ref_spec(16), &from_disk), h32 = rt.entry(ref_spec(32), &from_disk);
  REQUIRE(h16.kernels == h32.kernels);
  REQUIRE(h16.cubin != h32.cubin);
  const std::string p16 = rt.disk().entry_path(t.path(), h16.key), p32 = rt.disk().entry_path(t.path(), h32.key);
  const std::string good16 = slurp(p16), good32 = slurp(p32);
  const std::map<std::string, std::string> forged = {
      {"h32's cubin under h16's header", fix_up(header_of(good16), h16.key, body_of(good32))},
      {"h32's entry with its key line rewritten", fix_up(header_of(good32), h16.key, body_of(good32))},
  };
  for (const auto& [what, bytes] : forged) {
    INFO(what);
    spit(p16, bytes);
    CHECK_FALSE(rt.disk().load(h16.key));
    spit(p16, bytes);
    const uint64_t compiles = rt.stats().compiles;
    const CacheEntry got = rt.entry(ref_spec(16), &from_disk);
    CHECK_FALSE(from_disk);
    CHECK(rt.stats().compiles == compiles + 1);
    CHECK((got.cubin == h16.cubin));
    CHECK((slurp(p16) == good16));
    bool bad_listed = false;
    spit(p16, bytes);
    for (const auto& r : rt.disk().list()) bad_listed = bad_listed || (r.path == p16 && !r.ok);
    CHECK(bad_listed);
    spit(p16, good16);
  }
}
