// The fused top-k (family topk_fused) on the GPU: bitwise equal to the unfused path (indices,
// values and softmax) on fresh random inputs with poisoned outputs, constructed ties (repeated
// key rows: equal scores across columns; zero weights: all-zero rows; two alternating key rows:
// two distinct values per row), short and empty rows (negative offsets), offsets near
// INT32_MAX, ratio 1/2/4, B 1-3, several row blocks, bf16/fp32 W, sm_scale != 1, every k of the
// contract's list, both slot orders and both index conventions; a tiny candidate buffer (k + 64
// entries) forces a compaction every tile; run to run bitwise; and the automatic dispatch takes
// the fused path where it applies. THD packings (by name: [topk_fused_thd]) the same way. The
// unfused path itself is held against the CPU reference selection in test_topk.cpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <optional>

#include "cuda/driver.hpp"
#include "dsa_indexer/topk.hpp"
#include "core/device_info.hpp"
#include "dispatch/family.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "ops/topk.hpp"
#include "gpu_cases.hpp"
#include "gpu_runner.hpp"
#include "../support/topk_reference.hpp"
#include "topk_run.hpp"

using namespace dsa_gpu_test;
namespace ds = dsa_support;

namespace {

enum class Ties { none, repeated_keys_and_zero_rows, two_values };

// Key row dst becomes a copy of key row src (FP8: its codes and its scale).
void copy_key_row(HostProblem& p, int64_t dst, int64_t src) {
  const int64_t D = 128;
  if (!p.fp8) {
    std::memcpy(&p.k[dst * D], &p.k[src * D], D * 2);
    return;
  }
  std::memcpy(&p.k8[dst * D], &p.k8[src * D], D);
  if (!p.k_scale.empty()) p.k_scale[dst] = p.k_scale[src];
}

void make_ties(HostProblem& p, Ties ties) {
  const int64_t kr = p.t_k();
  if (ties == Ties::repeated_keys_and_zero_rows) {
    for (int64_t j = 0; j + 3 < kr; j += 5) copy_key_row(p, j + 3, j);
    for (int64_t r = 0; r < p.rows(); r += 7)
      for (int h = 0; h < p.heads; ++h) {
        p.w_bf16[r * p.heads + h] = 0;
        p.w_f32v[r * p.heads + h] = 0.0f;
      }
  } else if (ties == Ties::two_values) {
    // Every key row is one of two: each row's scores take two values (per batch entry).
    for (int64_t j = 2; j < kr; ++j) copy_key_row(p, j, j % 2);
  }
}

int64_t mismatches(const TopkOut& a, const TopkOut& b, std::string& first, int k) {
  int64_t bad = 0;
  for (size_t r = 0; r < a.lse.size() && r < b.lse.size(); ++r)  // (lse: when both asked for it)
    if (std::memcmp(&a.lse[r], &b.lse[r], 4) != 0 && bad++ == 0)
      first = fmt::format("row {}: lse fused {} unfused {}", r, a.lse[r], b.lse[r]);
  if (a.lse.size() != b.lse.size()) ++bad;
  for (size_t i = 0; i < a.indices.size(); ++i) {
    const bool same = a.indices[i] == b.indices[i] && std::memcmp(&a.values[i], &b.values[i], 4) == 0 &&
                      std::memcmp(&a.softmax[i], &b.softmax[i], 4) == 0;
    if (!same && bad++ == 0)
      first = fmt::format("row {} slot {}: fused ({}, {}, {}) unfused ({}, {}, {})", i / k, i % k, a.indices[i], a.values[i],
                          a.softmax[i], b.indices[i], b.values[i], b.softmax[i]);
  }
  return bad;
}

void check_fused(HostProblem p, uint64_t seed, const std::vector<int>& ks, Ties ties = Ties::none, int64_t entries = 0) {
  ds::fill_random(p, seed);
  make_ties(p, ties);
  INFO(p.describe() << " ties " << static_cast<int>(ties) << " entries " << entries);
  auto dp = ds::upload(p, 0, true);
  for (int k : ks) {
    dsa_indexer::detail::set_topk_fused_candidates(entries > 0 ? k + entries : 0);
    for (bool sorted : {false, true})
      for (bool global : {false, true}) {
        INFO("k " << k << " sorted " << sorted << " global " << global);
        const TopkOut u = run_topk(p, dp, k, {KernelFamily::topk_unfused, sorted, global});
        const TopkOut f = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, global});
        std::string first;
        const int64_t bad = mismatches(f, u, first, k);
        INFO(first);
        CHECK(bad == 0);
        const TopkOut again = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, global});
        CHECK(mismatches(again, f, first, k) == 0);
        // The sampled sweep's redo launch: at margin -4 nearly every cut row keeps fewer than k
        // entries and its q-tile is swept again (without the redo its count stays negative).
        dsa_indexer::detail::set_topk_fused_margin(-4.0f);
        const TopkOut redo = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, global});
        CHECK(mismatches(redo, u, first, k) == 0);
        // The exact sweep, in both threshold modes: compactions only (refresh 0), histograms (32)
        dsa_indexer::detail::set_topk_fused_margin(std::nanf(""));
        for (const int32_t refresh : {0, 32}) {
          dsa_indexer::detail::set_topk_fused_refresh(refresh);
          const TopkOut exact = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, global});
          CHECK(mismatches(exact, u, first, k) == 0);
        }
        dsa_indexer::detail::set_topk_fused_refresh(-1);
        dsa_indexer::detail::set_topk_fused_margin(std::nullopt);
      }
    // With the lse output (the fused sweep's lane order, which the unfused path replays over its
    // block scores; topk_lse_lanes, off by default): every protocol's lse bits, with the indices,
    // values and softmax; and the unfused replay within 1e-6 (relative) of the selection's fp64
    // two-pass sum, the order it replaces. (THD calls with an lse: the fused path refuses them.)
    if (p.thd()) continue;
    INFO("k " << k << " with lse");
    const TopkOut two_pass = run_topk(p, dp, k, {KernelFamily::topk_unfused, true, false, true, /*lse=*/true});
    dsa_indexer::detail::set_topk_lse_lanes(true);
    const TopkOut u = run_topk(p, dp, k, {KernelFamily::topk_unfused, true, false, true, /*lse=*/true});
    {
      int64_t far = 0;
      std::string first;
      for (size_t r = 0; r < u.lse.size(); ++r)
        if (!dsa_test::topk_close(u.lse[r], two_pass.lse[r], 1e-6) && far++ == 0)
          first = fmt::format("row {}: lse {} two-pass {}", r, u.lse[r], two_pass.lse[r]);
      INFO(first);
      CHECK(far == 0);
    }
    for (int proto = 0; proto < 3; ++proto) {  // sampled (the default margin), its redo (margin -4), exact
      namespace dd = dsa_indexer::detail;
      dd::set_topk_fused_margin(proto == 0 ? std::optional<float>{} : proto == 1 ? std::optional<float>{-4.0f}
                                                                                  : std::optional<float>{std::nanf("")});
      const TopkOut f = run_topk(p, dp, k, {KernelFamily::topk_fused, true, false, true, /*lse=*/true});
      std::string first;
      const int64_t bad = mismatches(f, u, first, k);
      INFO("protocol " << proto << ": " << first);
      CHECK(bad == 0);
    }
    dsa_indexer::detail::set_topk_fused_margin(std::nullopt);
    dsa_indexer::detail::set_topk_lse_lanes(std::nullopt);
  }
  dsa_indexer::detail::set_topk_fused_candidates(0);
  std::printf("topk fused case %-80s passed\n", p.describe().c_str());
}

}  // namespace

