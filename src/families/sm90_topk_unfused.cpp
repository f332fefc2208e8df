// Host side of the unfused top-k (templates/sm90_topk_unfused.cuh). Per block of rows: the rows
// kernel writes each row's window, the dispatcher's score family writes the block's scores into
// the workspace (a causal problem of its own, or explicit windows: block_scores_problem; the same
// cells, the same bits as indexer_forward), and the selection kernel writes the block's outputs. Blocks are walked on the host in launch(), so
// no table grows with S_q; the workspace holds one block.
#include "families/sm90_topk_unfused.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "core/env.hpp"
#include "core/util.hpp"
#include "families/family_params.hpp"
#include "jit/codegen.hpp"
#include "jit/runtime.hpp"
#include "ops/compile_mode.hpp"
#include "ops/scores_args.hpp"
#include "sm90_topk_fused_args.cuh"
#include "sm90_topk_unfused_args.cuh"

namespace dsa_indexer::detail {
namespace {

enum Slot { kLayout };
// The selection's two block sizes, one CTA per row: 256 threads for short rows, 512 for long
// ones (measured on the H200, docs/PERF_NOTES.md); no row cache in shared memory (it did not
// pay: the sampled threshold reads a long row once), so several CTAs share an SM.
constexpr int kSelectThreadsShort = 256, kSelectThreadsLong = 512;
constexpr int kLseWarps = 8;  // rows per CTA of sm90_topk_lse
constexpr int64_t kLongRow = 8192;
// The register rows' two launches (topk_select_regs) stride over the rows with this many CTAs
// per SM (4 waves of their 2 CTAs of 512 threads per SM), so that neither spends a CTA on each
// row it skips.
constexpr uint32_t kRegsCtasPerSm = 8;
// The plan's launches and the module's kernels, in render()'s order.
enum SelectKernel : int {
  kRowsKernel = 0,      // sm90_topk_rows
  kSelect256 = 1,       // sm90_topk_select<256>
  kSelect512 = 2,       // sm90_topk_select<512>
  kLseKernel = 3,       // sm90_topk_lse
  kShort256 = 4,        // sm90_topk_select_short<256>: rows of at most 4096 cells
  kMedium256 = 5,       // sm90_topk_select_short<256, 8>: rows of at most 8192 cells
  kRegsGeneral512 = 6,  // sm90_topk_select<512, true>: the register rows' general launch
  kShort512 = 7,        // sm90_topk_select_short<512>: the register rows' short launch
};

std::atomic<uint64_t> g_budget{0};
std::atomic<bool> g_wave{false};
FlagOverride g_lean_windows;
FlagOverride g_lse_lanes;
FlagOverride g_select_short;
FlagOverride g_select_medium;
std::atomic<int> g_regs_ctas{-1};  // set_topk_select_regs_ctas
FlagOverride g_regs_narrow;
FlagOverride g_narrow_long;
FlagOverride g_regs_mid;
FlagOverride g_select_regs;  // none: the policy (topk_select_regs_take)
// The call's blocks: within the budget at any S_k (blocks of fewer rows than one wave of q-tiles
// run lean's split variant), or the measurement override (set_topk_unfused_blocking).
TopkBlocking unfused_blocking(const Problem& p, const DeviceInfo& dev) {
  return topk_blocking(p, dev, g_budget.load(std::memory_order_relaxed), 0, g_wave.load(std::memory_order_relaxed) ? 0 : 8);
}

// Rows of a block's score call with explicit windows: n up to whole 8-row q-tiles (lean's
// row-windows gate), where the call has that many rows from the block's first (`left`); the
// workspace holds them (a block's rows are at most the blocking's, a multiple of 8).
int64_t padded_rows(int64_t n, int64_t left) {
  if (!topk_lean_window_blocks()) return n;  // generic takes any height
  const int64_t up = (n + 7) / 8 * 8;
  return up <= left ? up : n;
}

constexpr const char* kTopkLayoutChoices[] = {"bshd", "thd"};
constexpr const char* kTopkLayoutLiterals[] = {"dsa::kLayoutBshd", "dsa::kLayoutThdLocal"};

class TopkUnfusedFamily final : public Family {
 public:
  const char* name() const override { return "sm90_topk_unfused"; }
  const char* option() const override { return "topk_unfused"; }
  KernelFamily id() const override { return KernelFamily::topk_unfused; }
  Operation operation() const override { return Operation::topk; }
  DType input_dtype() const override { return DType::bf16; }
  // FP8 (e4m3) q / k with their scales: the blocks' scores come from the FP8 score families (the
  // block problems carry the dtype and the scales at the block's rows and keys); the selection
  // reads fp32 scores either way.
  bool serves_input(DType d) const override { return d == DType::bf16 || d == DType::e4m3; }
  int auto_priority() const override { return 1; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {{"kLayout", ParamDesc::choice, "int", "", kTopkLayoutChoices, kTopkLayoutLiterals, 2}};
    return p;
  }
  // Every validated top-k call: the block's score family is chosen per block by the dispatcher.
  Gate check(const Problem&, const DeviceInfo&) const override { return Gate::pass(); }
  std::string gate_key(const Problem&, const DeviceInfo&) const override { return std::string(); }

  Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose) const override {
    Plan plan;
    plan.spec = topk_unfused_spec(p.layout);
    plan.empty = p.rows == 0;
    const TopkBlocking bl = unfused_blocking(p, dev);
    plan.workspace_bytes = bl.total_bytes;
    // One launch per SelectKernel, in its order.
    auto add = [&](int threads, uint32_t smem) -> KernelLaunch& {
      KernelLaunch& l = plan.launches[plan.n_launches++];
      l.block[0] = static_cast<uint32_t>(threads);
      l.smem = smem;
      return l;
    };
    const uint32_t general_smem = plan.spec.dynamic_smem, short_smem = static_cast<uint32_t>(dsa::kTopkShortSmemBytes);
    add(kTopkRowsThreads, 0);
    add(kSelectThreadsShort, general_smem);
    add(kSelectThreadsLong, general_smem);
    add(32 * kLseWarps, 0);  // BSHD lse: sm90_topk_lse, a warp per row
    add(kSelectThreadsShort, short_smem);
    add(kSelectThreadsShort, short_smem);
    // The register rows of long-row launches (topk_select_regs): sm90_topk_select<512, true> (the
    // rows longer than 8192 cells), after sm90_topk_select_short<512> (the others). The grid is
    // the most CTAs they stride with.
    add(kSelectThreadsLong, general_smem).grid[0] = static_cast<uint32_t>(dev.sm_count) * kRegsCtasPerSm;
    add(kSelectThreadsLong, short_smem);
    return plan;
  }

