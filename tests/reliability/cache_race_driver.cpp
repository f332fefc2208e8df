// One process of the multi-process cache race (docs/RELIABILITY.md, item 1): fetches the cubins
// of four cheap reference-family variants through detail::Runtime::entry over the cache
// directory given on the command line, checks each one, and prints one line per entry:
//   entry <shape key> <disk key> <1 if it came from disk, else 0> <sha256 of the cubin>
// Exit status 0 when every check passed, 1 otherwise (the message says which), 2 on bad usage.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "families/sm90_indexer_reference.hpp"
#include "jit/disk_cache.hpp"
#include "jit/runtime.hpp"
#include "core/sha256.hpp"

using namespace dsa_indexer::detail;

namespace {

// Four distinct keys that compile in ~0.15 s each (heads and W dtype differ).
std::vector<KernelSpec> race_specs() {
  std::vector<KernelSpec> v;
  const struct {
    int heads;
    dsa_indexer::DType w;
  } picks[] = {{16, dsa_indexer::DType::bf16}, {32, dsa_indexer::DType::bf16},
               {64, dsa_indexer::DType::f32}, {16, dsa_indexer::DType::f32}};
  for (const auto& p : picks) {
    v.push_back(reference_spec(p.heads, p.w, false, Layout::bshd));
  }
  return v;
}

int usage() {
  std::fprintf(stderr, "usage: dsa_cache_race_driver --cache-dir DIR [--expect disk|any] [--wait-fd N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, expect = "any";
  int wait_fd = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--cache-dir") dir = argv[++i];
    else if (a == "--expect") expect = argv[++i];
    else if (a == "--wait-fd") wait_fd = std::atoi(argv[++i]);
    else return usage();
  }
  if (dir.empty() || (expect != "disk" && expect != "any")) return usage();
  // The start barrier: the runner closes the write end once every process exists, so all of
  // them reach the empty cache at the same moment.
  if (wait_fd >= 0) {
    char c;
    while (::read(wait_fd, &c, 1) > 0) {
    }
    ::close(wait_fd);
  }
  EnvConfig cfg;
  cfg.cache_dir = dir;
  cfg.disk_cache = true;
  int failures = 0;
  try {
    Runtime rt(cfg);
    for (const KernelSpec& spec : race_specs()) {
      bool from_disk = false;
      const CacheEntry e = rt.entry(spec, &from_disk);
      std::string problem = cubin_problem(e.cubin, e.kernels);
      if (problem.empty() && (e.kernels.size() != 1 || e.kernels[0].find("sm90_indexer_reference_scores") == std::string::npos))
        problem = fmt::format("unexpected kernel names ({} names, first '{}')", e.kernels.size(),
                              e.kernels.empty() ? "" : e.kernels[0]);
      if (problem.empty() && expect == "disk" && !from_disk) problem = "compiled, expected a disk-cache hit";
      if (!problem.empty()) {
        std::fprintf(stderr, "race driver %d: %s: %s\n", static_cast<int>(::getpid()), spec.shape_key().c_str(), problem.c_str());
        ++failures;
      }
      std::printf("entry %s %s %d %s\n", spec.shape_key().c_str(), e.key.c_str(), from_disk ? 1 : 0,
                  sha256_hex(e.cubin).c_str());
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "race driver %d: %s\n", static_cast<int>(::getpid()), ex.what());
    return 1;
  }
  return failures ? 1 : 0;
}