TEST_CASE("topk fused: equal to the unfused path, every k, ratio 1/2/4", "[topk_fused]") {
  check_fused(bshd(1, 1056, 4096, 64, 2), 201, {1, 7, 64, 512, 2048});
  HostProblem a = bshd(1, 1056, 3000, 64, 1);
  a.offsets = {3000 - 1056 - 1};
  check_fused(a, 202, {7, 2048});
  check_fused(bshd(2, 1056, 1500, 64, 4), 203, {64, 512});
}

TEST_CASE("topk fused: ties, two values, all-zero rows", "[topk_fused]") {
  check_fused(bshd(1, 1056, 2500, 64, 1), 211, {1, 7, 64, 512}, Ties::repeated_keys_and_zero_rows);
  check_fused(bshd(1, 1056, 2500, 64, 2), 212, {7, 64, 2048}, Ties::two_values);
}

TEST_CASE("topk fused: a tiny candidate buffer compacts every tile, still exact", "[topk_fused]") {
  check_fused(bshd(1, 1056, 3000, 64, 1), 221, {1, 7, 64, 512}, Ties::none, /*entries=*/64);
  check_fused(bshd(1, 1056, 2500, 64, 2), 222, {7, 64}, Ties::repeated_keys_and_zero_rows, 64);
  check_fused(bshd(1, 1056, 2500, 64, 1), 223, {64, 2048}, Ties::two_values, 64);
}