  // Blocks with explicit windows (THD, BSHD products past 2^31): with topk_lean_window_blocks()
  // (the default) dispatched like any score call: lean's row-windows variant where
  // its gates hold (whole q-tiles, which the padding gives every block but a tail at the call's
  // last row; one wave), one compile for every block height, else generic.
  KernelFamily inner_family(const Problem& inner) const override {
    return inner.has_windows && !topk_lean_window_blocks() ? KernelFamily::generic : KernelFamily::automatic;
  }

  std::vector<Problem> inner_problems(const Problem& p, const DeviceInfo& dev) const override {
    std::vector<Problem> v;
    if (p.rows == 0) return v;  // an empty plan launches nothing
    std::set<std::pair<int64_t, int64_t>> shapes;
    for_each_topk_block(p, unfused_blocking(p, dev), [&](const TopkBlock& b) {
      if (b.width > 0 && shapes.insert({b.score_rows(), b.width}).second) v.push_back(topk_block_problem(p, b, nullptr, nullptr, nullptr, nullptr));
    }, /*shapes_only=*/true);
    return v;
  }

  void render(const KernelSpec&, GeneratedSource& g) const override {
    // in SelectKernel's order
    g.kernels.push_back("dsa::sm90_topk_rows<DsaKernelConfig::kLayout>");
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select<{}>", kSelectThreadsShort));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select<{}>", kSelectThreadsLong));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_lse<{}>", kLseWarps));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select_short<{}>", kSelectThreadsShort));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select_short<{}, 8>", kSelectThreadsShort));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select<{}, true>", kSelectThreadsLong));
    g.kernels.push_back(fmt::format("dsa::sm90_topk_select_short<{}>", kSelectThreadsLong));
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    const DeviceInfo& dev = device_info(p.device);
    const TopkBlocking bl = unfused_blocking(p, dev);
    auto* ws = static_cast<unsigned char*>(p.topk.workspace);
    dsa::TopkBlockArgs rb = topk_rows_args(p, bl, ws);
    for_each_topk_block(p, bl, [&](const TopkBlock& b) {
      launch_topk_rows(plan, k, rb, b, stream);

      if (b.width > 0) {
        const Problem s = topk_block_problem(p, b, ws, rb.ks, rb.ke, rb.offset);
        const Family& f = choose_family(s, dev, inner_family(s), env().disable_lean);
        Plan sp = make_plan(s, dev, f);
        if (!sp.empty) {
          std::shared_ptr<LoadedKernel> sk = kernel_for_call(s, dev, inner_family(s), sp);
          launch_forward(s, sp, *sk, stream);
        }
      }

      dsa::TopkSelectArgs sa{};
      sa.scores = reinterpret_cast<const float*>(ws);
      sa.ld = b.width;
      set_topk_outputs(sa, p, b, rb.rows);
      float* lse = p.lse ? static_cast<float*>(p.lse) + b.batch * p.lse_stride[0] + b.row0 * p.lse_stride[1] : nullptr;
      const bool lanes = !p.is_thd() && topk_lse_lanes();  // BSHD: the fused sweep's order
      if (lse && !lanes) {  // the selection's fp64 two-pass sum
        sa.lse = lse;
        sa.lse_stride = p.lse_stride[1];
      }
      launch_topk_select(plan, k, sa, topk_select_width(p, b), topk_rows_within(p, b, kTopkRegsCells), stream);
      if (lse && lanes) launch_topk_lse(plan, k, sa, lse, p.lse_stride[1], stream);
    });
  }
};

}  // namespace

