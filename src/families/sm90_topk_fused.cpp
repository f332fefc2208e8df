// Host side of the fused top-k (templates/sm90_topk_fused.cuh, sm90_topk_fused_sweep.cuh): the
// outer family walks the unfused path's blocks of rows; per block the rows kernel writes each
// row's window (TopkRow: the output index bias), the sweep family (dispatched per block, compiled
// per block shape like the lean scores kernel it is) appends each row's candidates to its
// buffer, and the candidates kernel writes the block's outputs. The workspace holds one block's
// buffers: rows x entries x 8 bytes plus a count per row, independent of S_k past 4k entries.
#include "families/sm90_topk_fused.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/env.hpp"
#include "core/util.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "jit/codegen.hpp"
#include "jit/runtime.hpp"
#include "ops/compile_mode.hpp"
#include "dsa_args.cuh"
#include "sm90_indexer_lean_args.cuh"
#include "sm90_topk_candidates_args.cuh"
#include "sm90_topk_fused_args.cuh"

namespace dsa_indexer::detail {
namespace {

enum Slot { kLayout };
// The rows kernel's layout: THD calls' rows take their windows from cu_seqlens (THD local: the
// output index bias follows TopkOptions::indices either way).
constexpr const char* kLayoutChoices[] = {"bshd", "thd"};
constexpr const char* kLayoutLiterals[] = {"dsa::kLayoutBshd", "dsa::kLayoutThdLocal"};
// The sweep's epilogue: 4 rows per consumer, 2 consumers (LeanTopkRow), and the stage slots
// through which the consumers hand their cells to the selector warps.
constexpr int kSweepSmem = dsa::kLeanTopkSweepSmemBytes;

std::atomic<int64_t> g_candidates{0};
std::atomic<int32_t> g_refresh{-1};
std::atomic<bool> g_margin_set{false};
std::atomic<float> g_margin{0.0f};
std::atomic<uint32_t*> g_stats{nullptr};
std::atomic<uint64_t> g_budget{0};
FlagOverride g_part;
FlagOverride g_ragged_thd;
FlagOverride g_thd_rows;
FlagOverride g_automatic;
FlagOverride g_redo_split;
FlagOverride g_redo_slot_items;
FlagOverride g_redo_join_cut;
FlagOverride g_redo_pool;
FlagOverride g_redo_seed;
std::atomic<int32_t> g_redo_slots{0};
// The sweep family's slot beyond lean's parameters: the partitioned appends (omitted at 0, so the
// variants from before keep their sources and keys).
std::size_t part_slot() { return lean_family().params().size(); }
std::size_t lse_slot() { return part_slot() + 1; }
// The sample stride of THD variants whose max_seqlen_k passes 16384 (their kSeqK is 0); omitted
// at 0, so every other variant keeps its source and key.
std::size_t stride_slot() { return lse_slot() + 1; }
// BSHD sweeps of calls with the split redo: their module holds its kernel too (omitted at 0).
std::size_t redo_slot() { return stride_slot() + 1; }
// Both fused families' inputs: bf16, and E4M3 with its scales (lean's FP8 main loop).
bool fused_serves_input(DType d) { return d == DType::bf16 || d == DType::e4m3; }

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

// The split redo of a call's blocks (parts 0: none, the whole-row redo serves its failed rows):
// BSHD sampled sweeps without lse (a chunk's lse would be part of a row's).
TopkRedoSplit call_redo_split(const Problem& p) {
  if (p.is_thd() || p.has_lse || !topk_fused_redo_split() || std::isnan(topk_fused_margin())) return {};
  return topk_redo_split(p.topk.k, topk_fused_candidates(p.topk.k, p.s_k), p.s_k);
}

// The split redo's slots: kTopkRedoSlots or the override; the redo pool's, a block's q-tiles
// (every failed one is listed).
int32_t redo_slots(const TopkBlocking& bl, bool pool) {
  return pool ? static_cast<int32_t>(std::min<int64_t>((bl.rows + 7) / 8, INT32_MAX)) : topk_fused_redo_slots();
}

// The split redo's region, after the blocking's: i32 slot_of [q-tiles], tile_of [slots],
// part_count [slots][parts][8], then u64 part_cand [slots][parts][8][part_ld]; the redo pool's:
// slot_of, tile_of [q-tiles], the rows' dsa::LeanTopkPoolRow [rows] (lock and floor), then
// part_cand [CTAs][8][part_ld] (a buffer per CTA of the split launch, at most one per SM) and no
// part_count.
struct RedoLayout {
  uint64_t slot_of = 0, tile_of = 0, part_count = 0, pool_rows = 0, part_cand = 0, end = 0;
};
RedoLayout redo_layout(const TopkBlocking& bl, const TopkRedoSplit& rs, const DeviceInfo& dev, bool pool) {
  const int32_t slots = redo_slots(bl, pool);
  RedoLayout l;
  l.slot_of = align256(bl.extra_offset);
  l.tile_of = l.slot_of + align256(uint64_t((bl.rows + 7) / 8) * 4);
  l.part_count = l.tile_of + align256(uint64_t(slots) * 4);
  const uint64_t chunks = pool ? uint64_t(std::max(dev.sm_count, 1)) * 8 : uint64_t(slots) * 8 * uint64_t(rs.parts);
  l.pool_rows = l.part_count + (pool ? 0 : align256(chunks * 4));
  l.part_cand = l.pool_rows + (pool ? align256(uint64_t(bl.rows) * sizeof(dsa::LeanTopkPoolRow)) : 0);
  l.end = l.part_cand + chunks * uint64_t(rs.part_ld) * 8;
  return l;
}

TopkBlocking fused_blocking(const Problem& p, const DeviceInfo& dev) {
  const int64_t ld = topk_fused_candidates(p.topk.k, p.s_k);
  const uint64_t budget = g_budget.load(std::memory_order_relaxed);
  // per row: its candidates, its count, its failed flag (the sampled sweep's, for the redo)
  TopkBlocking bl = topk_blocking(p, dev, budget != 0 ? budget : kTopkFusedBudget, uint64_t(ld) * 8 + 4 + 1);
  bl.extra_offset = bl.total_bytes;
  if (const TopkRedoSplit rs = call_redo_split(p); rs.parts > 0) bl.total_bytes = redo_layout(bl, rs, dev, topk_fused_redo_pool()).end;
  return bl;
}

// The fused path's blocks: THD row ranges (topk_fused_thd_rows), else the unfused path's.
void for_each_fused_block(const Problem& p, const TopkBlocking& bl, const std::function<void(const TopkBlock&)>& f,
                          bool shapes_only = false) {
  if (p.is_thd() && topk_fused_thd_rows()) for_each_topk_row_block(p, bl, f);
  else for_each_topk_block(p, bl, f, shapes_only);
}

struct Buffers {
  uint64_t* cand;
  int32_t* count;
  uint8_t* fail;
  int64_t ld;
  // the split redo (parts 0: none)
  TopkRedoSplit redo{};
  int32_t slots = 0;
  int32_t* slot_of = nullptr;
  int32_t* tile_of = nullptr;
  int32_t* part_count = nullptr;
  uint64_t* part_cand = nullptr;
  void* pool_rows = nullptr;  // the redo pool (dsa::LeanTopkPoolRow [rows]), else null
  bool pool = false;        // the redo pool (topk_fused_redo_pool when the buffers were laid out)
};
Buffers buffers(const Problem& p, const TopkBlocking& bl, const DeviceInfo& dev, unsigned char* ws) {
  const int64_t ld = topk_fused_candidates(p.topk.k, p.s_k);
  unsigned char* count = ws + uint64_t(bl.rows) * uint64_t(ld) * 8;
  Buffers b{reinterpret_cast<uint64_t*>(ws), reinterpret_cast<int32_t*>(count), count + uint64_t(bl.rows) * 4, ld};
  b.redo = call_redo_split(p);
  if (b.redo.parts > 0) {
    b.pool = topk_fused_redo_pool();  // (read once: the slots, the layout and the kernel follow it)
    b.slots = redo_slots(bl, b.pool);
    const RedoLayout l = redo_layout(bl, b.redo, dev, b.pool);
    b.slot_of = reinterpret_cast<int32_t*>(ws + l.slot_of);
    b.tile_of = reinterpret_cast<int32_t*>(ws + l.tile_of);
    b.part_count = reinterpret_cast<int32_t*>(ws + l.part_count);
    b.part_cand = reinterpret_cast<uint64_t*>(ws + l.part_cand);
    if (b.pool) b.pool_rows = ws + l.pool_rows;
  }
  return b;
}

// The sweep problem of one block: the block's score problem (its windows: BSHD the block's
// causal offset, THD the rows kernel's ks / ke in the block's key columns), writing candidates
// instead of scores.
Problem sweep_problem(const Problem& p, const TopkBlock& b, const Buffers& buf, const int32_t* ks, const int32_t* ke,
                      const int32_t* offset) {
  Problem s = topk_block_problem(p, b, nullptr, ks, ke, offset);
  s.op = Operation::topk_sweep;
  s.sweep.cand = buf.cand;
  s.sweep.count = buf.count;
  s.sweep.fail = buf.fail;
  s.sweep.ld = buf.ld;
  s.sweep.k = p.topk.k;
  s.sweep.refresh = topk_fused_refresh();
  const float margin = topk_fused_margin();
  s.sweep.mode = std::isnan(margin) ? dsa::kLeanTopkExact : dsa::kLeanTopkSampled;
  s.sweep.margin = std::isnan(margin) ? 0.0f : margin;
  s.sweep.part = s.sweep.mode == dsa::kLeanTopkSampled && topk_fused_part();
  // The call's stride (THD: of max_seqlen_k, which sized the buffers: planned_candidates), not
  // the block's width (a THD block's segments may have fewer keys).
  s.sweep.sample_stride = dsa::lean_topk_sample_stride(std::max<int64_t>(p.s_k, 1));
  s.sweep.has_lse = p.has_lse;  // (THD calls with lse are refused: TopkFusedFamily::check)
  if (const TopkRedoSplit& rs = buf.redo; rs.parts > 0) {  // (planning's buffers carry it too)
    s.sweep.slot_of = buf.slot_of;
    if (topk_fused_redo_slot_items() || buf.pool) s.sweep.tile_of = buf.tile_of;
    s.sweep.pool_rows = buf.pool_rows;
    s.sweep.pool = buf.pool;
    s.sweep.slots = buf.slots;
    s.sweep.part_cand = buf.part_cand;
    s.sweep.part_count = buf.part_count;
    s.sweep.part_ld = rs.part_ld;
    s.sweep.parts = rs.parts;
    s.sweep.chunk = rs.chunk;
  }
  if (p.lse != nullptr && !p.is_thd()) {  // the block's rows of the call's lse (a block lies in one batch entry)
    s.sweep.lse = static_cast<float*>(p.lse) + b.batch * p.lse_stride[0] + b.row0 * p.lse_stride[1];
    s.sweep.lse_stride = p.lse_stride[1];
  }
  s.call = &p;
  s.call_family = KernelFamily::topk_fused;
  return s;
}

// The distinct sweep problems of a call (null pointers: planning and gates only).
std::vector<Problem> sweep_shapes(const Problem& p, const DeviceInfo& dev) {
  std::vector<Problem> v;
  std::set<std::pair<int64_t, int64_t>> shapes;
  Buffers none{nullptr, nullptr, nullptr, topk_fused_candidates(p.topk.k, p.s_k)};
  none.redo = call_redo_split(p);  // (the split redo's variant is keyed from it)
  none.pool = none.redo.parts > 0 && topk_fused_redo_pool();
  // (score_rows: a THD block's sweep covers its rows padded to whole q-tiles, TopkBlock::n_win)
  for_each_fused_block(p, fused_blocking(p, dev), [&](const TopkBlock& b) {
    if (b.width > 0 && shapes.insert({b.score_rows(), b.width}).second)
      v.push_back(sweep_problem(p, b, none, nullptr, nullptr, nullptr));
  }, /*shapes_only=*/true);
  return v;
}

class TopkFusedSweepFamily final : public Family {
 public:
  const char* name() const override { return "sm90_topk_fused_sweep"; }
  const char* option() const override { return "topk_fused_sweep"; }
  KernelFamily id() const override { return KernelFamily::topk_fused_sweep; }
  Operation operation() const override { return Operation::topk_sweep; }
  DType input_dtype() const override { return DType::bf16; }
  // E4M3 q / k with their scales (fused_serves_input): lean's FP8 main loop, head sum and k scale
  // (the FP8 scores kernel's of the block's shape), then the same selection.
  bool serves_input(DType d) const override { return fused_serves_input(d); }
  int auto_priority() const override { return 1; }
  bool fast_path() const override { return true; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = [] {
      std::vector<ParamDesc> v = lean_family().params();
      ParamDesc part{"kTopkPart", ParamDesc::integer, "bool", "part"};
      part.omit_zero = true;
      v.push_back(part);
      ParamDesc lse{"kTopkLse", ParamDesc::integer, "bool", "tlse"};
      lse.omit_zero = true;
      v.push_back(lse);
      // THD variants: the call's sample stride where it is not the one of the variant's kSeqK (0)
      ParamDesc stride{"kTopkSampleStride", ParamDesc::integer, "int", "ss"};
      stride.omit_zero = true;
      v.push_back(stride);
      ParamDesc redo{"kTopkRedoSplit", ParamDesc::integer, "bool", "rs"};
      redo.omit_zero = true;
      v.push_back(redo);
      if (v.size() > static_cast<std::size_t>(kMaxSpecParams))
        throw std::logic_error("sm90_topk_fused_sweep: more parameters than a KernelSpec holds");
      return v;
    }();
    return p;
  }
  // A block's sweep is a BSHD problem of one batch entry: causal (BSHD calls) or with the rows
  // kernel's explicit windows (THD calls: lean's row-windows variant, its gate below).
  Gate check(const Problem& p, const DeviceInfo& dev) const override {
    if (p.is_thd()) return Gate::fail("layout", "BSHD (a block of rows)", layout_name(p.layout));
    // the selection epilogue keeps one row per consumer warp: 4 tokens per consumer
    if (p.heads != LeanGeometry::kHeads) return Gate::fail("heads H", "64", std::to_string(p.heads));
    // (the call's lse comes as sweep.has_lse, written by the sweep's own epilogue: kTopkLse)
    if (p.has_lse) return Gate::fail("lse", "none of the scores kind", "an lse output");
    // (has_windows: a THD call's block; BSHD blocks are causal)
    return lean_check(p, dev, /*split=*/false, /*ragged_rows=*/p.has_windows && topk_fused_ragged_thd());
  }
  std::string gate_key(const Problem& p, const DeviceInfo& dev) const override {
    std::string k = lean_gate_key(p, dev);
    if (p.has_windows && p.s_q % 8 != 0) k += topk_fused_ragged_thd() ? ".rg1" : ".rg0";
    return k;
  }
  Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose) const override {
    Plan plan = lean_plan(p, dev, purpose, *this, kSweepSmem + (p.sweep.has_lse ? dsa::kLeanTopkLseBytes : 0), /*split=*/false);
    if (p.sweep.part) plan.spec.values[part_slot()] = 1;
    if (p.sweep.has_lse) plan.spec.values[lse_slot()] = 1;
    // the split redo's kernel: 1 sm90_topk_fused_redo_split, 2 the redo pool's
    if (p.sweep.parts > 1) plan.spec.values[redo_slot()] = p.sweep.pool ? 2 : 1;
    // Only where the variant's kSeqK does not give it (THD variants carry 0: 16), so BSHD keys and
    // THD's up to max_seqlen_k 16384 keep their sources.
    const int32_t stride = p.sweep.sample_stride;
    if (stride != 0 && stride != dsa::lean_topk_sample_stride(lean_spec_thd(plan.spec) ? 0 : p.s_k))
      plan.spec.values[stride_slot()] = stride;
    return plan;
  }
  void render(const KernelSpec& spec, GeneratedSource& g) const override {
    if (lean_spec_thd(spec)) {
      // THD blocks (row windows): the schedule of the block's packing is a launch parameter
      g.text += "\n// THD: the q-tile order is planned per block and passed at launch (LeanThdSchedule).\n";
      g.kernels.push_back("dsa::sm90_topk_fused_sweep_thd<DsaKernelConfig, dsa::kLeanTopkSampled>");
      g.kernels.push_back("dsa::sm90_topk_fused_sweep_thd<DsaKernelConfig, dsa::kLeanTopkExact>");
      return;
    }
    lean_render_schedule(spec, g);
    // one kernel per protocol (launch(): LeanTopkArgs::mode picks it)
    g.kernels.push_back("dsa::sm90_topk_fused_sweep<DsaKernelConfig, DsaLeanSchedule, dsa::kLeanTopkSampled>");
    g.kernels.push_back("dsa::sm90_topk_fused_sweep<DsaKernelConfig, DsaLeanSchedule, dsa::kLeanTopkExact>");
    if (spec.values[redo_slot()] == 1) g.kernels.push_back("dsa::sm90_topk_fused_redo_split<DsaKernelConfig, DsaLeanSchedule>");
    if (spec.values[redo_slot()] == 2) g.kernels.push_back("dsa::sm90_topk_fused_redo_pool<DsaKernelConfig, DsaLeanSchedule>");
  }
  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    dsa::LeanTopkArgs t{};
    t.cand = reinterpret_cast<uintptr_t>(p.sweep.cand);
    t.count = reinterpret_cast<uintptr_t>(p.sweep.count);
    t.fail = reinterpret_cast<uintptr_t>(p.sweep.fail);
    t.lse = reinterpret_cast<uintptr_t>(p.sweep.lse);
    t.lse_stride = p.sweep.lse_stride;
    t.cand_ld = p.sweep.ld;
    t.k = p.sweep.k;
    t.refresh = p.sweep.refresh;
    t.mode = p.sweep.mode;
    t.margin = p.sweep.margin;
    t.parts = 1;
    if (t.mode == dsa::kLeanTopkSampled) t.stats = reinterpret_cast<uintptr_t>(g_stats.load(std::memory_order_relaxed));
    if (t.mode == dsa::kLeanTopkRedo || t.mode == dsa::kLeanTopkRedoSplit) t.slot_of = reinterpret_cast<uintptr_t>(p.sweep.slot_of);
    if (t.mode != dsa::kLeanTopkRedoSplit) {
      lean_launch(p, plan, k, stream, &t, "cuLaunchKernelEx(sm90_topk_fused_sweep)", t.mode == dsa::kLeanTopkSampled ? 0 : 1);
      return;
    }
    // The split redo: lean's split work over the q-tiles x parts (the kernel's LeanSplit from
    // these), a CTA per SM at most.
    t.part_cand = reinterpret_cast<uintptr_t>(p.sweep.part_cand);
    t.part_count = reinterpret_cast<uintptr_t>(p.sweep.part_count);
    t.part_ld = p.sweep.part_ld;
    t.parts = p.sweep.parts;
    t.chunk = p.sweep.chunk;
    Plan sp = plan;
    // items: the q-tiles x parts, or (by slots) the slots x parts, slot r's q-tile from tile_of
    if (p.sweep.tile_of != nullptr) {
      t.tile_of = reinterpret_cast<uintptr_t>(p.sweep.tile_of);
      sp.num_tiles = p.sweep.slots;
    }
    // the redo pool: every failed q-tile listed (slots: the block's q-tiles), a buffer per CTA
    // (at most one per SM: the layout's), its kernel in the place of sm90_topk_fused_redo_split
    const bool pool = plan.spec.values[redo_slot()] == 2;
    if (pool != (p.sweep.pool_rows != nullptr && p.sweep.tile_of != nullptr))
      throw std::logic_error("sm90_topk_fused_sweep: the redo pool's kernel and its rows' states disagree");
    t.pool = reinterpret_cast<uintptr_t>(p.sweep.pool_rows);
    sp.num_tiles *= p.sweep.parts;
    sp.launches[0].grid[0] =
        static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(sp.num_tiles, device_info(p.device).sm_count)));
    lean_launch(p, sp, k, stream, &t, pool ? "cuLaunchKernelEx(sm90_topk_fused_redo_pool)" : "cuLaunchKernelEx(sm90_topk_fused_redo_split)", 2);
  }
};