TEST_CASE("topk fused: offsets, short and empty rows, B 3, fp32 W, sm_scale", "[topk_fused]") {
  HostProblem a = bshd(3, 1056, 2000, 64, 1);
  a.offsets = {INT32_MAX - 3000, -500, 700};
  check_fused(a, 231, {7, 512});
  HostProblem b = bshd(2, 1056, 1800, 64, 2);
  b.w_f32 = true;
  b.sm_scale = 0.0625f;
  check_fused(b, 232, {64, 2048});
  // Several row blocks: a 64 MiB budget at 2112 entries per row (every cell: S_k + 64) makes
  // three blocks of 3072 rows (the default 512 MiB holds all 9216 rows in one).
  HostProblem c = bshd(1, 9216, 2048, 64, 4);
  dsa_indexer::detail::set_topk_fused_budget(uint64_t(64) << 20);
  check_fused(c, 233, {2048});
  dsa_indexer::detail::set_topk_fused_budget(0);
}

TEST_CASE("topk fused: long rows compact and refresh (S_k 16384)", "[topk_fused]") {
  HostProblem p = bshd(1, 1056, 16384, 64, 1);
  p.offsets = {16384 - 1056 - 1};
  check_fused(p, 241, {64, 2048});
  check_fused(p, 242, {512}, Ties::none, /*entries=*/256);
  // Lists longer than the candidates kernel stages in shared memory (8192): 12048 entries per
  // row, which the exact sweep without refreshes (compactions only) fills before it compacts.
  check_fused(p, 243, {2048}, Ties::none, /*entries=*/10000);
}

TEST_CASE("topk fused: S_k 65536, a sample stride of 64", "[topk_fused]") {
  HostProblem p = bshd(1, 1056, 65536, 64, 1);
  p.offsets = {65536 - 1056 - 1};
  check_fused(p, 251, {2048});
}

// The automatic policy (sm90_topk_fused.hpp; on by default since session 33): past about 127k
// keys the unfused blocks would hold under half a wave of rows and automatic calls take the fused
// path at k 2048 (at k 64 the unfused one). Its output equals the unfused path's, by name, in blocks
// within the budget (lean split) and in the old one-wave blocks.
TEST_CASE("topk fused: automatic calls at S_k 131072 take it, equal to the unfused path", "[topk_fused][topk_auto]") {
  namespace dd = dsa_indexer::detail;
  HostProblem p = bshd(1, 1056, 131072, 64, 1);
  p.offsets = {131072 - 1056 - 1};
  ds::fill_random(p, 271);
  auto dp = ds::upload(p, 0, true);
  const dd::DeviceInfo& dev = dd::device_info(0);
  dd::set_topk_fused_automatic(true);
  for (int k : {64, 2048}) {
    INFO("k " << k);
    {  // the dispatcher's choice on this GPU (132 SMs: the unfused blocks hold 512 of 528 rows)
      dsa_indexer::TopkOptions t;
      t.k = k;
      int32_t none = 0;
      const dsa_indexer::TensorDesc ti = dsa_indexer::TensorDesc::contiguous(&none, dsa_indexer::DType::i32, {p.batch, p.s_q, k});
      dd::ScopedContext ctx(0);
      const dd::Problem prob = dd::validate_topk(dp.tq, dp.tk, dp.tw, ti, dp.opt, t, nullptr);
      INFO("SMs " << dev.sm_count);
      CHECK(dd::topk_unfused_short_blocks(prob, dev) == (dev.sm_count * 4 > 512));
      if (dev.sm_count * 4 > 512)
        CHECK(&dd::choose_family(prob, dev, KernelFamily::automatic, false) ==
              (k >= dd::kTopkFusedAutoMinK ? &dd::topk_fused_family() : &dd::topk_unfused_family()));
    }
    const TopkOut a = run_topk(p, dp, k, {KernelFamily::automatic, false, false});
    const TopkOut u = run_topk(p, dp, k, {KernelFamily::topk_unfused, false, false});
    std::string first;
    CHECK(mismatches(a, u, first, k) == 0);
    INFO(first);
    dd::set_topk_unfused_blocking(0, /*one_wave=*/true);
    const TopkOut w = run_topk(p, dp, k, {KernelFamily::topk_unfused, false, false});
    dd::set_topk_unfused_blocking(0, false);
    CHECK(mismatches(w, u, first, k) == 0);
  }
  dd::set_topk_fused_automatic(std::nullopt);
  std::printf("topk fused automatic case %-80s passed\n", p.describe().c_str());
}