// Calls f(block) for every block of the call, in output-row order.
// `shapes_only` (inner_problems): at least one block of every distinct (rows, width) shape,
// skipping the blocks whose shape an earlier one already had (BSHD: the other batch entries and
// the full blocks between the first and the last; THD: the further full blocks of a segment), so
// that a line of 2^31 rows costs a few blocks, not 2^28.
void for_each_topk_block(const Problem& p, const TopkBlocking& bl, const std::function<void(const TopkBlock&)>& f,
                         bool shapes_only) {
  if (!p.is_thd()) {
    const int64_t batches = shapes_only ? std::min<int64_t>(p.batch, 1) : p.batch;
    const int64_t last_row0 = p.s_q > 0 ? (p.s_q - 1) / bl.rows * bl.rows : 0;
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t i0 = 0; i0 < p.s_q; i0 += bl.rows) {
        TopkBlock k;
        k.batch = b;
        k.row0 = i0;
        k.n = std::min(bl.rows, p.s_q - i0);
        k.k_base = 0;
        k.width = p.s_k;
        k.out_row = b * p.s_q + i0;
        k.n_win = topk_causal_blocks(p) ? k.n : padded_rows(k.n, p.s_q - i0);
        f(k);
        if (shapes_only && i0 + bl.rows < last_row0) i0 = last_row0 - bl.rows;  // the next block is the last
      }
    return;
  }
  // THD: consecutive packed rows whose segments' keys fit the block's width; a segment longer
  // than the block's rows is split (its keys alone never exceed the width: max_seqlen_k).
  const auto& cq = p.cu_q_host;
  const auto& ck = p.cu_k_host;
  const int64_t n_seg = static_cast<int64_t>(cq.size()) - 1;
  int64_t seg = 0;
  int64_t r = 0;
  while (r < p.t_q) {
    while (seg < n_seg && cq[seg + 1] <= r) ++seg;  // the segment of row r (skips empty ones)
    TopkBlock k;
    k.row0 = r;
    k.out_row = r;
    k.k_base = ck[seg];
    int64_t last = seg;  // the last segment the block touches
    int64_t end = std::min<int64_t>(r + bl.rows, cq[seg + 1]);
    while (end == cq[last + 1] && end < p.t_q && end - r < bl.rows) {
      int64_t nxt = last + 1;
      while (nxt < n_seg && cq[nxt + 1] == cq[nxt]) ++nxt;  // empty segments add no rows
      if (nxt >= n_seg || ck[nxt + 1] - k.k_base > bl.width) break;
      last = nxt;
      end = std::min<int64_t>(r + bl.rows, cq[last + 1]);
    }
    k.n = end - r;
    k.width = ck[last + 1] - k.k_base;
    k.n_win = padded_rows(k.n, p.t_q - r);
    f(k);
    // A full block inside one segment: the segment's further full blocks have its shape.
    if (shapes_only && last == seg && k.n == bl.rows) end += (cq[seg + 1] - end) / bl.rows * bl.rows;
    r = end;
  }
}