class TopkFusedFamily final : public Family {
 public:
  const char* name() const override { return "sm90_topk_fused"; }
  const char* option() const override { return "topk_fused"; }
  KernelFamily id() const override { return KernelFamily::topk_fused; }
  Operation operation() const override { return Operation::topk; }
  DType input_dtype() const override { return DType::bf16; }
  // FP8 as the unfused path (fused_serves_input): the block problems carry the dtype and their
  // rows' and keys' scales.
  bool serves_input(DType d) const override { return fused_serves_input(d); }
  // Above the unfused path, for the automatic calls its policy takes (auto_applies).
  int auto_priority() const override { return 2; }
  // Automatic calls come here with topk_fused_automatic (on since session 33, with the seeded
  // redo pool; see sm90_topk_fused.hpp), at k of at least kTopkFusedAutoMinK (2048: k 512 and
  // 1024 were slower than the unfused path at S_k 262144 in session 33), and then only
  // where the unfused path's blocks would fall under half a wave
  // of rows (S_k past about 127k keys at its 256 MiB budget on 132 SMs). There the fused path
  // keeps blocks of full waves in 1.1-1.9x less workspace than the bounded unfused blocks and
  // within about 4 % of their time (2.9-7.7x less than the old one-wave blocks of 0.5-1 GiB, which
  // were 0-9 % of the scores time faster; session 22, an H100, docs/PERF_NOTES.md). Shorter rows
  // keep the unfused path: the fused one is up to 11 % slower there (19-34 % at ratio 4).
  // Rows whose planned candidates pass the sweep's kLeanTopkMaxLd (k 2048 past about 300k keys)
  // would overflow into the exact redo: those keep the unfused path too.
  // FP8 calls keep the unfused path (the fused one serves them by name): measured slower at
  // every row length, 1.15x the unfused time at S_k 16384 and 1.01x at 131072 (session 26, an
  // H100, docs/PERF_NOTES.md): FP8's scores are about 1.55x faster, the sweep's selection work is not.
  // THD calls keep the unfused path (the fused one serves them by name): measured slower on the
  // THD bench row (T_q 16384 in {5462, 8198, 2724}, max_seqlen_k 8198, k 2048): 2422.8 against
  // 2137.3 us cold, 1.86x against 1.63x the scores (session 27, an H100, docs/PERF_NOTES.md).
  // Its rows are short, where the fused path loses on BSHD too.
  bool auto_applies(const Problem& p, const DeviceInfo& dev) const override {
    return topk_fused_automatic() && !p.is_thd() && p.qk_dtype == DType::bf16 && p.topk.k >= kTopkFusedAutoMinK &&
           topk_unfused_short_blocks(p, dev) && topk_fused_candidates_fit(p.topk.k, p.s_k);
  }
  bool fast_path() const override { return true; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {{"kLayout", ParamDesc::choice, "int", "", kLayoutChoices, kLayoutLiterals, 2}};
    return p;
  }