// One small call of every fused launch kind (the sampled sweep with cuts, its redo at margin
// -4, the exact sweep, the candidates kernel), for the sanitizers (tools/gpu_session.sh s14c).
TEST_CASE("topk fused: small, for the sanitizers", "[topk_fused_small]") {
  HostProblem p = bshd(1, 1056, 1536, 64, 1);
  p.offsets = {1536 - 1056 - 1};
  check_fused(p, 261, {64});
}

namespace {
// The split redo (set_topk_fused_redo_split): at margin -4 nearly every cut row fails, so most
// q-tiles are redone; with 1 slot one q-tile is split and the others take the whole-row redo,
// with 8 both, with 4096 every failed q-tile is split; the split launch's items by q-tiles and by
// slots (set_topk_fused_redo_slot_items), and by slots with the join that cuts
// (set_topk_fused_redo_join_cut: S_k 4096 at k 2048 joins 4 chunks in a buffer of 2k + 64,
// S_k 16384 16 chunks in 5356), and the redo pool (set_topk_fused_redo_pool, the default since
// session 33: every failed q-tile split, its chunks joined under the rows' locks in whatever order
// they end; its rows' floors seeded from the sampled sweep's lists, set_topk_fused_redo_seed, and
// not). Indices and values (and softmax) bitwise the unfused
// path's, every slot count, the default margin too, run to run.
void check_redo_split(HostProblem p, uint64_t seed, const std::vector<int>& ks, Ties ties = Ties::none) {
  namespace dd = dsa_indexer::detail;
  ds::fill_random(p, seed);
  make_ties(p, ties);
  INFO(p.describe() << " ties " << static_cast<int>(ties));
  auto dp = ds::upload(p, 0, true);
  for (int k : ks) {
    // the path under test: a split of at least 2 chunks per q-tile
    const int64_t s_k = p.thd() ? 0 : p.s_k;
    const dd::TopkRedoSplit rs = dd::topk_redo_split(k, dd::topk_fused_candidates(k, s_k), s_k);
    INFO("k " << k << " parts " << rs.parts << " chunk " << rs.chunk << " part_ld " << rs.part_ld);
    REQUIRE(rs.parts >= 2);
    for (bool sorted : {false, true}) {
      const TopkOut u = run_topk(p, dp, k, {KernelFamily::topk_unfused, sorted, true});
      dd::set_topk_fused_redo_split(true);
      // the launch's items by q-tiles and by slots; by slots with the join that cuts too
      // (set_topk_fused_redo_join_cut: up to 16 chunks whatever k, a row's list cut to k in the join)
      // and the redo pool (set_topk_fused_redo_pool: no slots, every failed q-tile's chunks joined
      // under the rows' locks; run once, at 8 slots, which it ignores)
      // (the pool's rows seeded with floors from the sampled sweep's lists, session 33's default,
      // and without)
      struct Order {
        bool by_slots, cut, pool, seed;
      };
      for (int32_t slots : {1, 8, 4096})
      for (const Order o : {Order{false, false, false, true}, Order{true, false, false, true}, Order{true, true, false, true},
                            Order{true, false, true, true}, Order{true, false, true, false}}) {
        if (o.pool && slots != 8) continue;
        dd::set_topk_fused_redo_slots(slots);
        dd::set_topk_fused_redo_slot_items(o.by_slots);
        dd::set_topk_fused_redo_join_cut(o.cut);  // (before the INFO: the parts follow it)
        dd::set_topk_fused_redo_pool(o.pool);
        dd::set_topk_fused_redo_seed(o.seed);
        INFO("sorted " << sorted << " slots " << slots << " items by slots " << o.by_slots << " join cut " << o.cut << " pool "
                       << o.pool << " seeded " << o.seed << " parts "
                       << dd::topk_redo_split(k, dd::topk_fused_candidates(k, s_k), s_k).parts);
        std::string first;
        dd::set_topk_fused_margin(-4.0f);
        const TopkOut f = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, true});
        CHECK(mismatches(f, u, first, k) == 0);
        const TopkOut again = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, true});
        CHECK(mismatches(again, f, first, k) == 0);
        dd::set_topk_fused_margin(std::nullopt);
        const TopkOut d = run_topk(p, dp, k, {KernelFamily::topk_fused, sorted, true});
        CHECK(mismatches(d, u, first, k) == 0);
        INFO(first);
      }
      dd::set_topk_fused_redo_slots(0);
      dd::set_topk_fused_redo_slot_items(std::nullopt);
      dd::set_topk_fused_redo_join_cut(std::nullopt);
      dd::set_topk_fused_redo_pool(std::nullopt);
      dd::set_topk_fused_redo_seed(std::nullopt);
      dd::set_topk_fused_redo_split(std::nullopt);
    }
  }
  std::printf("topk fused split redo case %-80s passed\n", p.describe().c_str());
}
}  // namespace