void for_each_topk_row_block(const Problem& p, const TopkBlocking& bl, const std::function<void(const TopkBlock&)>& f) {
  const auto& cq = p.cu_q_host;
  const auto& ck = p.cu_k_host;
  const int64_t n_seg = static_cast<int64_t>(cq.size()) - 1;
  int64_t first = 0;  // the segment of the block's first row
  for (int64_t r = 0; r < p.t_q; r += bl.rows) {
    const int64_t end = std::min<int64_t>(r + bl.rows, p.t_q);
    while (first < n_seg && cq[first + 1] <= r) ++first;  // (skips empty segments)
    int64_t last = first;                                 // the segment of its last row
    while (last < n_seg && cq[last + 1] < end) ++last;
    TopkBlock k;
    k.row0 = r;
    k.out_row = r;
    k.n = end - r;
    k.k_base = ck[first];
    k.width = ck[last + 1] - k.k_base;
    k.n_win = padded_rows(k.n, p.t_q - r);
    f(k);
  }
}

// The score problem of one block: a BSHD problem of one batch entry over the block's rows and
// keys (strides of extent-1 dimensions nested). What
// launch() runs and what inner_problems() plans for warmup, so that the two cannot disagree.
// A BSHD block is a causal problem of its own (the offset of its first row, saturated at
// INT32_MAX: exact when S_k * ratio <= 2^31, since every row past the saturation then sees all
// S_k keys either way), so that the fast score families serve it; otherwise (THD, or larger
// products) its windows are given explicitly, which only the generic family takes.
bool topk_causal_blocks(const Problem& p) { return !p.is_thd() && p.s_k * p.ratio <= (int64_t(1) << 31); }