  // THD: row ranges (topk_fused_thd_rows, the default; off: the unfused path's segment groups),
  // each swept as a B 1 problem with the rows kernel's windows (lean's row-windows gate: a wave,
  // and a ragged last q-tile with topk_fused_ragged_thd, the default).
  Gate check(const Problem& p, const DeviceInfo& dev) const override {
    // THD's lse is the selection's fp64 two-pass sum over a score row (the unfused path's), which
    // the sweep, seeing a row's cells spread over its lanes, cannot reproduce bit for bit
    if (p.is_thd() && p.has_lse)
      return Gate::fail("lse", "none on THD calls (their lse is the selection's two-pass sum)", "an lse output");
    if (p.has_lse && !topk_lse_lanes()) return Gate::fail("lse", "none (the lane-order lse is off: kTopkLseLanes)", "an lse output");
    if (!p.is_thd() && !topk_causal_blocks(p))
      return Gate::fail("S_k x ratio", "<= 2^31 (blocks of rows are causal problems)", std::to_string(p.s_k * p.ratio));
    if (p.rows == 0) return Gate::pass();
    // Every block's sweep is the lean kernel's: its gate, block by distinct block.
    for (const Problem& s : sweep_shapes(p, dev)) {
      const Gate g = topk_fused_sweep_family().check(s, dev);
      if (!g.passed()) return Gate::fail(g.failed, g.expected, fmt::format("{} (a block of {} rows)", g.actual, s.s_q));
    }
    return Gate::pass();
  }
  std::string gate_key(const Problem& p, const DeviceInfo& dev) const override {
    std::string k = layout_name(p.layout);
    k += p.has_lse ? (topk_lse_lanes() ? ".lse1.ll1" : ".lse1.ll0") : ".lse0";
    k += topk_causal_blocks(p) ? ".cb1" : ".cb0";
    k += ".r" + std::to_string(p.rows == 0 ? 0 : 1);
    // (the split redo sizes the workspace)
    if (const TopkRedoSplit rs = call_redo_split(p); rs.parts > 0)
      k += ".rs" + std::to_string(rs.parts) + "x" + (topk_fused_redo_pool() ? std::string("pool") : std::to_string(topk_fused_redo_slots()));
    if (p.is_thd()) k += topk_fused_thd_rows() ? ".tr1" : ".tr0";
    // (THD: the packing's blocks; a block's lean gate key carries its rows, .sq, and saturation)
    if (p.rows > 0)
      for (const Problem& s : sweep_shapes(p, dev)) k += "/" + topk_fused_sweep_family().gate_key(s, dev);
    return k;
  }

  Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose) const override {
    Plan plan;
    plan.spec.family = this;
    plan.spec.values[kLayout] = p.is_thd() ? 1 : 0;
    plan.spec.dynamic_smem = static_cast<uint32_t>(dsa::kTopkCandSmemBytes);
    plan.empty = p.rows == 0;
    plan.workspace_bytes = fused_blocking(p, dev).total_bytes;
    KernelLaunch& rows = plan.launches[plan.n_launches++];
    rows.block[0] = kTopkRowsThreads;
    for (int threads : {256, 512}) {
      KernelLaunch& sel = plan.launches[plan.n_launches++];
      sel.block[0] = static_cast<uint32_t>(threads);
      sel.smem = plan.spec.dynamic_smem;
    }
    // the split redo's slots (one CTA), joins (a CTA per slot) and the redo pool's seeds (a CTA
    // per q-tile)
    for (int i = 0; i < 3; ++i) {
      KernelLaunch& l = plan.launches[plan.n_launches++];
      l.block[0] = dsa::kLeanTopkRedoThreads;
      l.grid[0] = 1;  // (the joins and the seeds: set at launch)
    }
    return plan;
  }

  std::vector<Problem> inner_problems(const Problem& p, const DeviceInfo& dev) const override {
    if (p.rows == 0) return {};
    return sweep_shapes(p, dev);
  }

  void render(const KernelSpec&, GeneratedSource& g) const override {
    g.kernels.push_back("dsa::sm90_topk_rows<DsaKernelConfig::kLayout>");
    g.kernels.push_back("dsa::sm90_topk_candidates<256>");
    g.kernels.push_back("dsa::sm90_topk_candidates<512>");
    g.kernels.push_back("dsa::sm90_topk_redo_slots");
    g.kernels.push_back("dsa::sm90_topk_redo_merge<false>");
    g.kernels.push_back("dsa::sm90_topk_redo_merge<true>");  // the join that cuts (kTopkFusedRedoJoinCut)
    g.kernels.push_back("dsa::sm90_topk_redo_seed");         // the redo pool's rows
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    const DeviceInfo& dev = device_info(p.device);
    const TopkBlocking bl = fused_blocking(p, dev);
    auto* ws = static_cast<unsigned char*>(p.topk.workspace);
    const Buffers buf = buffers(p, bl, dev, ws);
    dsa::TopkBlockArgs rb = topk_rows_args(p, bl, ws);
    for_each_fused_block(p, bl, [&](const TopkBlock& b) {
      launch_topk_rows(plan, k, rb, b, stream);
      // The sweep is asked for by name: the call's gate held for every block, and an
      // automatic request could be answered by the async mode's fallback, which has none.
      Problem s = sweep_problem(p, b, buf, rb.ks, rb.ke, rb.offset);
      Plan sp = make_plan(s, dev, topk_fused_sweep_family());
      if (!sp.empty) {
        std::shared_ptr<LoadedKernel> sk = kernel_for_call(s, dev, KernelFamily::topk_fused_sweep, sp);
        launch_forward(s, sp, *sk, stream);
        // A sampled sweep is followed by its redo: the same kernel, exact, over the q-tiles of
        // which a row's cut left fewer than k entries (none: every CTA finds no work and exits).
        // With the split redo, first the slots of those q-tiles, their chunks' sweep and the join
        // of their chunks; the whole-row launch then takes those without a slot.
        if (s.sweep.mode == dsa::kLeanTopkSampled) {
          if (buf.redo.parts > 0) {
            dsa::TopkRedoArgs ra{};
            ra.fail = reinterpret_cast<uintptr_t>(buf.fail);
            ra.slot_of = reinterpret_cast<uintptr_t>(buf.slot_of);
            ra.tile_of = reinterpret_cast<uintptr_t>(buf.tile_of);
            ra.cand = reinterpret_cast<uintptr_t>(buf.cand);
            ra.count = reinterpret_cast<uintptr_t>(buf.count);
            ra.part_cand = reinterpret_cast<uintptr_t>(buf.part_cand);
            ra.part_count = reinterpret_cast<uintptr_t>(buf.part_count);
            ra.cand_ld = buf.ld;
            ra.part_ld = buf.redo.part_ld;
            ra.rows = b.n;
            ra.slots = buf.slots;
            ra.parts = buf.redo.parts;
            ra.k = static_cast<int32_t>(p.topk.k);
            ra.pool = reinterpret_cast<uintptr_t>(buf.pool_rows);
            ra.seed = topk_fused_redo_seed() ? 1 : 0;  // (read by sm90_topk_redo_seed, the pool's only)
            void* rparams[] = {&ra};
            launch_one(k.functions[3], plan.launches[3], stream, rparams, "cuLaunchKernelEx(sm90_topk_redo_slots)");
            if (buf.pool) {
              KernelLaunch seed = plan.launches[5];
              seed.grid[0] = static_cast<uint32_t>((b.n + 7) / 8);
              launch_one(k.functions[6], seed, stream, rparams, "cuLaunchKernelEx(sm90_topk_redo_seed)");
            }
            s.sweep.mode = dsa::kLeanTopkRedoSplit;
            launch_forward(s, sp, *sk, stream);
            if (!buf.pool) {
              KernelLaunch merge = plan.launches[4];
              merge.grid[0] = static_cast<uint32_t>(buf.slots);
              // the join that cuts where the chunks' k entries could pass the row's buffer (parts from
              // topk_redo_split with topk_fused_redo_join_cut), else the one that only concatenates
              const bool cut = int64_t(buf.redo.parts) * p.topk.k > buf.ld;
              launch_one(k.functions[cut ? 5 : 4], merge, stream, rparams, "cuLaunchKernelEx(sm90_topk_redo_merge)");
            }
          }
          // (the redo pool: the split launch joined every failed q-tile's chunks itself, none is left)
          if (!buf.pool) {
            s.sweep.mode = dsa::kLeanTopkRedo;
            launch_forward(s, sp, *sk, stream);
          }
        }
      }
      dsa::TopkCandArgs ca{};
      ca.cand = buf.cand;
      ca.cand_ld = buf.ld;
      ca.count = buf.count;
      ca.width = b.width;  // the sweep's columns are the block's key rows: column order by bitmap
      set_topk_outputs(ca, p, b, rb.rows);
      // The unfused selection's block size for this block: the softmax sums in its order.
      const int which = topk_select_threads(topk_select_width(p, b)) == 256 ? 1 : 2;
      KernelLaunch sel = plan.launches[which];
      sel.grid[0] = static_cast<uint32_t>(std::min<int64_t>(b.n, int64_t(1) << 30));
      void* params[] = {&ca};
      launch_one(k.functions[which], sel, stream, params, "cuLaunchKernelEx(sm90_topk_candidates)");
    });
  }
};

}  // namespace