// The split redo (sm90_topk_fused.hpp, TopkRedoSplit; on since session 30): every k of
// the contract's list, ratio 1/2, causal rows whose later chunks are empty, offsets with empty
// and short rows, B 3, fp32 W, ties, a long row (S_k 16384), FP8 inputs.
TEST_CASE("topk fused: the split redo, equal to the unfused path", "[topk_fused][topk_fused_redo]") {
  HostProblem a = bshd(1, 1056, 4096, 64, 1);
  a.offsets = {4096 - 1056 - 1};
  check_redo_split(a, 601, {1, 7, 64, 512, 2048});
  check_redo_split(bshd(1, 1056, 4096, 64, 2), 602, {64, 2048});
  HostProblem b = bshd(3, 1056, 3000, 64, 1);
  b.offsets = {INT32_MAX - 4000, -500, 700};
  b.w_f32 = true;
  check_redo_split(b, 603, {7, 512});
  check_redo_split(bshd(1, 1056, 3000, 64, 1), 604, {64, 512}, Ties::two_values);
  check_redo_split(bshd(1, 1056, 3000, 64, 1), 605, {7, 512}, Ties::repeated_keys_and_zero_rows);
  HostProblem l = bshd(1, 1056, 16384, 64, 1);
  l.offsets = {16384 - 1056 - 1};
  check_redo_split(l, 606, {2048});
  check_redo_split(fp8_inputs(bshd(1, 1056, 4096, 64, 2), true, true), 607, {64, 2048});
}

TEST_CASE("topk fused: the split redo, small, for the sanitizers", "[topk_fused_small][topk_fused_redo]") {
  HostProblem p = bshd(1, 1056, 2048, 64, 1);
  p.offsets = {2048 - 1056 - 1};
  check_redo_split(p, 611, {64});
}