Problem topk_block_problem(const Problem& p, const TopkBlock& b, void* scores, const int32_t* ks, const int32_t* ke,
                             const int32_t* offset) {
  const uint64_t esz_q = p.qk_dtype == DType::e4m3 ? 1 : 2, esz_w = p.w_dtype == DType::f32 ? 4 : 2;
  Problem s;
  s.op = Operation::scores;
  s.layout = Layout::bshd;
  s.batch = 1;
  const int64_t n = b.score_rows();  // the score call's rows (padding included)
  s.rows = s.s_q = s.t_q = n;
  s.s_k = s.t_k = s.out_cols = b.width;
  s.heads = p.heads;
  s.head_dim = p.head_dim;
  s.qk_dtype = p.qk_dtype;
  s.w_dtype = p.w_dtype;
  s.ratio = p.ratio;
  s.sm_scale = p.sm_scale;
  s.device = p.device;
  const int64_t qb = b.batch * p.q_stride[0] + b.row0 * p.q_stride[1];
  const int64_t kb = b.batch * p.k_stride[0] + b.k_base * p.k_stride[1];
  const int64_t wb = b.batch * p.w_stride[0] + b.row0 * p.w_stride[1];
  // As integers: a manifest's problem has null operands, and an offset from null is undefined.
  auto at = [](const void* base, int64_t elems, uint64_t esz) {
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + static_cast<uint64_t>(elems) * esz);
  };
  s.q = at(p.q, qb, esz_q);
  s.k = at(p.k, kb, esz_q);
  s.w = at(p.w, wb, esz_w);
  s.q_stride[0] = n * p.q_stride[1];
  s.q_stride[1] = p.q_stride[1];
  s.q_stride[2] = p.q_stride[2];
  s.k_stride[0] = b.width * p.k_stride[1];
  s.k_stride[1] = p.k_stride[1];
  s.w_stride[0] = n * p.w_stride[1];
  s.w_stride[1] = p.w_stride[1];
  s.w_stride[2] = p.w_stride[2];
  s.out = scores;
  s.out_stride[0] = n * b.width;
  s.out_stride[1] = b.width;
  // FP8: the scales of the block's rows (q_scale (B, S_q, H) / THD (T_q, H)) and keys (k_scale
  // (B, S_k[, 1]) / THD (T_k[, 1])), as a B 1 problem's (its batch strides nested)
  s.has_q_scale = p.has_q_scale;
  s.has_k_scale = p.has_k_scale;
  if (p.has_q_scale) {
    s.q_scale = at(p.q_scale, b.batch * p.q_scale_stride[0] + b.row0 * p.q_scale_stride[1], 4);
    s.q_scale_stride[0] = n * p.q_scale_stride[1];
    s.q_scale_stride[1] = p.q_scale_stride[1];
    s.q_scale_stride[2] = p.q_scale_stride[2];
  }
  if (p.has_k_scale) {
    s.k_scale = at(p.k_scale, b.batch * p.k_scale_stride[0] + b.k_base * p.k_scale_stride[1], 4);
    s.k_scale_stride[0] = b.width * p.k_scale_stride[1];
    s.k_scale_stride[1] = p.k_scale_stride[1];
  }
  if (topk_causal_blocks(p)) {
    s.has_offsets = true;
    s.offsets = offset;
    s.offsets_stride = 1;
  } else {
    s.has_windows = true;
    s.ks = ks;
    s.ke = ke;
    s.win_stride[0] = n;
    s.win_stride[1] = 1;
  }
  return s;
}

dsa::TopkBlockArgs topk_rows_args(const Problem& p, const TopkBlocking& bl, unsigned char* ws) {
  dsa::TopkBlockArgs rb{};
  rb.a = make_args(p);
  rb.global = p.topk.global_indices ? 1 : 0;
  rb.ks = reinterpret_cast<i32*>(ws + bl.ks_offset);
  rb.ke = reinterpret_cast<i32*>(ws + bl.ke_offset);
  rb.rows = reinterpret_cast<dsa::TopkRow*>(ws + bl.rows_offset);
  rb.offset = topk_causal_blocks(p) ? reinterpret_cast<i32*>(ws + bl.offset_offset) : nullptr;
  return rb;
}

// The rows kernel is the first function of both top-k modules (the unfused one's and the
// fused one's), with the plan's first launch.
void launch_topk_rows(const Plan& plan, const LoadedKernel& k, dsa::TopkBlockArgs& rb, const TopkBlock& b, CUstream stream) {
  rb.row0 = b.row0;
  rb.batch = b.batch;
  rb.n_rows = b.n;
  rb.n_win = b.score_rows();
  rb.k_base = b.k_base;
  KernelLaunch rows = plan.launches[kRowsKernel];
  rows.grid[0] = static_cast<uint32_t>((rb.n_win + kTopkRowsThreads - 1) / kTopkRowsThreads);
  void* rp[] = {&rb};
  launch_one(k.functions[kRowsKernel], rows, stream, rp, "cuLaunchKernelEx(sm90_topk_rows)");
}