// The THD sweep kernel's parameters (sm90_topk_fused_sweep_thd: lean THD's, the sweep's arguments
// in the lse's place; 64 bytes for their alignment) stay within the 4 KB every driver accepts.
static_assert(2 * sizeof(TmaDescBytes) + sizeof(dsa::LeanArgs) + sizeof(dsa::LeanThdSchedule) + sizeof(dsa::DsaScales) +
                      sizeof(dsa::LeanTopkArgs) + 64 <= 4096,
              "sm90_topk_fused_sweep_thd: its launch parameters exceed 4 KB");

const Family& topk_fused_family() {
  static const TopkFusedFamily f;
  return f;
}

const Family& topk_fused_sweep_family() {
  static const TopkFusedSweepFamily f;
  return f;
}

namespace {
// topk_fused_candidates before the kLeanTopkMaxLd cap.
int64_t planned_candidates(int64_t k, int64_t s_k) {
  const int64_t tile = dsa::kLeanTopkTileCols;
  const int64_t n = std::max<int64_t>(s_k, 1);
  const int64_t cells = n + tile;  // a row never holds more than its cells and one tile
  int64_t ld = std::min<int64_t>(std::max<int64_t>(4 * k, 1024), cells);
  if (const float z = topk_fused_margin(); !std::isnan(z)) {
    // The sampled sweep keeps a row's m sample cells and the cells at or above the sample's r-th
    // largest key: about r s_k / m of them (r s for every row length: m is about hi / s), with a
    // relative deviation of about 1 / sqrt(r) (the r-th of m is a Beta(r, m - r + 1) quantile).
    // Room for 6 deviations: an overflow sends the row's q-tile to the redo launch.
    const int s = dsa::lean_topk_sample_stride(n);
    const double m = dsa::lean_topk_sample_cells_at(n, s);
    const double e = double(k) * m / double(n);
    const double r = std::ceil(e + double(z) * std::sqrt(e));
    if (m > 0 && r >= 1 && r < m) {
      const double post = r * double(n) / m;
      ld = static_cast<int64_t>(std::ceil(m + post * (1.0 + 6.0 / std::sqrt(r)))) + tile;
    } else {
      ld = cells;  // no cut: every visible cell
    }
    ld = std::min(ld, cells);
  } else {
    // the candidates kernel stages a whole list in shared memory up to kTopkCandMaxLd entries (a
    // longer list it reads from global memory on every pass)
    ld = std::min<int64_t>(ld, dsa::kTopkCandMaxLd);
  }
  if (const int64_t forced = g_candidates.load(std::memory_order_relaxed); forced > 0) ld = forced;
  else if (env().topk_candidates > 0) ld = env().topk_candidates;
  ld = std::max<int64_t>(ld, k + tile);
  return (ld + 3) / 4 * 4;
}
}  // namespace