// The sampled sweep's partitioned appends (set_topk_fused_part; kTopkFusedPart, off: exact on an
// H100 but slower, session 24): warp-private partitions past the sample, compacted by the selectors. The
// same outputs as the unfused path at every k and ratio, with ties, offsets and B 3, long rows
// (S_k 16384 and 65536), and a tiny buffer whose partitions overflow into the redo launch.
TEST_CASE("topk fused: partitioned appends, equal to the unfused path", "[topk_fused][topk_fused_part]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_part(true);
  check_fused(bshd(1, 1056, 4096, 64, 2), 301, {1, 7, 64, 512, 2048});
  check_fused(bshd(2, 1056, 1500, 64, 4), 302, {64, 512});
  check_fused(bshd(1, 1056, 2500, 64, 1), 303, {7, 512}, Ties::repeated_keys_and_zero_rows);
  check_fused(bshd(1, 1056, 2500, 64, 2), 304, {7, 2048}, Ties::two_values);
  check_fused(bshd(1, 1056, 3000, 64, 1), 305, {7, 64}, Ties::none, /*entries=*/64);
  HostProblem a = bshd(3, 1056, 2000, 64, 1);
  a.offsets = {INT32_MAX - 3000, -500, 700};
  check_fused(a, 306, {7, 512});
  HostProblem l = bshd(1, 1056, 16384, 64, 1);
  l.offsets = {16384 - 1056 - 1};
  check_fused(l, 307, {64, 2048});
  HostProblem v = bshd(1, 1056, 65536, 64, 1);
  v.offsets = {65536 - 1056 - 1};
  check_fused(v, 308, {2048});
  dd::set_topk_fused_part(std::nullopt);
}

TEST_CASE("topk fused: partitioned appends, small, for the sanitizers", "[topk_fused_small][topk_fused_part]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_part(true);
  HostProblem p = bshd(1, 1056, 1536, 64, 1);
  p.offsets = {1536 - 1056 - 1};
  check_fused(p, 311, {64});
  dd::set_topk_fused_part(std::nullopt);
}

// FP8 (E4M3 q / k with per-token scales): the sweep runs lean's FP8 main loop, so the fused
// outputs must equal the unfused path's (whose blocks take the FP8 score families) bit for bit:
// every k, ratio 1/2/4, q and k scales given or not, fp32 W, ties (repeated key rows with their
// scales, two values, zero weights), offsets and B 3, a long row, a tiny buffer, the partitioned
// appends. (Session 24 found them differing on an H100 from the unfused path and run to run, in
// every protocol: the exact launches initialized the sampled protocol's mbarriers, which lie in
// their key slots. Session 25: each protocol initializes only its own; then these passed.)
TEST_CASE("topk fused: FP8 inputs, equal to the unfused path", "[topk_fused_fp8]") {
  check_fused(fp8_inputs(bshd(1, 1056, 4096, 64, 2), true, true), 401, {1, 7, 64, 512, 2048});
  check_fused(fp8_inputs(bshd(2, 1056, 1500, 64, 4), false, true, false), 402, {64, 512});
  check_fused(fp8_inputs(bshd(1, 1056, 2500, 64, 1), true, false), 403, {7, 512}, Ties::repeated_keys_and_zero_rows);
  check_fused(fp8_inputs(bshd(1, 1056, 2500, 64, 2), true, true), 404, {7, 2048}, Ties::two_values);
  check_fused(fp8_inputs(bshd(1, 1056, 3000, 64, 1), true, true), 405, {7, 64}, Ties::none, /*entries=*/64);
  HostProblem a = fp8_inputs(bshd(3, 1056, 2000, 64, 1), true, true);
  a.offsets = {INT32_MAX - 3000, -500, 700};
  a.w_f32 = true;
  check_fused(a, 406, {7, 512});
  HostProblem l = fp8_inputs(bshd(1, 1056, 16384, 64, 1), true, true);
  l.offsets = {16384 - 1056 - 1};
  check_fused(l, 407, {64, 2048});
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_part(true);
  check_fused(fp8_inputs(bshd(1, 1056, 4096, 64, 2), true, true), 408, {7, 2048});
  dd::set_topk_fused_part(std::nullopt);
}

TEST_CASE("topk fused: FP8, small, for the sanitizers", "[topk_fused_fp8_small][topk_fused_fp8]") {
  HostProblem p = fp8_inputs(bshd(1, 1056, 1536, 64, 1), true, true);
  p.offsets = {1536 - 1056 - 1};
  check_fused(p, 411, {64});
}

