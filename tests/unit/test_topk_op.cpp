// The top-k operation without a GPU: validation (typed errors naming the parameter), the
// operation gates of the dispatcher, the workspace arithmetic at extreme shapes, and its
// variants compiled by NVRTC without spills.
#include <catch2/catch.hpp>

#include <climits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "dsa_indexer/errors.hpp"
#include "dsa_indexer/topk.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "ops/topk.hpp"
#include "ops/warmup.hpp"
#include "problems.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::KernelFamily;
using dsa_indexer::TopkOptions;
using Catch::Contains;

namespace {

struct TopkCall {
  Call c;
  TensorDesc indices;
  TopkOptions t;
};

// Fake addresses 2^40 bytes apart: the top-k validation checks that outputs overlap no input.
constexpr uintptr_t kQ = uintptr_t(1) << 40, kK = uintptr_t(2) << 40, kW = uintptr_t(3) << 40, kIdx = uintptr_t(4) << 40,
                    kVal = uintptr_t(5) << 40, kWs = uintptr_t(7) << 40;

TopkCall topk_call(int64_t B = 2, int64_t sq = 256, int64_t sk = 128, int k = 64) {
  TopkCall tc;
  tc.c = bshd_call(B, sq, sk);
  tc.c.q.data = fake(kQ);
  tc.c.k.data = fake(kK);
  tc.c.w.data = fake(kW);
  tc.c.out = TensorDesc();
  tc.indices = TensorDesc::contiguous(fake(kIdx), DType::i32, {B, sq, k});
  tc.t.k = k;
  return tc;
}

Problem vt(const TopkCall& tc) { return validate_topk(tc.c.q, tc.c.k, tc.c.w, tc.indices, tc.c.opt, tc.t, nullptr); }

template <class E>
std::string error_of(const TopkCall& tc) {
  try {
    vt(tc);
  } catch (const E& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

namespace {
// The family the unfused path's dispatch gives a block's score call with explicit windows (B 1,
// 2048 rows over 3000 keys: whole q-tiles, saturated).
const Family& family_of_inner(const Problem&, const DeviceInfo& dev) {
  Call c = bshd_call(1, 2048, 3000, 64);
  c.out = TensorDesc::contiguous(fake(uintptr_t(8) << 40), DType::f32, {1, 2048, 3000});
  c.opt.ks = TensorDesc::contiguous(fake(uintptr_t(9) << 40), DType::i32, {1, 2048});
  c.opt.ke = TensorDesc::contiguous(fake(uintptr_t(10) << 40), DType::i32, {1, 2048});
  const Problem s = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  REQUIRE(s.has_windows);
  return choose_family(s, dev, topk_unfused_family().inner_family(s), false);
}
}  // namespace

TEST_CASE("topk: a well-formed call validates into a top-k problem", "[topk][validate]") {
  TopkCall tc = topk_call();
  tc.t.values = TensorDesc::contiguous(fake(kVal), DType::f32, {2, 256, 64});
  const Problem p = vt(tc);
  CHECK(p.op == Operation::topk);
  CHECK(p.topk.k == 64);
  CHECK(p.topk.indices == fake(kIdx));
  CHECK(p.topk.values == fake(kVal));
  CHECK(p.topk.softmax == nullptr);
  CHECK(p.out == nullptr);
}

TEST_CASE("topk: bad input is a typed error naming the parameter", "[topk][validate]") {
  TopkCall tc = topk_call();
  tc.t.k = 0;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indexer_topk: k: expected >= 1, got 0"));
  tc.t.k = dsa_indexer::kTopkMaxK + 1;
  CHECK_THAT(error_of<dsa_indexer::UnsupportedConfig>(tc), Contains("indexer_topk: k: expected <= 2048"));

  tc = topk_call();
  tc.indices.dtype = DType::f32;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indices.dtype"));
  tc = topk_call();
  tc.indices = TensorDesc::contiguous(fake(kIdx), DType::i32, {2, 256, 63});
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indices.shape[2]"));
  tc = topk_call();
  tc.indices.device = 1;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indices.device"));
  tc = topk_call();
  tc.indices.strides[1] = 128;  // rows not back to back
  tc.indices.strides[0] = 256 * 128;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indices.strides: expected contiguous"));
  tc = topk_call();
  tc.t.values = TensorDesc::contiguous(fake(kVal), DType::bf16, {2, 256, 64});
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("values.dtype"));
  tc = topk_call();
  tc.t.softmax = TensorDesc::contiguous(fake(kVal), DType::f32, {2, 255, 64});
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("softmax.shape[1]"));

  // aliasing: an output over an input, and two outputs over each other
  tc = topk_call();
  tc.indices.data = fake(kQ + 4096);  // inside q
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indices: expected memory that does not overlap q"));
  tc = topk_call();
  tc.t.values = TensorDesc::contiguous(fake(kIdx + 64), DType::f32, {2, 256, 64});
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("expected memory that does not overlap values"));
  tc = topk_call();
  tc.t.workspace = fake(kW);  // w
  tc.t.workspace_bytes = 1 << 20;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("topk.workspace: expected memory that does not overlap w"));
  tc = topk_call();
  tc.t.workspace = fake(kWs + 16);
  tc.t.workspace_bytes = 256;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("topk.workspace: expected 256-byte aligned"));

  // what the operation does not support
  tc = topk_call();
  tc.c.opt.ks = TensorDesc::contiguous(fake(0xa00000), DType::i32, {2, 256});
  tc.c.opt.ke = TensorDesc::contiguous(fake(0xb00000), DType::i32, {2, 256});
  CHECK_THAT(error_of<dsa_indexer::UnsupportedConfig>(tc), Contains("ks / ke"));
  tc = topk_call();
  tc.t.indices = static_cast<dsa_indexer::TopkIndices>(5);
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("topk.indices"));
  tc = topk_call(2, 256, int64_t(1) << 30);
  tc.t.indices = dsa_indexer::TopkIndices::global;
  CHECK_THAT(error_of<dsa_indexer::UnsupportedConfig>(tc), Contains("B * S_k"));
  // the score operation's own checks keep their messages, under the top-k entry's name
  tc = topk_call();
  tc.c.opt.ratio = 0;
  CHECK_THAT(error_of<dsa_indexer::InvalidArgument>(tc), Contains("indexer_topk: ratio: expected >= 1, got 0"));
}