const Family& topk_unfused_family() {
  static const TopkUnfusedFamily f;
  return f;
}

int topk_select_threads(int64_t width) { return width > kLongRow ? kSelectThreadsLong : kSelectThreadsShort; }

int64_t topk_select_width(const Problem& p, const TopkBlock& b) { return p.is_thd() ? p.s_k : b.width; }

// BSHD: the block's lse in the fused sweep's order (sm90_topk_lse.cuh), a warp per row; the
// sample stride is the sweep's for the call's S_k (the block's width).
void launch_topk_lse(const Plan& plan, const LoadedKernel& k, const dsa::TopkSelectArgs& a, float* lse, int64_t stride,
                     CUstream stream) {
  dsa::TopkLseArgs args{};
  args.scores = a.scores;
  args.ld = a.ld;
  args.rows = a.rows;
  args.n_rows = a.n_rows;
  args.sample_stride = dsa::lean_topk_sample_stride(a.ld);
  args.lse = lse;
  args.lse_stride = stride;
  KernelLaunch l = plan.launches[kLseKernel];
  l.grid[0] = static_cast<uint32_t>((a.n_rows + kLseWarps - 1) / kLseWarps);
  void* params[] = {&args};
  launch_one(k.functions[kLseKernel], l, stream, params, "cuLaunchKernelEx(sm90_topk_lse)");
}

bool topk_select_short_fits(const dsa::TopkSelectArgs& a, int64_t width, int64_t cells) {
  // A row's words start at its column lo rounded down to 16 bytes: lo % 4 cells before it when
  // the rows are 16-byte aligned, at most lo, so that a row of the whole width still fits.
  const bool aligned = a.ld % 4 == 0 && reinterpret_cast<uintptr_t>(a.scores) % 16 == 0;
  return (aligned && width == a.ld ? width : width + 3) <= cells;
}

void launch_topk_select(const Plan& plan, const LoadedKernel& k, const dsa::TopkSelectArgs& a, int64_t width, int64_t fitting_rows,
                        CUstream stream) {
  dsa::TopkSelectArgs args = a;
  args.skip_words = 0;  // set below for the one launch that skips rows an earlier one selected
  void* params[] = {&args};
  const int64_t all_rows = std::min<int64_t>(a.n_rows, int64_t(1) << 30);  // the kernels stride over rows beyond
  auto go = [&](int which, int64_t grid) {
    KernelLaunch sel = plan.launches[which];
    sel.grid[0] = static_cast<uint32_t>(grid);
    launch_one(k.functions[which], sel, stream, params, "cuLaunchKernelEx(sm90_topk_select)");
  };
  const bool long_rows = width > kLongRow;
  const bool size_free = a.softmax == nullptr && a.lse == nullptr;  // no output depends on the block size
  const bool short_rows = !long_rows && topk_select_short() && topk_select_short_fits(a, width, dsa::kTopkShortCells);
  // Rows of 4097..8192 cells of a call without softmax and lse by the narrow register rows
  // (topk_select_regs_mid), as a long-row launch whose rows all fit (not where the register rows
  // are forced off).
  const bool mid_rows = !long_rows && width > dsa::kTopkShortCells && size_free && topk_select_regs_mid() &&
                        topk_select_regs_narrow() && g_select_regs.forced().value_or(true);
  const bool regs = (long_rows && topk_select_regs_take(fitting_rows, a.n_rows)) || mid_rows;
  const bool medium_rows = !long_rows && !short_rows && !mid_rows && topk_select_medium() && topk_select_short_fits(a, width, dsa::kTopkMediumCells);
  if (short_rows || medium_rows) return go(short_rows ? kShort256 : kMedium256, all_rows);
  // Long rows of a call without softmax and lse (no output depends on the block size) by
  // sm90_topk_select<256> with topk_select_narrow_long: by default up to kTopkNarrowLongCells,
  // forced on at every width.
  const bool narrow_long =
      long_rows && size_free && g_narrow_long.forced().value_or(kTopkSelectNarrowLong && width <= kTopkNarrowLongCells);
  if (!regs) return go(long_rows && !narrow_long ? kSelect512 : kSelect256, all_rows);
  // The register rows: the rows of at most 8192 cells from registers, then the others.
  const int64_t grid = std::min<int64_t>(all_rows, plan.launches[kRegsGeneral512].grid[0]);
  const int ctas = g_regs_ctas.load(std::memory_order_relaxed);  // measurements: the first launch's grid
  const int64_t sms = plan.launches[kRegsGeneral512].grid[0] / kRegsCtasPerSm;
  const int64_t short_grid = ctas < 0 ? grid : ctas == 0 ? all_rows : std::min<int64_t>(all_rows, sms * ctas);
  if (topk_select_regs_narrow() && size_free) {
    // The narrow register rows: without softmax and lse no output depends on the block size
    // (the selected set is unique, and indices and values follow from it), so the rows of at most
    // 4096 cells take sm90_topk_select_short<256> (more rows in flight per SM) first.
    go(kShort256, all_rows);
    args.skip_words = dsa::kTopkShortCells / 4;
  }
  go(kShort512, short_grid);
  args.skip_words = 0;
  go(kRegsGeneral512, grid);
}