// THD packings by name (automatic THD calls keep the unfused path): the unfused path's blocks of
// segments, each swept by the row-windows THD sweep, bitwise equal to the unfused path, every
// protocol (check_fused: sampled, its redo at margin -4, exact with refresh 0 and 32), both index
// conventions and slot orders. Segment boundaries inside q-tiles (a q-tile's span then starts
// past a row's window), blocks of two segments, offsets (negative: empty rows), ratio 2.
// The fused path serves THD blocks of whole q-tiles only (a block at the packing's end must hold
// a multiple of 8 rows, every block at least one q-tile per SM), hence the segment lengths: the
// block rows of every protocol's candidate buffer (margin -4 at small k keeps every cell, 4064
// rows in 256 MiB at 8192 keys, two even blocks of 3080) fall on segment ends. The unit case "the
// GPU cases' THD packings take the fused path by name" checks these packings in every protocol.
TEST_CASE("topk fused: THD packings, equal to the unfused path", "[topk_fused][topk_fused_thd]") {
  // blocks: rows [0, 3080) over keys [0, 6096) (segments 0 and 1, their boundary inside a
  // q-tile), rows [3080, 6160) over 8192 keys; rows that end at their segment's keys
  HostProblem a = thd({2045, 1035, 3080}, {4096, 2000, 8192}, 64, 1);
  a.offsets = {4096 - 2045, 2000 - 1035, 8192 - 3080};
  check_fused(a, 501, {1, 64, 2048});
  // ratio 2, two segments per block ([0, 2104) over 3000 keys, then 1504 rows over 3500), one
  // segment's rows empty or short (a negative offset)
  HostProblem b = thd({1203, 901, 1504}, {1000, 2000, 3500}, 64, 2);
  b.offsets = {800, -1500, 5496};
  check_fused(b, 502, {7, 64, 2048});
  // no offsets: causal from each segment's first row
  check_fused(thd({2045, 1035, 3080}, {4096, 2000, 8192}, 64, 1), 503, {64});
}

TEST_CASE("topk fused: THD ties, a tiny candidate buffer", "[topk_fused][topk_fused_thd]") {
  HostProblem a = thd({2045, 1035, 3080}, {4096, 2000, 8192}, 64, 1);
  a.offsets = {4096 - 2045, 2000 - 1035, 8192 - 3080};
  check_fused(a, 511, {1, 64, 2048}, Ties::repeated_keys_and_zero_rows);
  check_fused(a, 512, {7, 2048}, Ties::two_values);
  // k + 64 entries: a compaction every tile (exact), a bad sample and the redo (sampled)
  check_fused(a, 513, {1, 64, 2048}, Ties::none, /*entries=*/64);
  HostProblem b = thd({1203, 901, 1504}, {1000, 2000, 3500}, 64, 2);
  b.offsets = {800, 1200, 5496};
  check_fused(b, 514, {64, 512}, Ties::repeated_keys_and_zero_rows, 64);
}

// max_seqlen_k 9000 (> 8192: the selection's 512 threads for every block, slice 0's
// topk_select_width): the fused path's first block (two segments, 5500 keys) and the unfused
// path's blocks of another budget (928 rows, other groupings) give the same softmax bits.
TEST_CASE("topk fused: THD blocks of other groupings, the same softmax", "[topk_fused][topk_fused_thd]") {
  namespace dd = dsa_indexer::detail;
  HostProblem p = thd({1101, 1203, 2304}, {3000, 2500, 9000}, 64, 1);
  p.offsets = {3000 - 1101, 2500 - 1203, 9000 - 2304};
  check_fused(p, 521, {64, 2048});
  dd::set_topk_unfused_blocking(uint64_t(9000) * 4 * 1104, false);
  check_fused(p, 522, {2048});
  dd::set_topk_unfused_blocking(0, false);
}

// Long keys: max_seqlen_k 20000, the call's sample stride 32 (the THD variant's kTopkSampleStride)
TEST_CASE("topk fused: THD, max_seqlen_k 20000, a sample stride of 32", "[topk_fused][topk_fused_thd]") {
  // blocks: 1203 rows (padded to 1208), 1101 (1104), 1504: one segment each
  HostProblem p = thd({1203, 1101, 1504}, {3000, 20000, 6000}, 64, 1);
  p.offsets = {3000 - 1203, 20000 - 1101, 6000 - 1504};
  check_fused(p, 531, {64, 2048});
}