int64_t topk_fused_candidates(int64_t k, int64_t s_k) { return std::min<int64_t>(planned_candidates(k, s_k), dsa::kLeanTopkMaxLd); }

bool topk_fused_candidates_fit(int64_t k, int64_t s_k) { return planned_candidates(k, s_k) <= dsa::kLeanTopkMaxLd; }

void set_topk_fused_candidates(int64_t entries) { g_candidates.store(entries, std::memory_order_relaxed); }

int32_t topk_fused_refresh() {
  const int32_t r = g_refresh.load(std::memory_order_relaxed);
  return r >= 0 ? r : kTopkFusedRefresh;
}
void set_topk_fused_refresh(int32_t refresh) { g_refresh.store(refresh, std::memory_order_relaxed); }

float topk_fused_margin() {
  return g_margin_set.load(std::memory_order_relaxed) ? g_margin.load(std::memory_order_relaxed) : kTopkFusedMargin;
}
void set_topk_fused_margin(std::optional<float> margin) {
  g_margin.store(margin.value_or(0.0f), std::memory_order_relaxed);
  g_margin_set.store(margin.has_value(), std::memory_order_relaxed);
}

bool topk_fused_part() { return g_part.get(kTopkFusedPart); }
void set_topk_fused_part(std::optional<bool> on) { g_part.set(on); }
bool topk_fused_ragged_thd() { return g_ragged_thd.get(kTopkFusedRaggedThd); }
void set_topk_fused_ragged_thd(std::optional<bool> on) { g_ragged_thd.set(on); }
bool topk_fused_thd_rows() { return g_thd_rows.get(kTopkFusedThdRows); }
void set_topk_fused_thd_rows(std::optional<bool> on) { g_thd_rows.set(on); }
bool topk_fused_automatic() { return g_automatic.get(kTopkFusedAutomatic); }
void set_topk_fused_automatic(std::optional<bool> on) { g_automatic.set(on); }