KernelSpec topk_unfused_spec(Layout layout) {
  KernelSpec s;
  s.family = &topk_unfused_family();
  s.values[kLayout] = layout == Layout::bshd ? 0 : 1;
  s.dynamic_smem = static_cast<uint32_t>(dsa::kTopkFixedSmemBytes);
  return s;
}

void set_topk_unfused_blocking(uint64_t budget, bool one_wave) {
  g_budget.store(budget, std::memory_order_relaxed);
  g_wave.store(one_wave, std::memory_order_relaxed);
}

bool topk_lean_window_blocks() { return g_lean_windows.get(kTopkLeanWindowBlocks); }
bool topk_lse_lanes() { return g_lse_lanes.get(kTopkLseLanes); }
void set_topk_lse_lanes(std::optional<bool> on) { g_lse_lanes.set(on); }
bool topk_select_short() { return g_select_short.get(kTopkSelectShort); }
void set_topk_select_short(std::optional<bool> on) { g_select_short.set(on); }
bool topk_select_medium() { return g_select_medium.get(kTopkSelectMedium); }
void set_topk_select_medium(std::optional<bool> on) { g_select_medium.set(on); }
bool topk_select_regs_take(int64_t fitting_rows, int64_t n_rows) {
  if (const std::optional<bool> forced = g_select_regs.forced()) return *forced;
  return kTopkSelectRegs && n_rows > 0 && 2 * fitting_rows >= n_rows;
}
bool topk_select_regs_narrow() { return g_regs_narrow.get(kTopkSelectRegsNarrow); }
void set_topk_select_regs_narrow(std::optional<bool> on) { g_regs_narrow.set(on); }
bool topk_select_regs_mid() { return g_regs_mid.get(kTopkSelectRegsMid); }
void set_topk_select_regs_mid(std::optional<bool> on) { g_regs_mid.set(on); }
void set_topk_select_narrow_long(std::optional<bool> on) { g_narrow_long.set(on); }
void set_topk_select_regs_ctas(int ctas_per_sm) { g_regs_ctas.store(ctas_per_sm, std::memory_order_relaxed); }
void set_topk_select_regs(std::optional<bool> on) { g_select_regs.set(on); }