// The partitioned appends (set_topk_fused_part) on THD blocks.
TEST_CASE("topk fused: THD, partitioned appends", "[topk_fused][topk_fused_part][topk_fused_thd]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_part(true);
  HostProblem a = thd({2045, 1035, 3080}, {4096, 2000, 8192}, 64, 1);
  a.offsets = {4096 - 2045, 2000 - 1035, 8192 - 3080};
  check_fused(a, 541, {7, 2048});
  check_fused(a, 542, {64}, Ties::none, /*entries=*/64);
  dd::set_topk_fused_part(std::nullopt);
}

// FP8 THD (E4M3 q / k with scales): lean's FP8 main loop in the THD sweep.
TEST_CASE("topk fused: THD, FP8 inputs", "[topk_fused_fp8][topk_fused_thd]") {
  HostProblem a = fp8_inputs(thd({2045, 1035, 3080}, {4096, 2000, 8192}, 64, 1), true, true);
  a.offsets = {4096 - 2045, 2000 - 1035, 8192 - 3080};
  check_fused(a, 551, {64, 2048});
  HostProblem b = fp8_inputs(thd({1203, 901, 1504}, {1000, 2000, 3500}, 64, 2), false, true, false);
  b.w_f32 = true;
  check_fused(b, 552, {7, 512});
}

// A packing's last block of a ragged end (T_q % 8 != 0: no rows to pad it with), with
// topk_fused_ragged_thd (on by default since this case passed on an H100, session 27): its last
// q-tile's rows past T_q are empty (lean's THD row validity) and keep no count or failed flag.
// 1101 rows after a 2045-row block; and at max_seqlen_k 20000 (stride 32) 1061 rows after two
// one-segment blocks.
TEST_CASE("topk fused: THD, a ragged last block", "[topk_fused][topk_fused_thd]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_ragged_thd(true);
  HostProblem a = thd({2045, 1101}, {4096, 4096}, 64, 1);
  a.offsets = {4096 - 2045, 4096 - 1101};
  check_fused(a, 571, {1, 64, 2048});
  check_fused(a, 572, {7, 512}, Ties::repeated_keys_and_zero_rows, /*entries=*/64);
  HostProblem b = thd({1203, 1101, 1061}, {3000, 20000, 1500}, 64, 1);
  b.offsets = {3000 - 1203, 20000 - 1101, 1500 - 1061};
  check_fused(b, 573, {64, 2048});
  dd::set_topk_fused_ragged_thd(std::nullopt);
}

// Row-range THD blocks (topk_fused_thd_rows, on by default since this case passed on an H100,
// session 27): the packing whose segment groups left a 72-row sliver in session 26 (blocks of 3080 and 3072
// rows at the redo's margin, each over the keys of the segments it touches, 6096 and 10192 of
// them: past max_seqlen_k); with a ragged end too (topk_fused_ragged_thd).
TEST_CASE("topk fused: THD, row-range blocks", "[topk_fused][topk_fused_thd]") {
  namespace dd = dsa_indexer::detail;
  dd::set_topk_fused_thd_rows(true);
  HostProblem a = thd({2045, 1107, 3000}, {4096, 2000, 8192}, 64, 1);
  a.offsets = {4096 - 2045, 2000 - 1107, 8192 - 3000};
  check_fused(a, 581, {1, 64, 2048});
  check_fused(a, 582, {7, 512}, Ties::two_values, /*entries=*/64);
  dd::set_topk_fused_ragged_thd(true);
  HostProblem b = thd({2045, 1107, 3001}, {4096, 2000, 8192}, 64, 1);
  b.offsets = {4096 - 2045, -300, 8192 - 3001};
  check_fused(b, 583, {64, 2048});
  dd::set_topk_fused_ragged_thd(std::nullopt);
  dd::set_topk_fused_thd_rows(std::nullopt);
}

// One small THD call of every fused launch kind, for the sanitizers: two blocks (1064 rows of two
// segments, their boundary inside a q-tile; 1056 rows), k 64.
TEST_CASE("topk fused: THD, small, for the sanitizers", "[topk_fused_small][topk_fused_thd]") {
  HostProblem p = thd({603, 461, 1056}, {500, 700, 1200}, 64, 1);
  p.offsets = {0, 700 - 461, 1200 - 1056};
  check_fused(p, 561, {64});
}