bool topk_fused_redo_split() { return g_redo_split.get(kTopkFusedRedoSplit); }
void set_topk_fused_redo_split(std::optional<bool> on) { g_redo_split.set(on); }
bool topk_fused_redo_slot_items() { return g_redo_slot_items.get(kTopkFusedRedoSlotItems); }
void set_topk_fused_redo_slot_items(std::optional<bool> on) { g_redo_slot_items.set(on); }
bool topk_fused_redo_join_cut() { return g_redo_join_cut.get(kTopkFusedRedoJoinCut); }
void set_topk_fused_redo_join_cut(std::optional<bool> on) { g_redo_join_cut.set(on); }
bool topk_fused_redo_pool() { return g_redo_pool.get(kTopkFusedRedoPool); }
void set_topk_fused_redo_pool(std::optional<bool> on) { g_redo_pool.set(on); }
bool topk_fused_redo_seed() { return g_redo_seed.get(kTopkFusedRedoSeed); }
void set_topk_fused_redo_seed(std::optional<bool> on) { g_redo_seed.set(on); }
int32_t topk_fused_redo_slots() {
  const int32_t n = g_redo_slots.load(std::memory_order_relaxed);
  return n > 0 ? n : kTopkRedoSlots;
}
void set_topk_fused_redo_slots(int32_t slots) { g_redo_slots.store(slots, std::memory_order_relaxed); }