TEST_CASE("topk: the dispatcher offers a family only to its own operation", "[topk][dispatch]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const Problem t = vt(topk_call());
  CHECK(&choose_family(t, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  CHECK(&choose_family(t, dev, KernelFamily::automatic, true) == &topk_unfused_family());
  for (KernelFamily f : {KernelFamily::generic, KernelFamily::lean, KernelFamily::reference}) {
    try {
      choose_family(t, dev, f, false);
      FAIL("a scores family served a top-k call");
    } catch (const dsa_indexer::UnsupportedConfig& e) {
      CHECK_THAT(std::string(e.what()), Contains("indexer_topk: family") && Contains(": operation: expected scores, got topk"));
    }
  }
  Call c = bshd_call();
  const Problem s = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  CHECK(choose_family(s, dev, KernelFamily::automatic, false).operation() == Operation::scores);
  CHECK_THROWS_WITH(choose_family(s, dev, KernelFamily::topk_unfused, false),
                    Contains("family topk_unfused: operation: expected topk, got scores"));
  // an input precision no family of the operation computes from
  Problem f8 = t;
  f8.qk_dtype = DType::f16;
  CHECK_THROWS_WITH(choose_family(f8, dev, KernelFamily::automatic, false), Contains("a family of operation topk"));
  CHECK_THROWS_WITH(choose_family(f8, dev, KernelFamily::topk_unfused, false), Contains("q/k dtype: expected bf16 or e4m3, got f16"));
}

TEST_CASE("topk: FP8 calls go unfused; their blocks are FP8 score problems with the block's scales", "[topk][dispatch][fp8]") {
  const DeviceInfo dev = DeviceInfo::h200();
  // B 2, S_q 1056 (a block of 1056 rows per batch entry), S_k 3000, q_scale (B, S_q, H), k_scale (B, S_k)
  TopkCall tc = topk_call(2, 1056, 3000, 64);
  tc.c.q = TensorDesc::contiguous(fake(kQ), DType::e4m3, {2, 1056, 64, 128});
  tc.c.k = TensorDesc::contiguous(fake(kK), DType::e4m3, {2, 3000, 1, 128});
  tc.c.opt.q_scale = TensorDesc::contiguous(fake(uintptr_t(8) << 40), DType::f32, {2, 1056, 64});
  tc.c.opt.k_scale = TensorDesc::contiguous(fake(uintptr_t(9) << 40), DType::f32, {2, 3000});
  tc.c.opt.ratio = 1;
  const Problem t = vt(tc);
  CHECK(t.qk_dtype == DType::e4m3);
  // the fused path serves FP8 by name (automatic calls keep the unfused path); its sweeps are FP8
  // lean problems with the same block scales
  CHECK(&choose_family(t, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  CHECK(&choose_family(t, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
  const std::vector<Problem> sweeps = topk_fused_family().inner_problems(t, dev);
  REQUIRE_FALSE(sweeps.empty());
  for (const Problem& s : sweeps) {
    CHECK(s.qk_dtype == DType::e4m3);
    CHECK(s.has_q_scale);
    CHECK(s.has_k_scale);
    CHECK(&choose_family(s, dev, KernelFamily::topk_fused_sweep, false) == &topk_fused_sweep_family());
  }
  const auto inner = topk_unfused_family().inner_problems(t, dev);
  REQUIRE_FALSE(inner.empty());
  for (const Problem& s : inner) {
    CHECK(s.qk_dtype == DType::e4m3);
    CHECK(s.has_q_scale);
    CHECK(s.has_k_scale);
    CHECK(s.q_scale_stride[1] == 64);
    CHECK(s.q_scale_stride[2] == 1);
    CHECK(s.k_scale_stride[1] == 1);
    CHECK(choose_family(s, dev, KernelFamily::automatic, false).serves_input(DType::e4m3));
  }
  // the block of batch entry 1 from row 0: q at (1, 0, 0, 0) in bytes of e4m3, its scales at
  // (1, 0, 0) and (1, 0) in fp32
  TopkBlock b;
  b.batch = 1;
  b.row0 = 0;
  b.n = 1056;
  b.k_base = 0;
  b.width = 3000;
  const Problem s = topk_block_problem(t, b, nullptr, nullptr, nullptr, nullptr);
  CHECK(reinterpret_cast<uintptr_t>(s.q) == kQ + uintptr_t(1056) * 64 * 128);
  CHECK(reinterpret_cast<uintptr_t>(s.k) == kK + uintptr_t(3000) * 128);
  CHECK(reinterpret_cast<uintptr_t>(s.q_scale) == (uintptr_t(8) << 40) + uintptr_t(1056) * 64 * 4);
  CHECK(reinterpret_cast<uintptr_t>(s.k_scale) == (uintptr_t(9) << 40) + uintptr_t(3000) * 4);
  // a later block of the first entry: rows from 528 (q_scale 528 rows in), keys from 0
  b.batch = 0;
  b.row0 = 528;
  b.n = 528;
  const Problem s2 = topk_block_problem(t, b, nullptr, nullptr, nullptr, nullptr);
  CHECK(reinterpret_cast<uintptr_t>(s2.q_scale) == (uintptr_t(8) << 40) + uintptr_t(528) * 64 * 4);
  CHECK(reinterpret_cast<uintptr_t>(s2.q) == kQ + uintptr_t(528) * 64 * 128);
  // a manifest line with in=e4m3 names the same variants
  const auto specs = manifest_specs(parse_manifest("op=topk sq=1056 sk=3000 ratio=1 batch=2 in=e4m3\n", "m"), dev);
  REQUIRE(specs.size() >= 2);
  CHECK(&family_of(specs[0]) == &topk_unfused_family());
}

TEST_CASE("topk: the workspace never grows with S_q x S_k and never overflows", "[topk][planner]") {
  const DeviceInfo dev = DeviceInfo::h200();
  // topk_blocking's default: one block of rows of S_k fp32 cells, at least one wave of q-tiles.
  Problem p = vt(topk_call(1, 8192, 65536, 2048));
  TopkBlocking b = topk_blocking(p, dev);
  CHECK(b.width == 65536);
  CHECK(b.rows == 1056);  // one 8-row q-tile for each of 132 SMs: more than the 256 MiB budget's 1024
  CHECK(b.total_bytes < (uint64_t(300) << 20));
  // The unfused path's blocks stay within the budget (at least 8 rows): 1024 rows, lean split.
  const TopkBlocking bu = topk_blocking(p, dev, 0, 0, 8);
  CHECK(bu.rows == 1024);
  CHECK(bu.scores_bytes == uint64_t(256) << 20);
  CHECK(make_plan(p, dev, topk_unfused_family()).workspace_bytes == bu.total_bytes);
  for (int64_t sk : {int64_t(131072), int64_t(262144), int64_t(1) << 22}) {
    Problem l = vt(topk_call(1, 8192, sk, 2048));
    CHECK(topk_blocking(l, dev, 0, 0, 8).scores_bytes <= uint64_t(256) << 20);
    CHECK(make_plan(l, dev, topk_unfused_family()).workspace_bytes < (uint64_t(257) << 20));
  }
  Problem p2 = vt(topk_call(1, 32768, 65536, 2048));
  CHECK(topk_blocking(p2, dev).total_bytes == b.total_bytes);  // independent of S_q
  Problem small = vt(topk_call(2, 256, 128, 64));
  TopkBlocking bs = topk_blocking(small, dev);
  CHECK(bs.rows == 256);
  CHECK(bs.width == 128);
  CHECK(bs.scores_bytes == 256 * 128 * 4);
  CHECK(bs.ks_offset % 256 == 0);
  CHECK(bs.rows_offset % 256 == 0);
  // Extreme extents: S_q and S_k near 2^31 give a finite, exactly computed size (no wrap).
  // (planned directly: q's descriptor at these extents exceeds the 2^40 stride bound)
  Problem huge = p;
  huge.s_q = huge.t_q = huge.rows = INT32_MAX;
  huge.s_k = huge.t_k = huge.out_cols = INT32_MAX;
  TopkBlocking bh = topk_blocking(huge, dev);
  CHECK(bh.width == INT32_MAX);
  CHECK(bh.rows == 1056);
  CHECK(topk_blocking(huge, dev, 0, 0, 8).rows == 8);  // the unfused path's: 8 rows of 8 GiB
  CHECK(bh.scores_bytes >= uint64_t(1056) * uint64_t(INT32_MAX) * 4);
  CHECK(bh.total_bytes > bh.scores_bytes);
  CHECK(bh.total_bytes < (uint64_t(1) << 44));
}

TEST_CASE("topk: every variant compiles under NVRTC without spills", "[topk][nvrtc]") {
  for (Layout l : {Layout::bshd, Layout::thd_local}) {
    const KernelSpec spec = topk_unfused_spec(l);
    const GeneratedSource g = render(spec);
    INFO(g.name);
    // rows, the selection (256 and 512 threads), the lse, the short rows' (4 and 8 words), the
    // register rows' (the 512-thread general kernel that skips them, the 512-thread short-row one)
    CHECK(g.kernels.size() == 8);
    const CompileOutput out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(spec.arch), nullptr});
    CHECK_FALSE(out.cubin.empty());
    INFO(out.log);
    auto count = [&](const std::string& needle) {
      std::size_t n = 0;
      for (std::size_t at = out.log.find(needle); at != std::string::npos; at = out.log.find(needle, at + 1)) ++n;
      return n;
    };
    CHECK(count("bytes spill stores") == 8);  // one ptxas report per kernel, each without spills
    CHECK(count(" 0 bytes spill stores, 0 bytes spill loads") == 8);
    CHECK(out.lowered_names.size() == 8);
  }
  // The score variants of THD blocks with topk_lean_window_blocks: lean's key-column row-window
  // variants (bf16 and fp32 W), one q-tile for S_q.
  for (DType w : {DType::bf16, DType::f32}) {
    const KernelSpec spec = lean_spec(8, 0, w, false, Layout::thd_global, DType::bf16, false, 64, 2, false, false, true);
    const GeneratedSource g = render(spec);
    INFO(g.name);
    const CompileOutput out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(spec.arch), nullptr});
    CHECK_FALSE(out.cubin.empty());
    INFO(out.log);
    CHECK(out.log.find("0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
    CHECK(out.log.find("bytes spill stores") == out.log.rfind("bytes spill stores"));  // one kernel
  }
}

namespace {
// A THD top-k problem of H 64, ratio 1, from host cu_seqlens (planning only: no tensors).
Problem thd_plan_problem(std::vector<int32_t> cu_q, std::vector<int32_t> cu_k, int64_t max_seqlen_k) {
  Problem p;
  p.layout = Layout::thd_local;
  p.heads = 64;
  p.head_dim = 128;
  p.ratio = 1;
  p.t_q = p.rows = cu_q.back();
  p.t_k = cu_k.back();
  p.cu_q_host = std::move(cu_q);
  p.cu_k_host = std::move(cu_k);
  p.s_k = max_seqlen_k;
  return p;
}
}  // namespace

TEST_CASE("topk: THD blocks pad their score calls to whole q-tiles where the rows exist", "[topk][planner]") {
  const DeviceInfo dev = DeviceInfo::h200();
  // an empty segment, a 4-row tail; max_seqlen_k 3000
  Problem p = thd_plan_problem({0, 1000, 1037, 1037, 4037, 4041}, {0, 1000, 1037, 1037, 4037, 4041}, 3000);
  const TopkBlocking bl = topk_blocking(p, dev, uint64_t(3000) * 4 * 512, 0, 8);  // 512-row blocks
  REQUIRE(bl.rows == 512);
  // off: generic takes every height, nothing is padded
  set_topk_lean_window_blocks(false);
  for_each_topk_block(p, bl, [&](const TopkBlock& b) { CHECK(b.n_win == b.n); });
  CHECK(&family_of_inner(p, dev) == &generic_family());
  set_topk_lean_window_blocks(std::nullopt);  // on, the default
  int64_t next = 0, blocks = 0;
  for_each_topk_block(p, bl, [&](const TopkBlock& b) {
    INFO("block at " << b.row0 << " of " << b.n << " rows, score call " << b.n_win);
    CHECK(b.row0 == next);
    next += b.n;
    ++blocks;
    const int64_t up = (b.n + 7) / 8 * 8;
    CHECK(b.n_win == (b.row0 + up <= p.t_q ? up : b.n));
    CHECK(b.n_win <= bl.rows);
    // its score problem: the padded rows, windows in the workspace's rows
    const Problem s = topk_block_problem(p, b, nullptr, nullptr, nullptr, nullptr);
    CHECK(s.s_q == b.n_win);
    CHECK(s.has_windows);
    CHECK(s.win_stride[0] == b.n_win);
  });
  CHECK(next == p.t_q);
  CHECK(blocks >= 8);
  CHECK(&family_of_inner(p, dev) == &lean_family());
  set_topk_lean_window_blocks(std::nullopt);
}

// The selection's block size (its softmax's summation order) of a THD call: the call's
// max_seqlen_k for every block, whatever the blocking groups (so the unfused and the fused path,
// whose blocks group other segments, and any workspace budget give the same softmax bits); BSHD:
// the block's width, S_k.
TEST_CASE("topk: THD blocks select with the call's block size", "[topk][planner]") {
  const DeviceInfo dev = DeviceInfo::h200();
  // segment keys 1000, 37, 0, 3000, 4, 9000; max_seqlen_k 9000: past 8192, the long rows' 512 threads
  Problem p = thd_plan_problem({0, 1000, 1037, 1037, 4037, 4041, 9041}, {0, 1000, 1037, 1037, 4037, 4041, 13041}, 9000);
  for (uint64_t budget : {uint64_t(9000) * 4 * 512, uint64_t(9000) * 4 * 2048, uint64_t(0)}) {
    const TopkBlocking bl = topk_blocking(p, dev, budget, 0, 8);
    std::set<int64_t> widths;
    for_each_topk_block(p, bl, [&](const TopkBlock& b) {
      widths.insert(b.width);
      CHECK(topk_select_width(p, b) == p.s_k);
      CHECK(topk_select_threads(topk_select_width(p, b)) == 512);
    });
    CHECK(widths.size() >= 2);  // blocks of 4041 keys and fewer, and of 9000: one block size
  }
  p.s_k = 6000;  // every segment within 8192 keys: 256 threads throughout, as before
  p.cu_k_host = {0, 1000, 1037, 1037, 4037, 4041, 10041};
  p.t_k = 10041;
  for_each_topk_block(p, topk_blocking(p, dev, uint64_t(6000) * 4 * 512, 0, 8), [&](const TopkBlock& b) {
    CHECK(topk_select_threads(topk_select_width(p, b)) == 256);
  });
  // BSHD: the block's width (S_k)
  Problem q = vt(topk_call(2, 256, 9000, 64));
  for_each_topk_block(q, topk_blocking(q, dev), [&](const TopkBlock& b) { CHECK(topk_select_width(q, b) == 9000); });
}

// The short-row kernel takes a launch only where every row's words fit its registers: a row of
// the whole width when the rows are 16-byte aligned (lo % 4 cells before it, at most lo), else
// a width of at most 4093 (up to 3 cells before column lo).
TEST_CASE("topk: the short-row selection's fit", "[topk][planner]") {
  alignas(16) static float scores[8];
  dsa::TopkSelectArgs a{};
  a.scores = scores;
  a.ld = 4096;
  CHECK(topk_select_short_fits(a, 4096));
  CHECK(topk_select_short_fits(a, 1));
  CHECK_FALSE(topk_select_short_fits(a, 4097));
  CHECK(topk_select_short_fits(a, 4093));  // a THD block whose rows are narrower than its ld
  a.ld = 8192;
  CHECK_FALSE(topk_select_short_fits(a, 4096));
  CHECK(topk_select_short_fits(a, 4093));
  a.ld = 4094;  // rows not 16-byte aligned
  CHECK_FALSE(topk_select_short_fits(a, 4094));
  CHECK(topk_select_short_fits(a, 4093));
  a.ld = 4096;
  a.scores = scores + 1;  // a base not 16-byte aligned
  CHECK_FALSE(topk_select_short_fits(a, 4096));
  CHECK(topk_select_short_fits(a, 4093));
  // the 8-word variant: 8192 cells
  a.scores = scores;
  a.ld = 8192;
  CHECK(topk_select_short_fits(a, 8192, dsa::kTopkMediumCells));
  CHECK_FALSE(topk_select_short_fits(a, 8192));
  a.ld = 8191;
  CHECK_FALSE(topk_select_short_fits(a, 8191, dsa::kTopkMediumCells));
  CHECK(topk_select_short_fits(a, 8189, dsa::kTopkMediumCells));
}

// The register rows' policy (topk_select_regs_take): a long-row launch takes them where at least
// half of its rows are known to see at most kTopkRegsCells keys (topk_rows_within: exact without
// offsets and explicit windows, else only rows of segments that short); forced on / off by
// set_topk_select_regs.
TEST_CASE("topk: the register rows' policy counts the rows known to fit", "[topk][planner]") {
  const int64_t c = kTopkRegsCells;
  auto block = [](int64_t row0, int64_t n) {
    TopkBlock b;
    b.row0 = row0;
    b.n = n;
    return b;
  };
  // BSHD without offsets: row i sees floor((i + 1) / ratio) keys
  Problem q = vt(topk_call(1, 16384, 16384, 64));
  q.ratio = 1;
  REQUIRE_FALSE(q.has_offsets);
  CHECK(topk_rows_within(q, block(0, 16384), c) == c);  // rows 0..8188
  CHECK(topk_rows_within(q, block(8000, 100), c) == 100);
  CHECK(topk_rows_within(q, block(8100, 100), c) == c - 8100);
  CHECK(topk_rows_within(q, block(8192, 100), c) == 0);
  q.ratio = 4;
  CHECK(topk_rows_within(q, block(0, 16384), c) == 16384);
  CHECK(topk_rows_within(q, block(32000, 1000), c) == (c + 1) * 4 - 1 - 32000);
  q.ratio = 1;
  // with q_causal_offsets a row's only known bound is S_k
  q.has_offsets = true;
  CHECK(topk_rows_within(q, block(0, 16384), c) == 0);
  q.s_k = 8000;
  CHECK(topk_rows_within(q, block(0, 16384), c) == 16384);
  // THD: segment keys 1000, 37, 0, 3000, 4, 9000 (rows 1000, 37, 0, 3000, 4, 5000)
  Problem p = thd_plan_problem({0, 1000, 1037, 1037, 4037, 4041, 9041}, {0, 1000, 1037, 1037, 4037, 4041, 13041}, 9000);
  REQUIRE_FALSE(p.has_offsets);
  CHECK(topk_rows_within(p, block(0, 9041), c) == 9041);  // the last segment's rows see at most 5000 keys
  CHECK(topk_rows_within(p, block(4000, 100), c) == 100);
  p.has_offsets = true;  // the 9000-key segment's rows may see more than 8189
  CHECK(topk_rows_within(p, block(0, 9041), c) == 4041);
  CHECK(topk_rows_within(p, block(4000, 100), c) == 41);
  p.has_offsets = false;
  p.has_windows = true;
  CHECK(topk_rows_within(p, block(0, 9041), c) == 4041);
  // the policy: at least half; forced either way
  CHECK(topk_select_regs_take(1, 2));
  CHECK(topk_select_regs_take(4041, 8082));
  CHECK_FALSE(topk_select_regs_take(4041, 8083));
  CHECK_FALSE(topk_select_regs_take(0, 0));
  set_topk_select_regs(true);
  CHECK(topk_select_regs_take(0, 5));
  set_topk_select_regs(false);
  CHECK_FALSE(topk_select_regs_take(5, 5));
  set_topk_select_regs(std::nullopt);
  CHECK(topk_select_regs_take(5, 5));
}
