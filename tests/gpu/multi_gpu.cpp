// Two or more GPUs in one process: per-device caches, contexts and launches. Every visible
// device runs its own problem on its own stream from its own thread, then one thread
// alternates devices; results are held against the fp64 oracle and the cache counters show one
// module per device. Fewer than two Hopper devices: reported skipped (77).
#include <cstdio>
#include <thread>

#include "cuda/driver.hpp"
#include "gpu_cases.hpp"
#include "jit/runtime.hpp"

namespace dd = dsa_indexer::detail;
using namespace dsa_gpu_test;

namespace {

int check_one(int device, uint64_t seed, CUstream stream, const char* how) {
  HostProblem p = bshd(2, 300 + device * 37, 500, 64, 2);
  p.lse = true;
  p.offsets = {5, static_cast<int32_t>(device)};
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p, device);
  dp.opt.family = KernelFamily::generic;
  dp.out.fill_u32(dsa_support::kPoison);
  dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, stream);
  {
    dd::ScopedContext ctx(device);
    DSA_CU(cuStreamSynchronize(stream));
  }
  std::vector<float> got(static_cast<size_t>(p.rows() * p.cols()));
  dp.out.download(got.data(), got.size() * 4);
  auto ref = dsa_support::oracle_scores(p);
  auto c = dsa_support::compare(got.data(), ref.data(), static_cast<int64_t>(ref.size()), p.cols());
  std::printf("%s device %d: rel-L2 %.3e, -inf mismatches %lld, non-finite %lld\n", how, device, c.rel_l2,
              static_cast<long long>(c.pattern_mismatch), static_cast<long long>(c.non_finite));
  return c.ok(kScoreTol) ? 0 : 1;
}

}  // namespace

int main() {
  std::string why;
  if (!dsa_support::gpu_available(&why)) {
    std::printf("SKIPPED: no usable Hopper GPU (%s)\n", why.c_str());
    return 77;
  }
  const int n = dd::device_count();
  int hopper = 0;
  for (int d = 0; d < n; ++d) hopper += dd::device_info(d).cc_major == 9;
  if (n < 2 || hopper != n) {
    std::printf("SKIPPED: needs two or more Hopper GPUs, found %d device(s)\n", n);
    return 77;
  }
  int failures = 0;
  const auto before = dsa_indexer::kernel_cache_stats();
  std::vector<CUstream> streams(n);
  for (int d = 0; d < n; ++d) {
    dd::ScopedContext ctx(d);
    DSA_CU(cuStreamCreate(&streams[d], CU_STREAM_NON_BLOCKING));
  }
  std::vector<int> rc(n, 0);
  std::vector<std::thread> th;
  for (int d = 0; d < n; ++d) th.emplace_back([&, d] { rc[d] = check_one(d, 100 + d, streams[d], "thread-per-device"); });
  for (auto& t : th) t.join();
  for (int r : rc) failures += r;
  const auto mid = dsa_indexer::kernel_cache_stats();
  std::printf("modules loaded: %llu (expected %d, one per device)\n", static_cast<unsigned long long>(mid.misses - before.misses), n);
  if (mid.misses - before.misses != static_cast<uint64_t>(n)) ++failures;
  for (int round = 0; round < 2; ++round)
    for (int d = 0; d < n; ++d) failures += check_one(d, 200 + round * n + d, streams[d], "alternating");
  const auto after = dsa_indexer::kernel_cache_stats();
  std::printf("modules loaded while alternating: %llu (expected 0)\n", static_cast<unsigned long long>(after.misses - mid.misses));
  if (after.misses != mid.misses) ++failures;
  std::printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