TopkRedoSplit topk_redo_split(int64_t k, int64_t ld, int64_t s_k) {
  TopkRedoSplit r;
  if (k < 1) return r;
  const int64_t tiles = (std::max<int64_t>(s_k, 0) + dsa::kLeanTopkTileCols - 1) / dsa::kLeanTopkTileCols;
  // a chunk at least kTopkRedoMinChunk KV tiles; every chunk's rows, at most k entries each, fit
  // the row's buffer together, or with the join that cuts (a row's list cut to k before a chunk
  // that would not fit) the row's buffer has room for 2k
  const int64_t fit = topk_fused_redo_join_cut() || topk_fused_redo_pool() ? (ld / k < 2 ? 0 : kTopkRedoMaxParts) : ld / k;
  const int64_t parts = std::min<int64_t>({fit, kTopkRedoMaxParts, tiles / kTopkRedoMinChunk});
  if (parts < 2) return r;
  r.parts = static_cast<int32_t>(parts);
  r.chunk = static_cast<int32_t>((tiles + parts - 1) / parts);
  // a chunk's buffer: k and room for max(k, 1024) appends between compactions, and a tile
  const int64_t ld_part = std::min<int64_t>(k + std::max<int64_t>(k, 1024) + dsa::kLeanTopkTileCols, dsa::kLeanTopkMaxLd);
  r.part_ld = (std::max<int64_t>(ld_part, k + dsa::kLeanTopkTileCols) + 3) / 4 * 4;
  return r;
}

void set_topk_fused_stats(uint32_t* device_counters) { g_stats.store(device_counters, std::memory_order_relaxed); }
void set_topk_fused_budget(uint64_t bytes) { g_budget.store(bytes, std::memory_order_relaxed); }

}  // namespace dsa_indexer::detail
