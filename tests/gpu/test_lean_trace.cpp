// Measurements, run by hand (`dsa_gpu_tests "[lean_trace]"`; tools/gpu_session.sh trace): the
// phases of lean's loop from the kTrace variants' clock stamps (set_lean_trace,
// sm90_indexer_lean_args.cuh), on the headline shape (bf16 and FP8) and THD packings of short
// segments. Per consumer warpgroup, the mean SM cycles per KV tile spent waiting for the KV stage,
// for its turn in the ring, issuing the product, waiting for the product, in the epilogue, and
// between tiles; per item the wait for its Q and weights; the producer's waits for free KV
// stages and Q buffers. With DSA_TEST_TRACE_OUT set, each case's raw stamps are written there
// (NAME.bin: grid x kLeanTraceRoles x kLeanTraceWords little-endian u32).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "lean_cases.hpp"

using namespace dsa_gpu_test;
namespace ds = dsa_support;

namespace {

struct Phase {
  double sum = 0;
  int64_t n = 0;
  void add(uint32_t a, uint32_t b) {
    sum += static_cast<double>(static_cast<uint32_t>(b - a));  // (the 32-bit clock may wrap once)
    ++n;
  }
  double mean() const { return n ? sum / static_cast<double>(n) : 0.0; }
};

// One role's records of one CTA: {kind | i << 8, s1..s6, round}.
struct Records {
  const uint32_t* base;
  uint32_t n;
  Records(const std::vector<uint32_t>& words, int cta, int role)
      : base(words.data() + (static_cast<size_t>(cta) * dsa::kLeanTraceRoles + role) * dsa::kLeanTraceWords), n(base[0]) {}
  const uint32_t* at(uint32_t r) const { return base + 1 + r * dsa::kLeanTraceRecord; }
};

// set_lean_trace for a scope; none again whatever a check throws.
struct LeanTraceOn {
  explicit LeanTraceOn(void* words) { dsa_indexer::detail::set_lean_trace(static_cast<uint32_t*>(words)); }
  ~LeanTraceOn() { dsa_indexer::detail::set_lean_trace(nullptr); }
  LeanTraceOn(const LeanTraceOn&) = delete;
  LeanTraceOn& operator=(const LeanTraceOn&) = delete;
};

void summarize(const std::string& name, const std::vector<uint32_t>& words, int grid, int consumers) {
  std::printf("lean_trace %s: %d CTAs, %d consumers (SM cycles, mean per record)\n", name.c_str(), grid, consumers);
  for (int c = 0; c < consumers; ++c) {
    Phase kv, ring, issue, product, epi, between, period, qwait;
    int64_t items = 0;
    for (int cta = 0; cta < grid; ++cta) {
      const Records rec(words, cta, c);
      const uint32_t* last_tile = nullptr;
      for (uint32_t r = 0; r < rec.n; ++r) {
        const uint32_t* x = rec.at(r);
        const uint32_t kind = x[0] & 0xffu;
        if (kind == dsa::kLeanTraceItem) {
          qwait.add(x[1], x[2]);
          ++items;
          last_tile = nullptr;  // (the gap across an item boundary is the Q wait's)
          continue;
        }
        if (kind != dsa::kLeanTraceTile) continue;
        kv.add(x[1], x[2]);
        ring.add(x[2], x[3]);
        issue.add(x[3], x[4]);
        product.add(x[4], x[5]);
        epi.add(x[5], x[6]);
        if (last_tile) {
          between.add(last_tile[6], x[1]);
          period.add(last_tile[1], x[1]);
        }
        last_tile = x;
      }
    }
    std::printf("  consumer %d: %lld tiles, %lld items; per tile: KV wait %.0f, ring wait %.0f, issue %.0f, product wait %.0f, "
                "epilogue %.0f, between tiles %.0f, period %.0f; per item: Q and weights wait %.0f\n",
                c, static_cast<long long>(kv.n), static_cast<long long>(items), kv.mean(), ring.mean(), issue.mean(), product.mean(),
                epi.mean(), between.mean(), period.mean(), qwait.mean());
  }
  Phase kv_load, q_load;
  for (int cta = 0; cta < grid; ++cta) {
    const Records rec(words, cta, dsa::kLeanTraceProducer);
    for (uint32_t r = 0; r < rec.n; ++r) {
      const uint32_t* x = rec.at(r);
      const uint32_t kind = x[0] & 0xffu;
      if (kind == dsa::kLeanTraceKv) kv_load.add(x[1], x[2]);
      if (kind == dsa::kLeanTraceQ) q_load.add(x[1], x[2]);
    }
  }
  std::printf("  producer: %lld KV loads, waits for a free stage %.0f; %lld Q loads, waits for a free Q buffer %.0f\n",
              static_cast<long long>(kv_load.n), kv_load.mean(), static_cast<long long>(q_load.n), q_load.mean());
}

// The lean call of p without stamps, then twice with them (the first compiles the kTrace variant;
// the second's stamps are kept), every output bitwise the unstamped call's.
void trace_case(const std::string& name, HostProblem p, uint64_t seed) {
  namespace dd = dsa_indexer::detail;
  ds::fill_random(p, seed);
  auto dp = ds::upload(p);
  dp.opt.family = KernelFamily::lean;
  const int grid = dd::device_info(0).sm_count;  // (lean's grid: at most one CTA per SM)
  const size_t words = static_cast<size_t>(grid) * dsa::kLeanTraceRoles * dsa::kLeanTraceWords;
  ds::DeviceBuffer buf(words * 4);
  const auto plain = ds::run(p, dp, KernelFamily::lean);
  ds::GpuResult traced, again;
  {
    LeanTraceOn on(buf.get());
    traced = ds::run(p, dp, KernelFamily::lean);
    buf.fill_u32(0u);
    again = ds::run(p, dp, KernelFamily::lean);
  }
  // the stamps change no output bit
  CHECK(differing_cells(plain.scores, traced.scores) == 0);
  CHECK(differing_cells(plain.scores, again.scores) == 0);
  std::vector<uint32_t> host(words);
  buf.download(host.data(), words * 4);
  const int consumers = planned_lean_consumers(dp);
  summarize(name, host, grid, consumers);
  if (const char* dir = std::getenv("DSA_TEST_TRACE_OUT")) {
    std::ofstream f(std::string(dir) + "/" + name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(words * 4));
  }
}

}  // namespace

TEST_CASE("lean phase stamps: the headline (bf16, FP8) and THD with short segments", "[.][lean_trace]") {
  HostProblem head = bshd(1, 8192, 4096, 64, 2);
  head.sm_scale = 0.125f;
  trace_case("bf16_headline", head, 70001);
  HostProblem f8 = head;
  f8.fp8 = true;
  f8.fp8_q_scale = true;
  f8.fp8_k_scale = true;
  trace_case("fp8_headline", f8, 70002);
  // bench's "thd H64 r4 8 segs T_q 8192": windows of at most 525 keys, about 3 KV tiles per item
  const std::vector<int32_t> lq = {1500, 700, 2100, 300, 1200, 900, 1100, 392};
  std::vector<int32_t> lk;
  for (int32_t s : lq) lk.push_back(s / 4);
  trace_case("thd_r4_8segs", thd(lq, lk, 64, 4), 70003);
  {
    LeanFree free_running;  // bench's leanf
    trace_case("thd_r4_8segs_free", thd(lq, lk, 64, 4), 70003);
  }
}
