// indexer_topk on the GPU: for every row, the selection of the scores indexer_forward returns
// (bitwise the same values), held against the CPU reference selection (tests/support/
// topk_reference.hpp) on those scores. Fresh random inputs, poisoned outputs, constructed ties
// (repeated key rows, zero weights), short and empty rows, offsets near INT32_MAX and negative,
// ratio 1/2/4, BSHD B 1-3, THD local and global indices, bf16 and fp32 W, every k of the
// contract's list, run to run bitwise.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>

#include "dsa_indexer/topk.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "sm90_topk_fused_args.cuh"
#include "cuda/driver.hpp"
#include "gpu_cases.hpp"
#include "gpu_runner.hpp"
#include "topk_run.hpp"
#include "../support/topk_reference.hpp"

using namespace dsa_gpu_test;
namespace ds = dsa_support;

namespace {

// The scores (local columns) through the generic family, then every row's reference selection.
void check_topk(HostProblem p, uint64_t seed, const std::vector<int>& ks, bool mutate_ties = false) {
  if (p.thd()) {
    p.layout = Layout::thd_local;
    p.finalize_thd_defaults();
  }
  ds::fill_random(p, seed);
  if (mutate_ties) {
    // Repeated key rows (equal scores across columns) and zero weights on some rows (all-zero
    // scores: every visible column ties).
    const int64_t D = 128;
    const int64_t kr = p.t_k();
    for (int64_t j = 0; j + 3 < kr; j += 5) std::memcpy(&p.k[(j + 3) * D], &p.k[j * D], D * 2);
    for (int64_t r = 0; r < p.rows(); r += 7)
      for (int h = 0; h < p.heads; ++h) {
        p.w_bf16[r * p.heads + h] = 0;
        p.w_f32v[r * p.heads + h] = 0.0f;
      }
  }
  INFO(p.describe());
  auto dp = ds::upload(p, 0, true);
  const ds::GpuResult scores = ds::run(p, dp, KernelFamily::generic);
  const int64_t cols = p.cols();
  for (int k : ks)
    for (bool sorted : {false, true})
      for (bool global : {false, true}) {
        INFO("k " << k << " sorted " << sorted << " global " << global);
        const TopkOut g = run_topk(p, dp, k, {KernelFamily::automatic, sorted, global, /*workspace=*/global, /*lse=*/true});
        int64_t bad_idx = 0, bad_val = 0, bad_sm = 0, bad_lse = 0;
        std::string first;
        for (int64_t r = 0; r < p.rows(); ++r) {
          int64_t lo = 0, hi = 0;
          ds::row_window(p, r, &lo, &hi);
          int32_t bias = 0;
          if (global) {
            if (p.thd()) {
              int64_t b = 0;
              while (p.cu_q[b + 1] <= r) ++b;
              bias = p.cu_k[b];
            } else {
              bias = static_cast<int32_t>((r / p.s_q) * p.s_k);
            }
          }
          const auto ref = dsa_test::topk_reference(&scores.scores[r * cols], static_cast<int32_t>(lo), static_cast<int32_t>(hi),
                                                    bias, k, sorted);
          for (int s = 0; s < k; ++s) {
            const size_t at = static_cast<size_t>(r * k + s);
            if (g.indices[at] != ref.indices[s] && bad_idx++ == 0)
              first = fmt::format("row {} slot {}: index {} expected {}", r, s, g.indices[at], ref.indices[s]);
            if (std::memcmp(&g.values[at], &ref.values[s], 4) != 0 && bad_val++ == 0 && first.empty())
              first = fmt::format("row {} slot {}: value {} expected {}", r, s, g.values[at], ref.values[s]);
            if (!dsa_test::topk_close(g.softmax[at], ref.softmax[s], 1e-5) && bad_sm++ == 0 && first.empty())
              first = fmt::format("row {} slot {}: softmax {} expected {}", r, s, g.softmax[at], ref.softmax[s]);
          }
          if (!dsa_test::topk_close(g.lse[r], ref.lse, 1e-6) && bad_lse++ == 0 && first.empty())
            first = fmt::format("row {}: lse {} expected {}", r, g.lse[r], ref.lse);
        }
        INFO(first);
        CHECK(bad_idx == 0);
        CHECK(bad_val == 0);
        CHECK(bad_sm == 0);
        CHECK(bad_lse == 0);
        // Run to run, and with or without a caller-owned workspace: the same bits.
        const TopkOut again = run_topk(p, dp, k, {KernelFamily::automatic, sorted, global, /*workspace=*/!global, /*lse=*/true});
        CHECK(again.indices == g.indices);
        CHECK(std::memcmp(again.values.data(), g.values.data(), g.values.size() * 4) == 0);
        CHECK(std::memcmp(again.softmax.data(), g.softmax.data(), g.softmax.size() * 4) == 0);
      }
  std::printf("topk case %-90s passed\n", p.describe().c_str());
}

// Device-event time of a whole indexer_topk call (indices only), ms of the second of two calls
// (the first compiles and warms), on the default stream: the hand-run timing cases below.
class TopkCallTimer {
 public:
  TopkCallTimer() : d_(dsa_indexer::detail::Driver::get()) {
    d_.check(d_.cuEventCreate(&e0_, CU_EVENT_DEFAULT), "cuEventCreate");
    d_.check(d_.cuEventCreate(&e1_, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~TopkCallTimer() {
    d_.cuEventDestroy(e0_);
    d_.cuEventDestroy(e1_);
  }
  TopkCallTimer(const TopkCallTimer&) = delete;
  TopkCallTimer& operator=(const TopkCallTimer&) = delete;
  float operator()(const ds::DeviceProblem& dp, const dsa_indexer::TensorDesc& indices, int k, KernelFamily fam) const {
    dsa_indexer::IndexerOptions o = dp.opt;
    o.family = fam;
    dsa_indexer::TopkOptions t;
    t.k = k;
    float ms = 0;
    for (int i = 0; i < 2; ++i) {
      d_.check(d_.cuEventRecord(e0_, nullptr), "cuEventRecord");
      dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, indices, o, t, nullptr);
      d_.check(d_.cuEventRecord(e1_, nullptr), "cuEventRecord");
      d_.check(d_.cuEventSynchronize(e1_), "cuEventSynchronize");
      d_.check(d_.cuEventElapsedTime(&ms, e0_, e1_), "cuEventElapsedTime");
    }
    return ms;
  }

 private:
  dsa_indexer::detail::Driver& d_;
  CUevent e0_ = nullptr, e1_ = nullptr;
};

}  // namespace

TEST_CASE("topk: BSHD small shapes, every k, ties, short and empty rows", "[topk]") {
  check_topk(bshd(1, 64, 200, 64, 1), 101, {1, 7, 64, 512, 2048});
  check_topk(bshd(2, 40, 300, 32, 2), 102, {1, 64, 2048});
  check_topk(bshd(3, 24, 130, 16, 4), 103, {7, 64});
  check_topk(bshd(2, 64, 256, 64, 1), 104, {1, 7, 64, 200}, /*ties=*/true);
  HostProblem f = bshd(1, 48, 160, 64, 2);
  f.w_f32 = true;
  check_topk(f, 105, {7, 64});
}

TEST_CASE("topk: offsets near INT32_MAX and negative", "[topk]") {
  HostProblem a = bshd(2, 32, 300, 64, 1);
  a.offsets = {INT32_MAX - 40, -20};
  check_topk(a, 111, {1, 64, 512});
  HostProblem b = bshd(2, 32, 300, 64, 4);
  b.offsets = {INT32_MAX - 5, 1000};
  check_topk(b, 112, {7, 2048});
}

TEST_CASE("topk: THD local and global indices", "[topk]") {
  HostProblem p = thd({3, 5, 1, 13, 2, 40}, {100, 7, 1, 64, 65, 129}, 64, 1);
  p.offsets = {97, 2, 0, 51, 63, 89};
  check_topk(p, 121, {1, 7, 64, 2048});
  HostProblem q = thd({17, 0, 33, 9}, {40, 5, 300, 0}, 32, 2);
  check_topk(q, 122, {7, 64}, /*ties=*/true);
  // A saturated packing (356 q-tiles in one block, T_q a multiple of 8): its block's scores by
  // lean's row-windows variant (topk_lean_window_blocks, the default) and by generic, each
  // against the reference selection of generic's scores (values bitwise).
  HostProblem s = thd({1500, 37, 1300, 11}, {1500, 40, 1300, 15}, 64, 1);
  s.offsets = {0, 3, 0, 4};
  check_topk(s, 123, {64, 2048});
  dsa_indexer::detail::set_topk_lean_window_blocks(false);
  check_topk(s, 123, {64, 2048});
  dsa_indexer::detail::set_topk_lean_window_blocks(std::nullopt);
}

TEST_CASE("topk: a saturated shape, several row blocks", "[topk]") {
  // S_q 2304 over 1056-row blocks: three blocks per batch entry, the last one partial.
  HostProblem p = bshd(2, 2304, 4096, 64, 4);
  check_topk(p, 131, {2048, 512});
  // The second block's first row passes INT32_MAX: its causal offset saturates (exact, since
  // S_k * ratio <= 2^31) and every row of it sees all keys.
  HostProblem sat = bshd(1, 2200, 300, 64, 1);
  sat.offsets = {INT32_MAX - 1500};
  check_topk(sat, 133, {64});
  HostProblem t = thd({1500, 700, 900}, {6000, 200, 3000}, 64, 1);
  t.offsets = {4500, -100, 2100};
  check_topk(t, 132, {2048});
}

// The short-row selection (sm90_topk_select_short, set_topk_select_short) through the whole
// path: BSHD rows of at most 4096 keys (S_k 4096 at ratio 4, several blocks; ties; offsets) and
// THD segments within 4093 keys, each against the reference selection.
TEST_CASE("topk: the short-row selection through the whole path", "[topk][topk_short]") {
  dsa_indexer::detail::set_topk_select_short(true);
  check_topk(bshd(1, 64, 200, 64, 1), 151, {1, 7, 64, 512, 2048});
  check_topk(bshd(2, 64, 256, 64, 1), 152, {1, 7, 64, 200}, /*ties=*/true);
  HostProblem o = bshd(2, 32, 300, 64, 4);
  o.offsets = {INT32_MAX - 5, 1000};
  check_topk(o, 153, {7, 2048});
  check_topk(bshd(2, 2304, 4096, 64, 4), 154, {2048, 512});
  HostProblem t = thd({1500, 700, 900}, {4000, 200, 3000}, 64, 1);
  t.offsets = {2500, -100, 2100};
  check_topk(t, 155, {64, 2048});
  dsa_indexer::detail::set_topk_select_short(std::nullopt);
}

// The 8-word short-row selection (set_topk_select_medium; rows of 4097..8192 keys) through the
// whole path: BSHD S_k 8192 (several blocks) and 6000, THD segments within 8189 keys.
TEST_CASE("topk: the 8-word short-row selection through the whole path", "[topk][topk_short]") {
  dsa_indexer::detail::set_topk_select_medium(true);
  check_topk(bshd(1, 2304, 8192, 64, 4), 156, {2048, 512});
  HostProblem b = bshd(2, 64, 6000, 64, 1);
  b.offsets = {5900, 100};
  check_topk(b, 157, {1, 64, 2048}, /*ties=*/true);
  HostProblem t = thd({1500, 700, 900}, {8000, 200, 5000}, 64, 1);
  t.offsets = {6500, -100, 4100};
  check_topk(t, 158, {64, 2048});
  dsa_indexer::detail::set_topk_select_medium(std::nullopt);
}

// The register rows (set_topk_select_regs: in long-row launches, the rows of at most 8192 cells
// from registers, the others by the general kernel, in two launches) through the whole path, with
// rows on both sides of 8192 cells: BSHD S_k 16384 (rows of 7901..8412 keys) and THD segments of
// up to 9000 keys, against the reference selection.
TEST_CASE("topk: the register rows through the whole path", "[topk][topk_short][topk_regs]") {
  dsa_indexer::detail::set_topk_select_regs(true);
  HostProblem l = bshd(1, 512, 16384, 64, 1);
  l.offsets = {7900};
  check_topk(l, 163, {7, 2048});
  HostProblem t = thd({1500, 700, 900}, {9000, 200, 8300}, 64, 1);
  t.offsets = {7400, -100, 7300};
  check_topk(t, 164, {64, 2048});
  dsa_indexer::detail::set_topk_select_regs(std::nullopt);
}

namespace {
// A selection choice that may change the block size only where no output depends on it (calls
// without softmax and lse): `set(false)` and `set(true)` give bitwise the same indices and values,
// and with softmax (where the choice is not taken) every output; k 7 and 2048, both orders.
void check_block_size_free(HostProblem& p, uint64_t seed, const std::function<void(bool)>& set) {
  ds::fill_random(p, seed);
  auto dp = ds::upload(p, 0, true);
  for (int k : {7, 2048})
    for (bool sorted : {false, true})
      for (bool softmax : {false, true}) {
        INFO(p.describe() << " k " << k << " sorted " << sorted << " softmax " << softmax);
        TopkRunOptions ro;
        ro.sorted = sorted;
        ro.softmax = softmax;
        ro.family = KernelFamily::topk_unfused;
        set(false);
        const TopkOut wide = run_topk(p, dp, k, ro);
        set(true);
        const TopkOut narrow = run_topk(p, dp, k, ro);
        CHECK(std::memcmp(wide.indices.data(), narrow.indices.data(), wide.indices.size() * 4) == 0);
        CHECK(std::memcmp(wide.values.data(), narrow.values.data(), wide.values.size() * 4) == 0);
        if (softmax) CHECK(std::memcmp(wide.softmax.data(), narrow.softmax.data(), wide.softmax.size() * 4) == 0);
        CHECK(std::count(narrow.indices.begin(), narrow.indices.end(), static_cast<int32_t>(ds::kPoison)) == 0);
      }
}
}  // namespace

// The narrow register rows (set_topk_select_regs_narrow: in a register-rows selection of a call
// without softmax and lse, the rows of at most 4096 cells by sm90_topk_select_short<256> first)
// against the register rows at 512 threads, on THD packings: without offsets (rows of at most 3000
// keys: the 256-thread launch alone), with offsets (rows past 7300 keys: the other two), and a
// packing whose segments start at columns 1001 and 8003 of their block (alignment offsets), with
// rows of 4001..5500 keys (across 1024 words) and 8101..8400 (across 2048 words).
TEST_CASE("topk: the narrow register rows, bitwise the 512-thread ones", "[topk][topk_regs]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_select_regs(true);
  HostProblem a = thd({1500, 700, 900}, {9000, 200, 8300}, 64, 1);
  HostProblem b = a;
  b.offsets = {7400, -100, 7300};
  HostProblem c = thd({3000, 2000}, {3000, 9100}, 64, 1);
  HostProblem d = thd({1000, 1500, 300}, {1001, 7002, 9000}, 64, 1);
  d.offsets = {0, 4000, 8100};
  uint64_t seed = 170;
  for (HostProblem* p : {&a, &b, &c, &d}) {
    p->layout = Layout::thd_local;
    p->finalize_thd_defaults();
    check_block_size_free(*p, seed++, [](bool on) { dd::set_topk_select_regs_narrow(on); });
  }
  dd::set_topk_select_regs_narrow(std::nullopt);
  dd::set_topk_select_regs(std::nullopt);
}

// Long rows by 256 threads (set_topk_select_narrow_long: a long-row selection outside the register
// rows, in a call without softmax and lse, by sm90_topk_select<256>) against the 512-thread
// kernel: BSHD rows past 8192 keys (every row: the register rows' policy does not take them), B 2
// at S_k 20000, and short rows in a long launch with the register rows off.
TEST_CASE("topk: long rows by 256 threads, bitwise the 512-thread ones", "[topk][topk_narrow_long]") {
  namespace dd = dsa_indexer::detail;
  HostProblem a = bshd(1, 512, 16384, 64, 1);
  a.offsets = {12000};  // rows of 12001..12512 keys
  HostProblem b = bshd(2, 300, 20000, 64, 1);
  b.offsets = {19000, 15000};
  HostProblem c = bshd(1, 256, 9000, 64, 1);
  c.offsets = {100};  // rows of 101..356 keys in a launch of width 9000
  uint64_t seed = 180;
  for (HostProblem* p : {&a, &b, &c}) {
    dd::set_topk_select_regs(p == &c ? std::optional<bool>(false) : std::nullopt);
    check_block_size_free(*p, seed++, [](bool on) { dd::set_topk_select_narrow_long(on); });
  }
  dd::set_topk_select_narrow_long(std::nullopt);
  dd::set_topk_select_regs(std::nullopt);
}

// Rows of 4097..8192 cells by the narrow register rows (set_topk_select_regs_mid: a selection of
// width 4097..8192 in a call without softmax and lse takes the three register-rows launches)
// against the general 256-thread kernel: BSHD rows of 4001..4512 keys, B 2 at S_k 6000 (rows on
// both sides of 4096), THD segments within 8000 keys.
TEST_CASE("topk: rows of 4097 to 8192 cells by the register rows, bitwise the general kernel", "[topk][topk_regs_mid]") {
  namespace dd = dsa_indexer::detail;
  HostProblem a = bshd(1, 512, 8192, 64, 1);
  a.offsets = {4000};
  HostProblem b = bshd(2, 300, 6000, 64, 1);
  b.offsets = {5800, 3000};
  HostProblem c = thd({1500, 700, 900}, {8000, 200, 5000}, 64, 1);
  c.offsets = {6500, -100, 4100};
  c.layout = Layout::thd_local;
  c.finalize_thd_defaults();
  uint64_t seed = 190;
  for (HostProblem* p : {&a, &b, &c}) check_block_size_free(*p, seed++, [](bool on) { dd::set_topk_select_regs_mid(on); });
  dd::set_topk_select_regs_mid(std::nullopt);
}

// FP8 (e4m3) q and k with their scales (issue 22): the unfused path's blocks take the FP8 score
// families (generic FP8, and lean FP8 and its split variant at the saturated shape), and the
// selection must be exactly the reference selection of generic FP8's scores of the whole call.
TEST_CASE("topk: FP8 inputs select exactly from the FP8 scores", "[topk][fp8]") {
  HostProblem a = fp8_inputs(bshd(2, 300, 700, 64, 2), true, true);
  a.offsets = {400, -3};
  check_topk(a, 141, {1, 64, 512});
  HostProblem t = fp8_inputs(thd({1500, 700, 900}, {6000, 200, 3000}, 64, 1), false, true, false);
  t.offsets = {4500, -100, 2100};
  check_topk(t, 142, {2048});
  check_topk(fp8_inputs(bshd(1, 2304, 4096, 64, 4), true, false), 143, {2048, 512});
}

// Timing of the unfused path on the shapes of issue 20's table (device events, median of 7, k
// 2048, rows ending at S_k): the scores alone (automatic: lean where it applies) into the whole
// matrix, and indexer_topk with a caller-owned workspace; memory is the scores matrix against the
// top-k workspace plus outputs. Run by hand: `dsa_gpu_tests "[topk_perf]"`.
TEST_CASE("topk: timing of the unfused path", "[.][topk_perf]") {
  struct Shape {
    int64_t sq, sk, ratio;
  } shapes[] = {{8192, 16384, 1}, {8192, 32768, 1}, {8192, 65536, 1}, {4096, 131072, 1}, {16384, 4096, 4}};
  auto& d = dsa_indexer::detail::Driver::get();
  dsa_indexer::detail::ScopedContext ctx(0);
  for (const Shape& s : shapes) {
    HostProblem p = bshd(1, s.sq, s.sk, 64, s.ratio);
    if (s.ratio == 1) p.offsets = {static_cast<int32_t>(s.sk - s.sq - 1)};
    ds::fill_random(p, 7);
    auto dp = ds::upload(p, 0, true);
    CUevent e0, e1;
    d.check(d.cuEventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate");
    d.check(d.cuEventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate");
    auto time = [&](auto&& f) {
      f();
      ds::sync_device();
      std::vector<float> ms;
      for (int i = 0; i < 7; ++i) {
        d.check(d.cuEventRecord(e0, nullptr), "cuEventRecord");
        f();
        d.check(d.cuEventRecord(e1, nullptr), "cuEventRecord");
        d.check(d.cuEventSynchronize(e1), "cuEventSynchronize");
        float t = 0;
        d.check(d.cuEventElapsedTime(&t, e0, e1), "cuEventElapsedTime");
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return ms[3];
    };
    dp.opt.family = KernelFamily::automatic;
    const float t_scores = time([&] { dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, nullptr); });
    const int k = 2048;
    ds::DeviceBuffer ind(static_cast<size_t>(s.sq) * k * 4), val(static_cast<size_t>(s.sq) * k * 4);
    dsa_indexer::TopkOptions t;
    t.k = k;
    t.values = dsa_indexer::TensorDesc::contiguous(val.get(), dsa_indexer::DType::f32, {1, s.sq, k});
    const auto ti = dsa_indexer::TensorDesc::contiguous(ind.get(), dsa_indexer::DType::i32, {1, s.sq, k});
    // Each path with its own caller-owned workspace (sized for that path alone).
    auto path = [&](KernelFamily fam, size_t* ws_out) {
      dsa_indexer::IndexerOptions o = dp.opt;
      o.family = fam;
      dsa_indexer::TopkOptions tt = t;
      const size_t ws_bytes = dsa_indexer::indexer_topk_workspace_size(dp.tq, dp.tk, dp.tw, ti, o, tt);
      ds::DeviceBuffer ws(ws_bytes);
      tt.workspace = ws.get();
      tt.workspace_bytes = ws_bytes;
      *ws_out = ws_bytes;
      return time([&] { dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, ti, o, tt, nullptr); });
    };
    size_t ws_unfused = 0, ws_fused = 0;
    const float t_topk = path(KernelFamily::topk_unfused, &ws_unfused);
    const float t_fused = path(KernelFamily::topk_fused, &ws_fused);
    {
      // one more fused call, counting the sampled sweep's rows by how they ended
      ds::DeviceBuffer counters(dsa::kLeanTopkStats * 4);
      counters.fill_u32(0u);
      dsa_indexer::detail::set_topk_fused_stats(static_cast<uint32_t*>(counters.get()));
      size_t ws_bytes = 0;
      path(KernelFamily::topk_fused, &ws_bytes);  // (timing: every call of it counts)
      dsa_indexer::detail::set_topk_fused_stats(nullptr);
      uint32_t st[dsa::kLeanTopkStats] = {};
      counters.download(st, sizeof st);
      const double calls = 8.0;  // time(): one warm-up and 7 timed calls
      const double rows = (double(st[0]) + st[1] + st[2] + st[3] + st[4]) / calls;
      std::printf("topk_perf S_q %6lld S_k %6lld: sampled sweep rows per call %.0f: cut %.0f, not cut %.0f, failed by overflow "
                  "%.0f, sample %.0f, below k %.0f; entries kept per row %.0f (buffer %lld)\n",
                  static_cast<long long>(s.sq), static_cast<long long>(s.sk), rows, st[dsa::kLeanTopkStatCut] / calls,
                  st[dsa::kLeanTopkStatUncut] / calls, st[dsa::kLeanTopkStatOverflow] / calls,
                  st[dsa::kLeanTopkStatBadSample] / calls, st[dsa::kLeanTopkStatBelowK] / calls,
                  rows > 0 ? st[dsa::kLeanTopkStatEntries] / calls / rows : 0.0,
                  static_cast<long long>(dsa_indexer::detail::topk_fused_candidates(k, s.sk)));
    }
    // one block of rows (one sweep launch: no tail per block), with the planned buffer and with
    // 12288 entries per row (past the candidates kernel's staging for the few rows that need it)
    for (const int64_t entries : {int64_t(0), int64_t(12288)}) {
      dsa_indexer::detail::set_topk_fused_budget(uint64_t(8) << 30);
      dsa_indexer::detail::set_topk_fused_candidates(entries);
      size_t ws_bytes = 0;
      const float t_one = path(KernelFamily::topk_fused, &ws_bytes);
      dsa_indexer::detail::set_topk_fused_candidates(0);
      dsa_indexer::detail::set_topk_fused_budget(0);
      std::printf("topk_perf S_q %6lld S_k %6lld: fused in one block, %lld entries per row: %.3f ms (%.3fx scores), workspace %.0f MiB\n",
                  static_cast<long long>(s.sq), static_cast<long long>(s.sk),
                  static_cast<long long>(entries ? entries : dsa_indexer::detail::topk_fused_candidates(k, s.sk)), t_one,
                  t_one / t_scores, ws_bytes / 1048576.0);
    }
    // the fused sweep's other settings: the exact sweep (session 13's, refresh 32), the sampled
    // cut at other margins
    for (const float other : {std::nanf(""), 3.0f, 8.0f}) {
      dsa_indexer::detail::set_topk_fused_margin(other);
      size_t ws_other = 0;  // (the margin sets the buffers: not the default call's workspace)
      const float t_fused_other = path(KernelFamily::topk_fused, &ws_other);
      dsa_indexer::detail::set_topk_fused_margin(std::nullopt);
      const std::string how = std::isnan(other) ? std::string("the exact sweep") : fmt::format("margin {:.0f}", other);
      std::printf("topk_perf S_q %6lld S_k %6lld: fused with %s: %.3f ms (%.3fx scores), workspace %.0f MiB\n",
                  static_cast<long long>(s.sq), static_cast<long long>(s.sk), how.c_str(), t_fused_other, t_fused_other / t_scores,
                  ws_other / 1048576.0);
    }
    const double scores_mib = double(s.sq) * s.sk * 4 / (1 << 20);
    const double out_mib = 2.0 * s.sq * k * 4 / (1 << 20);
    std::printf("topk_perf S_q %6lld S_k %6lld ratio %lld k %d: scores (auto) %.3f ms, unfused %.3f ms (%.3fx), fused %.3f ms "
                "(%.3fx scores, %.3fx unfused); score matrix %.0f MiB, workspace unfused %.0f MiB, fused %.0f MiB, outputs %.0f MiB\n",
                static_cast<long long>(s.sq), static_cast<long long>(s.sk), static_cast<long long>(s.ratio), k, t_scores, t_topk,
                t_topk / t_scores, t_fused, t_fused / t_scores, t_fused / t_topk, scores_mib, ws_unfused / 1048576.0,
                ws_fused / 1048576.0, out_mib);
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
  }
}

// Session 28: at S_q 2048 / S_k 262144 the fused path's time depended on the inputs (one of three
// N(0,1) input sets sent q-tiles to the exact redo, 1.7x the call). For input sets of several
// seeds (fill_random), one fused call each (k 2048 and 512) with the sampled sweep's row counters
// (set_topk_fused_stats): how many rows failed and how (overflow, bad sample, below k), and the
// call's time against the unfused path's on the same inputs. Run by hand:
// `dsa_gpu_tests "[topk_seeds]"`.
TEST_CASE("topk: the fused path's failed rows by input seed", "[.][topk_seeds]") {
  dsa_indexer::detail::ScopedContext ctx(0);
  const TopkCallTimer timer;
  const int64_t sq = 2048, sk = 262144;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    HostProblem p = bshd(1, sq, sk, 64, 1);
    p.offsets = {static_cast<int32_t>(sk - sq - 1)};
    ds::fill_random(p, seed);
    auto dp = ds::upload(p, 0, true);
    for (int k : {2048, 512}) {
      ds::DeviceBuffer ind(static_cast<size_t>(sq) * k * 4);
      const auto ti = dsa_indexer::TensorDesc::contiguous(ind.get(), dsa_indexer::DType::i32, {1, sq, k});
      auto once = [&](KernelFamily fam) { return timer(dp, ti, k, fam); };
      const float t_unfused = once(KernelFamily::topk_unfused);
      std::vector<int32_t> want(static_cast<size_t>(sq) * k), got(want.size());
      ind.download(want.data(), want.size() * 4);
      // the split redo (session 30, the default) with its launch's items by q-tiles: its time, and
      // its indices against the unfused path's
      // (the slots' orders and the join that cut: the redo pool off)
      dsa_indexer::detail::set_topk_fused_redo_pool(false);
      dsa_indexer::detail::set_topk_fused_redo_split(true);
      dsa_indexer::detail::set_topk_fused_redo_slot_items(false);
      const float t_split = once(KernelFamily::topk_fused);
      ind.download(got.data(), got.size() * 4);
      CHECK(got == want);
      // and by slots (set_topk_fused_redo_slot_items, the default since session 31)
      dsa_indexer::detail::set_topk_fused_redo_slot_items(true);
      const float t_slots = once(KernelFamily::topk_fused);
      ind.download(got.data(), got.size() * 4);
      CHECK(got == want);
      // and with the join that cuts (set_topk_fused_redo_join_cut: 16 chunks at k 2048)
      dsa_indexer::detail::set_topk_fused_redo_join_cut(true);
      const float t_cut = once(KernelFamily::topk_fused);
      dsa_indexer::detail::set_topk_fused_redo_join_cut(std::nullopt);
      ind.download(got.data(), got.size() * 4);
      CHECK(got == want);
      // and the redo pool (the default since session 33: every failed q-tile in 16 chunks, no
      // slots), its rows seeded with floors (session 33) and without
      dsa_indexer::detail::set_topk_fused_redo_pool(std::nullopt);
      dsa_indexer::detail::set_topk_fused_redo_slot_items(std::nullopt);
      dsa_indexer::detail::set_topk_fused_redo_split(std::nullopt);
      const float t_pool = once(KernelFamily::topk_fused);
      ind.download(got.data(), got.size() * 4);
      CHECK(got == want);
      dsa_indexer::detail::set_topk_fused_redo_seed(false);
      const float t_pool0 = once(KernelFamily::topk_fused);
      dsa_indexer::detail::set_topk_fused_redo_seed(std::nullopt);
      ind.download(got.data(), got.size() * 4);
      CHECK(got == want);
      ds::DeviceBuffer counters(dsa::kLeanTopkStats * 4);
      counters.fill_u32(0u);
      dsa_indexer::detail::set_topk_fused_stats(static_cast<uint32_t*>(counters.get()));
      dsa_indexer::detail::set_topk_fused_redo_split(false);  // the whole-row redo
      const float t_fused = once(KernelFamily::topk_fused);  // two calls counted
      dsa_indexer::detail::set_topk_fused_redo_split(std::nullopt);
      dsa_indexer::detail::set_topk_fused_stats(nullptr);
      uint32_t st[dsa::kLeanTopkStats] = {};
      counters.download(st, sizeof st);
      std::printf("topk_seeds S_q %lld S_k %lld seed %llu k %4d: fused %.3f ms, split redo %.3f ms (by slots %.3f, join cut "
                  "%.3f, pool %.3f, pool unseeded %.3f), unfused %.3f ms; rows per call: cut %u, not cut %u, failed by overflow %u, "
                  "sample %u, below k %u\n",
                  static_cast<long long>(sq), static_cast<long long>(sk), static_cast<unsigned long long>(seed), k, t_fused, t_split,
                  t_slots, t_cut, t_pool, t_pool0, t_unfused,
                  st[dsa::kLeanTopkStatCut] / 2, st[dsa::kLeanTopkStatUncut] / 2, st[dsa::kLeanTopkStatOverflow] / 2,
                  st[dsa::kLeanTopkStatBadSample] / 2, st[dsa::kLeanTopkStatBelowK] / 2);
      CHECK(st[dsa::kLeanTopkStatCut] + st[dsa::kLeanTopkStatUncut] + st[dsa::kLeanTopkStatOverflow] +
                st[dsa::kLeanTopkStatBadSample] + st[dsa::kLeanTopkStatBelowK] ==
            2u * static_cast<uint32_t>(sq));
    }
  }
}

// The split redo's launch order where a block's q-tiles are a multiple of the grid (S_q 2112: 264
// q-tiles, 2 x 132 SMs): by q-tiles a failed q-tile's chunks fall on one CTA, by slots
// (set_topk_fused_redo_slot_items) on as many CTAs as chunks. Margin 3 instead of 5 makes a few
// rows fail (the sample's cut at the Poisson(8) tail past 17 at k 2048: a few in a thousand
// rows). One call each after a first, ms: the whole-row redo, the split redo by q-tiles and by
// slots (8, the default, and 16; with the join that cuts), the redo pool, the unfused path; the rows that
// failed; indices bitwise the unfused path's. Run by hand:
// `dsa_gpu_tests "[topk_redo_skew]"` (gpu_session.sh s31a).
TEST_CASE("topk: the split redo's launch order on a block of 2 x 132 q-tiles", "[.][topk_redo_skew]") {
  namespace dd = dsa_indexer::detail;
  dd::ScopedContext ctx(0);
  const TopkCallTimer timer;
  const int64_t sq = 2112, sk = 262144;
  const int k = 2048;
  HostProblem p = bshd(1, sq, sk, 64, 1);
  p.offsets = {static_cast<int32_t>(sk - sq - 1)};
  ds::fill_random(p, 1);
  auto dp = ds::upload(p, 0, true);
  ds::DeviceBuffer ind(static_cast<size_t>(sq) * k * 4);
  const auto ti = dsa_indexer::TensorDesc::contiguous(ind.get(), dsa_indexer::DType::i32, {1, sq, k});
  auto once = [&](KernelFamily fam) { return timer(dp, ti, k, fam); };
  const float t_unfused = once(KernelFamily::topk_unfused);
  std::vector<int32_t> want(static_cast<size_t>(sq) * k), got(want.size());
  ind.download(want.data(), want.size() * 4);
  dd::set_topk_fused_margin(3.0f);
  ds::DeviceBuffer counters(dsa::kLeanTopkStats * 4);
  counters.fill_u32(0u);
  dd::set_topk_fused_stats(static_cast<uint32_t*>(counters.get()));
  dd::set_topk_fused_redo_split(false);
  const float t_whole = once(KernelFamily::topk_fused);  // (two calls counted)
  dd::set_topk_fused_stats(nullptr);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  dd::set_topk_fused_redo_pool(false);  // (the slots' orders and the join that cuts)
  dd::set_topk_fused_redo_split(true);
  dd::set_topk_fused_redo_slot_items(false);
  const float t_tiles = once(KernelFamily::topk_fused);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  dd::set_topk_fused_redo_slot_items(true);
  const float t_slots = once(KernelFamily::topk_fused);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  // by slots with 16 slots (every failed q-tile of the call split, if at most 16)
  dd::set_topk_fused_redo_slots(16);
  const float t_slots16 = once(KernelFamily::topk_fused);
  dd::set_topk_fused_redo_slots(0);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  // by slots with the join that cuts (16 chunks a q-tile)
  dd::set_topk_fused_redo_join_cut(true);
  const float t_cut = once(KernelFamily::topk_fused);
  dd::set_topk_fused_redo_join_cut(std::nullopt);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  // the redo pool (the default: every failed q-tile in 16 chunks over the SMs, no slots), its
  // rows seeded with floors and without
  dd::set_topk_fused_redo_pool(std::nullopt);
  const float t_pool = once(KernelFamily::topk_fused);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  dd::set_topk_fused_redo_seed(false);
  const float t_pool0 = once(KernelFamily::topk_fused);
  dd::set_topk_fused_redo_seed(std::nullopt);
  ind.download(got.data(), got.size() * 4);
  CHECK(got == want);
  dd::set_topk_fused_redo_slot_items(std::nullopt);
  dd::set_topk_fused_redo_split(std::nullopt);
  dd::set_topk_fused_margin(std::nullopt);
  uint32_t st[dsa::kLeanTopkStats] = {};
  counters.download(st, sizeof st);
  std::printf("topk_redo_skew S_q %lld S_k %lld k %d margin 3: whole-row redo %.3f ms, split by q-tiles %.3f ms, by slots "
              "%.3f ms (16 slots %.3f, join cut %.3f), redo pool %.3f ms (unseeded %.3f), unfused %.3f ms; failed rows per call: "
              "overflow %u, sample %u, below k %u\n",
              static_cast<long long>(sq), static_cast<long long>(sk), k, t_whole, t_tiles, t_slots, t_slots16, t_cut, t_pool, t_pool0,
              t_unfused,
              st[dsa::kLeanTopkStatOverflow] / 2, st[dsa::kLeanTopkStatBadSample] / 2, st[dsa::kLeanTopkStatBelowK] / 2);
}

// One scores call and one fused top-k call at S_q 8192 / S_k 16384 (k 2048), for a profiler to
// compare the lean scores kernel with the fused sweep of the same shape. Run by hand:
// `ncu --kernel-name regex:sm90_topk_fused_sweep dsa_gpu_tests "[topk_profile]"`.
TEST_CASE("topk: one scores and one fused call, for the profiler", "[.][topk_profile]") {
  HostProblem p = bshd(1, 8192, 16384, 64, 1);
  p.offsets = {16384 - 8192 - 1};
  ds::fill_random(p, 7);
  auto dp = ds::upload(p, 0, true);
  dp.opt.family = KernelFamily::automatic;
  dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, nullptr);
  const int k = 2048;
  ds::DeviceBuffer ind(size_t(8192) * k * 4);
  dsa_indexer::TopkOptions t;
  t.k = k;
  const auto ti = dsa_indexer::TensorDesc::contiguous(ind.get(), dsa_indexer::DType::i32, {1, 8192, k});
  dsa_indexer::IndexerOptions o = dp.opt;
  o.family = KernelFamily::topk_fused;
  dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, ti, o, t, nullptr);
  ds::sync_device();
  SUCCEED("ran");
}