int64_t topk_rows_within(const Problem& p, const TopkBlock& b, int64_t cells) {
  // Rows [i0, i1) of a segment of s_k keys whose causal window (zero offset) holds at most
  // `cells` keys: floor((i + 1) / ratio) <= cells, i.e. i < (cells + 1) ratio - 1.
  const bool exact = !p.has_offsets && !p.has_windows;
  auto count = [&](int64_t i0, int64_t i1, int64_t s_k) -> int64_t {
    if (i1 <= i0) return 0;
    if (s_k <= cells) return i1 - i0;  // no row sees more than its segment's keys
    if (!exact) return 0;
    const int64_t end = std::min(i1, (cells + 1) * p.ratio - 1);
    return std::max<int64_t>(end - i0, 0);
  };
  if (!p.is_thd()) return count(b.row0, b.row0 + b.n, p.s_k);
  int64_t n = 0;
  const std::vector<int32_t>& cq = p.cu_q_host;
  const std::vector<int32_t>& ck = p.cu_k_host;
  for (size_t s = 0; s + 1 < cq.size() && s + 1 < ck.size(); ++s) {
    const int64_t q0 = cq[s], q1 = cq[s + 1];
    const int64_t lo = std::max<int64_t>(q0, b.row0), hi = std::min<int64_t>(q1, b.row0 + b.n);
    n += count(lo - q0, hi - q0, int64_t(ck[s + 1]) - ck[s]);
  }
  return n;
}
void set_topk_lean_window_blocks(std::optional<bool> on) { g_lean_windows.set(on); }

bool topk_unfused_short_blocks(const Problem& p, const DeviceInfo& dev) {
  const int64_t half_wave = int64_t(dev.sm_count) * 4;  // 8-row q-tiles on half of the SMs
  const int64_t total_rows = p.is_thd() ? p.t_q : p.s_q;
  return total_rows > half_wave && unfused_blocking(p, dev).rows < half_wave;
}

TopkBlocking topk_blocking(const Problem& p, const DeviceInfo& dev, uint64_t budget, uint64_t row_bytes, int64_t min_rows) {
  if (budget == 0) budget = kTopkDefaultBudget;
  TopkBlocking bl;
  const int64_t total_rows = p.is_thd() ? p.t_q : p.s_q;  // rows of one block come from one batch entry
  // THD: the widest block is the longest segment's keys (blocks group segments up to that width).
  bl.width = std::max<int64_t>(p.s_k, 1);
  // Enough rows for one q-tile of 8 rows on every SM, or as many as the budget holds.
  if (min_rows <= 0) min_rows = std::max<int64_t>(8, int64_t(dev.sm_count) * 8);
  if (row_bytes == 0) row_bytes = uint64_t(bl.width) * 4;
  const int64_t by_budget = static_cast<int64_t>(budget / row_bytes);
  const int64_t max_rows = std::max<int64_t>(min_rows, by_budget / 8 * 8);
  // Blocks of about equal size (multiples of the 8-row q-tile), so that the last one is not a
  // sliver: a block with fewer q-tiles than SMs is served by a slower family.
  const int64_t n_blocks = (std::max<int64_t>(total_rows, 1) + max_rows - 1) / max_rows;
  const int64_t even = (std::max<int64_t>(total_rows, 1) + n_blocks - 1) / n_blocks;
  bl.rows = std::min<int64_t>(std::max<int64_t>(min_rows, (even + 7) / 8 * 8), std::max<int64_t>(total_rows, 1));
  bl.scores_bytes = align256(uint64_t(bl.rows) * row_bytes);
  bl.ks_offset = bl.scores_bytes;
  bl.ke_offset = bl.ks_offset + align256(uint64_t(bl.rows) * 4);
  bl.rows_offset = bl.ke_offset + align256(uint64_t(bl.rows) * 4);
  bl.offset_offset = bl.rows_offset + align256(uint64_t(bl.rows) * sizeof(dsa::TopkRow));
  bl.total_bytes = bl.offset_offset + 256;
  return bl;
}

}  // namespace dsa_indexer::detail
