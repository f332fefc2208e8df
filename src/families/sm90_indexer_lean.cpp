// Host side of the lean family (templates/sm90_indexer_lean.cuh): its gate, its plan and
// emitted schedule, the generated schedule struct, and its launch.
#include "families/sm90_indexer_lean.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "jit/codegen.hpp"
#include "families/family_params.hpp"
#include "ops/scores_args.hpp"
#include "jit/runtime.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

enum Slot {
  kLayout, kSeqQ, kSeqK, kWeights, kUnitScale, kStages, kInput, kKvSplit, kHeadsSlot, kConsumersSlot, kLseSlot, kFreeSlot, kTraceSlot,
  kRowWindowsSlot
};
constexpr const char* kScaleChoices[] = {"any", "1"};
constexpr const char* kScaleLiterals[] = {"false", "true"};
constexpr const char* kPolicyNames[] = {"dsa::kLeanRoundRobin", "dsa::kLeanSnake"};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// packed: THD's rule (rows by their own stride), which a B 1 BSHD call's row-windows view follows.
bool contiguous(const Problem& p, bool packed) {
  const int64_t H = p.heads, D = p.head_dim;
  if (packed)
    return p.q_stride[2] == D && p.q_stride[1] == H * D && p.k_stride[1] == D && p.w_stride[2] == 1 &&
           p.w_stride[1] == H && p.out_stride[1] == p.out_cols;
  return p.q_stride[2] == D && p.q_stride[1] == H * D && p.q_stride[0] == p.s_q * H * D && p.k_stride[1] == D &&
         p.k_stride[0] == p.s_k * D && p.w_stride[2] == 1 && p.w_stride[1] == H && p.w_stride[0] == p.s_q * H &&
         p.out_stride[1] == p.s_k && p.out_stride[0] == p.s_q * p.s_k;
}
bool contiguous(const Problem& p) { return contiguous(p, p.is_thd()); }

constexpr int64_t kTile = LeanGeometry::kTokensPerTile;  // H 64 (row windows)
// A variant's dynamic shared memory (its epilogue's own, if any, comes on top).
uint32_t spec_smem(DType w, int stages, DType qk, int consumers, bool thd, bool split, bool lse, int64_t heads) {
  return static_cast<uint32_t>(LeanGeometry::smem_bytes(w, stages, qk, consumers, thd, split, lse) +
                               (lse ? LeanGeometry::lse_bytes(heads) : 0));
}
// The q-tile: 512 packed (token, head) rows, 8 / 16 / 32 tokens at H 64 / 32 / 16 (BSHD and THD).
int64_t q_tile(const Problem& p) { return LeanGeometry::tokens_per_tile(p.heads); }
// THD: T_q rounded up to the q-tile (its items; the variant carries one q-tile as kSeqQ).
int64_t round_to_tile(const Problem& p) { return (p.t_q + q_tile(p) - 1) / q_tile(p) * q_tile(p); }

// Work items: q-tiles x B (BSHD), the q-tiles of T_q (THD).
int64_t work_items(const Problem& p) { return p.is_thd() ? round_to_tile(p) / q_tile(p) : p.s_q / q_tile(p) * p.batch; }

bool saturated(const Problem& p, const DeviceInfo& dev) { return work_items(p) >= dev.sm_count; }

// THD: validate() always fills them (the caller's mirrors or one read of the device arrays).
bool has_host_seqlens(const Problem& p) {
  return p.cu_q_host.size() == static_cast<std::size_t>(p.batch) + 1 && p.cu_k_host.size() == p.cu_q_host.size();
}

// Explicit windows of a B 1 BSHD call (DeepGEMM's logits through deepgemm_compat): the THD kernel
// serves them as one packed sequence of S_q rows over S_k keys whose windows come from ks / ke
// (kRowWindows), THD global for key columns and THD local for window-start columns; the same
// memory, read through THD's strides (the row's at index 1). The schedule is THD's for one
// segment: windows assumed to grow with the row, as causal ones do (ks / ke stay on the device).
bool row_windows(const Problem& p) { return p.has_windows && !p.is_thd(); }
// lean_check past its explicit-windows rules (on the call, or on its row-windows view).
Gate lean_check_view(const Problem& p, const DeviceInfo& dev, bool split = false);
// `seqlens`: with its host cu_seqlens (the gate and the planner read them; the launch does not).
Problem row_windows_view(const Problem& p, bool seqlens = true) {
  Problem v = p;
  v.layout = p.window_start ? Layout::thd_local : Layout::thd_global;
  v.t_q = p.s_q;
  v.t_k = p.s_k;
  if (seqlens) {
    v.cu_q_host = {0, static_cast<int32_t>(p.s_q)};
    v.cu_k_host = {0, static_cast<int32_t>(p.s_k)};
  }
  return v;
}

std::atomic<LeanThdOrder> g_thd_order{LeanThdOrder::balanced};
std::atomic<int> g_consumers{2};
std::atomic<bool> g_free{false};
std::atomic<uint32_t*> g_trace{nullptr};

// THD: the planned schedule of the packings met last (a training step calls every layer with
// one packing), keyed by the exact host cu_seqlens and what else decides the order.
LruCache<std::shared_ptr<const LeanThdPlan>>& thd_memo() {
  static auto* cache = new LruCache<std::shared_ptr<const LeanThdPlan>>(16);  // process lifetime
  return *cache;
}

std::shared_ptr<const LeanThdPlan> thd_plan_for(const Problem& p, int64_t grid) {
  const LeanThdOrder order = g_thd_order.load(std::memory_order_relaxed);
  std::string key;
  const std::size_t n = p.cu_q_host.size() * sizeof(int32_t);
  key.reserve(48 + 2 * n);
  key += std::to_string(p.t_q) + '/' + std::to_string(q_tile(p)) + '/' + std::to_string(p.ratio) + '/' + std::to_string(grid) + '/' +
         std::to_string(static_cast<int>(order)) + '/';
  key.append(reinterpret_cast<const char*>(p.cu_q_host.data()), n);
  key.append(reinterpret_cast<const char*>(p.cu_k_host.data()), p.cu_k_host.size() * sizeof(int32_t));
  return thd_memo().get_or_create(key, [&] {
    return std::make_shared<const LeanThdPlan>(
        lean_thd_plan(lean_thd_tile_kv(p.cu_q_host, p.cu_k_host, p.t_q, p.ratio, q_tile(p)), grid, order));
  });
}

}  // namespace

Gate lean_check(const Problem& p, const DeviceInfo& dev, bool split, bool ragged_rows) {
  if (p.has_windows) {
    if (p.is_thd()) return Gate::fail("explicit windows ks/ke", "BSHD (B 1)", "THD");
    if (p.batch != 1) return Gate::fail("explicit windows ks/ke", "B 1 (served as one packed sequence)", std::to_string(p.batch));
    if (p.heads != LeanGeometry::kHeads) return Gate::fail("heads H", "64 (explicit windows)", std::to_string(p.heads));
    if (p.s_q % kTile != 0 && !ragged_rows) return Gate::fail("S_q", "a multiple of 8 (explicit windows)", std::to_string(p.s_q));
    if (p.s_q > INT32_MAX - kTile || p.s_k > INT32_MAX) return Gate::fail("S_q, S_k", "< 2^31 - 8 (explicit windows)", "larger");
    return lean_check_view(row_windows_view(p), dev);
  }
  return lean_check_view(p, dev, split);
}

namespace {
Gate lean_check_view(const Problem& p, const DeviceInfo& dev, bool split) {
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    return Gate::fail("device compute capability", "9.0 (sm_90)", fmt::format("{}.{}", dev.cc_major, dev.cc_minor));
  if (!LeanGeometry::serves_heads(p.heads)) return Gate::fail("heads H", "64, 32 or 16", std::to_string(p.heads));
  if (p.head_dim != 128) return Gate::fail("head dim D", "128", std::to_string(p.head_dim));
  if (!contiguous(p)) return Gate::fail("operand strides", "contiguous q, k, w and scores", "a strided operand");
  for (const void* ptr : {p.q, p.k, p.w, static_cast<const void*>(p.out)})
    if (!aligned16(ptr)) return Gate::fail("operand alignment", "16-byte-aligned q, k, w and scores", fmt::format("{}", ptr));
  if (!p.is_thd() && p.s_q % q_tile(p) != 0)
    return Gate::fail("S_q", fmt::format("a multiple of {} (the lean q-tile at H {})", q_tile(p), p.heads), std::to_string(p.s_q));
  if (p.is_thd() && !has_host_seqlens(p))
    return Gate::fail("host cu_seqlens", "read or mirrored on the host", "not available");
  if (p.is_thd() && round_to_tile(p) > INT32_MAX - q_tile(p))
    return Gate::fail("T_q", fmt::format("< 2^31 - {}", q_tile(p)), std::to_string(p.t_q));
  // BSHD calls that cannot fill the grid take the split variant (when the caller serves it; with
  // lse it adds the combine of its chunks' partial sums: lean_plan)
  if (!saturated(p, dev) && (p.is_thd() || !split))
    return Gate::fail(p.is_thd() ? "grid saturation (q-tiles of T_q)" : "grid saturation (q-tiles x B)",
                      fmt::format(">= the device's {} SMs", dev.sm_count), std::to_string(work_items(p)));
  return Gate::pass();
}
}  // namespace

std::string lean_gate_key(const Problem& p, const DeviceInfo& dev) {
  // Exactly what check() reads: never B itself (only whether it saturates the grid), never
  // the exact sm_scale, never T_k or the THD boundaries.
  std::string k = "cc";
  k += std::to_string(dev.cc_major * 10 + dev.cc_minor);
  k += layout_name(p.layout);
  k += ".h" + std::to_string(p.heads) + ".d" + std::to_string(p.head_dim);
  k += p.has_lse ? ".lse1" : ".lse0";
  k += p.has_windows ? (p.batch == 1 ? ".win1.b1" : ".win1.bn") : ".win0";
  k += p.window_start ? ".ws1" : "";
  k += p.s_k > INT32_MAX ? ".skbig" : "";
  k += contiguous(p, p.is_thd() || row_windows(p)) ? ".c1" : ".c0";
  k += aligned16(p.q) && aligned16(p.k) && aligned16(p.w) && aligned16(p.out) ? ".a1" : ".a0";
  k += ".sq" + std::to_string(p.is_thd() ? round_to_tile(p) : p.s_q);
  if (p.is_thd()) k += has_host_seqlens(p) ? ".cu1" : ".cu0";
  k += saturated(p, dev) ? ".sat1" : ".sat0";
  return k;
}

Plan lean_plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose, const Family& family, int extra_smem,
               bool split) {
  if (row_windows(p)) {  // the THD kernel's plan of the call's view, its kRowWindows variant
    Plan plan = lean_plan(row_windows_view(p), dev, purpose, family, extra_smem, false);
    plan.spec.values[kRowWindowsSlot] = 1;
    // As every THD variant it carries one q-tile as T_q (below): one compile serves every height
    // (the unfused top-k's blocks, DeepGEMM's logits calls).
    return plan;
  }
  Plan plan;
  // The scores family's choice; another epilogue's sweep (the fused top-k: one row per consumer
  // warp) runs two consumers.
  // With lse the split variant's chunks write partial sums to a workspace and a second kernel
  // merges them in chunk order (sm90_indexer_lean_lse_combine): the same bits run to run, not
  // generic's (the unsplit kernels' lse is generic's order, so bitwise generic's).
  const bool split_here = !p.is_thd() && split && !saturated(p, dev);
  int consumers = &family == &lean_family() ? lean_consumers() : 2;
  const bool free_running = &family == &lean_family() && lean_free();
  // Four consumers' FP8 lse variants at H 16, THD and split spill at 104 registers (the k scales
  // and the lse state beside the lane's rows): two consumers serve them.
  if (consumers == 4 && p.has_lse && p.qk_dtype == DType::e4m3 && (p.is_thd() || p.heads == 16 || split_here)) consumers = 2;
  plan.tokens_per_tile = static_cast<int32_t>(q_tile(p));
  if (p.is_thd()) {
    // One q-tile as T_q: the THD kernel's code does not depend on it (session 22-23: the cubins
    // of T_q 8 and 8192 have byte-identical code, constant-0, shared and info sections; T_q, the
    // items and the schedule are launch arguments), so one compile serves every packing.
    plan.spec = lean_spec(q_tile(p), 0, p.w_dtype, p.sm_scale == 1.0f, p.layout, p.qk_dtype, false, p.heads,
                          consumers, p.has_lse, free_running);
    plan.tiles_per_batch = plan.num_tiles = work_items(p);
  } else {
    plan.spec = lean_spec(p.s_q, p.s_k, p.w_dtype, p.sm_scale == 1.0f, Layout::bshd, p.qk_dtype, split_here, p.heads,
                          consumers, p.has_lse, free_running);
    plan.tiles_per_batch = p.s_q / q_tile(p);
    plan.num_tiles = plan.tiles_per_batch * p.batch;
    if (split_here) {
      // num_tiles counts work items: one per chunk of each q-tile's KV tiles
      const LeanSplitPlan sp = lean_split_plan(p.s_k, plan.num_tiles, dev.sm_count);
      plan.kv_parts = sp.parts;
      plan.kv_chunk = sp.chunk;
      plan.num_tiles *= sp.parts;
    }
  }
  plan.spec.family = &family;
  if (&family == &lean_family() && lean_trace() != nullptr) plan.spec.values[kTraceSlot] = 1;
  plan.spec.dynamic_smem += static_cast<uint32_t>(extra_smem);
  // An epilogue with shared memory of its own (the fused top-k's sweep with fp32 weights) gives
  // up KV stages until the CTA fits: the stages only pipeline the same products (same bits).
  while (extra_smem > 0 && dev.max_smem_optin > 0 && plan.spec.dynamic_smem > static_cast<uint32_t>(dev.max_smem_optin) &&
         plan.spec.values[kStages] > 2) {
    const int stages = static_cast<int>(--plan.spec.values[kStages]);
    plan.spec.dynamic_smem =
        spec_smem(p.w_dtype, stages, p.qk_dtype, consumers, p.is_thd(), split_here, p.has_lse, p.heads) + static_cast<uint32_t>(extra_smem);
  }
  KernelLaunch& l = plan.launches[plan.n_launches++];
  l.grid[0] = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(plan.num_tiles, dev.sm_count)));
  l.block[0] = static_cast<uint32_t>(LeanGeometry::threads(consumers));
  l.smem = plan.spec.dynamic_smem;
  if (split_here && p.has_lse) {
    // the chunks' (max, sum) per row, float2 [parts][B][S_q], and the combine: a thread per row
    plan.workspace_bytes = align256(static_cast<uint64_t>(plan.kv_parts) * static_cast<uint64_t>(p.rows) * 8);
    KernelLaunch& c = plan.launches[plan.n_launches++];
    c.grid[0] = static_cast<uint32_t>(std::max<int64_t>(1, (p.rows + dsa::kLeanLseCombineThreads - 1) / dsa::kLeanLseCombineThreads));
    c.block[0] = dsa::kLeanLseCombineThreads;
  }
  plan.empty = plan.num_tiles == 0;
  if (p.is_thd() && !plan.empty && purpose == PlanPurpose::launch) plan.schedule = thd_plan_for(p, l.grid[0]);
  return plan;
}

void lean_render_schedule(const KernelSpec& spec, GeneratedSource& g) {
  const LeanSchedule s = lean_schedule(spec.values[kSeqQ], spec.values[kSeqK], spec.values[kHeadsSlot] ? spec.values[kHeadsSlot] : 64);
  g.text += "\n// The planner's schedule: q-tiles by rank in runs {first, step, count, rank0} (longest\n"
            "// first), and how work items go to CTAs.\n";
  g.text += fmt::format("__constant__ dsa::LeanRun kDsaLeanRuns[{}] = {{", s.runs.size());
  for (std::size_t i = 0; i < s.runs.size(); ++i)
    g.text += fmt::format("{}{{{}, {}, {}, {}}}", i ? ", " : "", s.runs[i].first, s.runs[i].step, s.runs[i].count, s.runs[i].rank0);
  g.text += "};\n";
  g.text += "struct DsaLeanSchedule {\n";
  g.text += fmt::format("  static constexpr int kPolicy = {};\n", kPolicyNames[s.policy]);
  g.text += fmt::format("  static constexpr int kNumRuns = {};\n", s.runs.size());
  g.text += fmt::format("  static constexpr long long kTilesPerBatch = {};\n", s.tiles_per_batch);
  g.text += "  __device__ __forceinline__ static dsa::LeanRun run(int i) { return kDsaLeanRuns[i]; }\n";
  g.text += "};\n";
  g.text += "static_assert(DsaLeanSchedule::kTilesPerBatch == dsa::LeanTraits<DsaKernelConfig>::kTilesPerBatch,\n"
            "              \"sm90_indexer_lean: the schedule covers another number of q-tiles\");\n";
}

// The THD kernel's parameters (two tensor maps, the arguments, the schedule, the FP8 scales, the
// lse output; 64 bytes for their alignment) stay within the 4 KB every driver accepts.
static_assert(2 * sizeof(TmaDescBytes) + sizeof(dsa::LeanArgs) + sizeof(dsa::LeanThdSchedule) + sizeof(dsa::DsaScales) +
                      sizeof(dsa::LeanLseArgs) + 64 <= 4096,
              "sm90_indexer_lean_thd: its launch parameters exceed 4 KB");

void lean_launch(const Problem& call, const Plan& plan, const LoadedKernel& k, CUstream stream, void* extra, const char* what,
                 int function) {
  const bool rw = row_windows(call);
  // (no Problem built for the other calls: this is every lean launch's path)
  std::optional<Problem> view;
  if (rw) view = row_windows_view(call, false);
  const Problem& p = view ? *view : call;
  dsa::LeanArgs args{};
  args.w = reinterpret_cast<uintptr_t>(p.w);
  args.out = reinterpret_cast<uintptr_t>(p.out);
  args.offsets = reinterpret_cast<uintptr_t>(p.offsets);
  args.cu_q = reinterpret_cast<uintptr_t>(p.cu_q);
  args.cu_k = reinterpret_cast<uintptr_t>(p.cu_k);
  args.batch = p.batch;
  args.ratio = p.ratio;
  args.num_items = plan.num_tiles;
  args.offsets_stride = p.offsets_stride;
  args.t_q = p.t_q;
  args.t_k = p.t_k;
  args.out_cols = p.out_cols;
  args.sm_scale = p.sm_scale;
  args.has_offsets = p.has_offsets ? 1 : 0;
  // (the scores family's only: other families built on lean's plan, the fused top-k's sweep, never trace)
  args.trace = plan.spec.family == &lean_family() && plan.spec.values[kTraceSlot] != 0 ? reinterpret_cast<uintptr_t>(lean_trace()) : 0;
  if (rw) {
    args.ks = reinterpret_cast<uintptr_t>(p.ks);
    args.ke = reinterpret_cast<uintptr_t>(p.ke);
    args.win_stride = p.win_stride[1];
  }
  dsa::DsaScales scales = make_scales(p);
  thread_local TmaMemo q_memo, k_memo;
  const TmaDescBytes& qmap =
      q_memo.get(p.q, q_tma_geometry(p, static_cast<int>(LeanGeometry::tokens_per_consumer(p.heads, lean_spec_consumers(plan.spec)))));
  const TmaDescBytes& kmap = k_memo.get(p.t_k > 0 ? p.k : p.q, k_tma_geometry(p));
  // The scores kernels' last parameter: the lse output (read by the kWithLse variants).
  dsa::LeanLseArgs lse{};
  lse.lse = reinterpret_cast<uintptr_t>(p.lse);
  lse.t_q = p.t_q;
  lse.stride_b = p.lse_stride[0];
  lse.stride_row = p.lse_stride[1];
  lse.partials = reinterpret_cast<uintptr_t>(p.workspace);
  lse.rows = p.rows;
  if (!p.is_thd()) {
    // The scores kernel's fourth parameter is the FP8 scales, its fifth the lse; another
    // epilogue's kernel (extra) takes its own arguments fifth instead. The split variant's fifth
    // is its chunks, its sixth the lse.
    dsa::LeanSplit split{plan.kv_parts, plan.kv_chunk};
    if (plan.kv_parts > 0) {
      void* params[] = {const_cast<TmaDescBytes*>(&qmap), const_cast<TmaDescBytes*>(&kmap), &args, &scales, &split, &lse};
      launch_one(k.functions[0], plan.launches[0], stream, params, "cuLaunchKernelEx(sm90_indexer_lean_split)");
      if (plan.n_launches > 1) {
        // (p.workspace: the plan's, which launch_forward takes from the stream-ordered pool)
        void* cparams[] = {&split, &lse};
        launch_one(k.functions[1], plan.launches[1], stream, cparams, "cuLaunchKernelEx(sm90_indexer_lean_lse_combine)");
      }
      return;
    }
    void* params[] = {const_cast<TmaDescBytes*>(&qmap), const_cast<TmaDescBytes*>(&kmap), &args, &scales, extra ? extra : &lse};
    launch_one(k.functions.at(static_cast<size_t>(function)), plan.launches[0], stream, params, what);
    return;
  }
  // cuLaunchKernelEx copies the parameters, the schedule included, at the call. Another
  // epilogue's kernel (extra: the fused top-k's THD sweep) takes its arguments in the lse's place.
  const auto* thd = static_cast<const LeanThdPlan*>(plan.schedule.get());
  void* params[] = {const_cast<TmaDescBytes*>(&qmap), const_cast<TmaDescBytes*>(&kmap), &args,
                    const_cast<dsa::LeanThdSchedule*>(&thd->sched), &scales, extra ? extra : &lse};
  launch_one(k.functions.at(static_cast<size_t>(function)), plan.launches[0], stream, params,
             extra ? what : "cuLaunchKernelEx(sm90_indexer_lean_thd)");
}

namespace {

class LeanFamily final : public Family {
 public:
  const char* name() const override { return "sm90_indexer_lean"; }
  const char* option() const override { return "lean"; }
  KernelFamily id() const override { return KernelFamily::lean; }
  Operation operation() const override { return Operation::scores; }
  DType input_dtype() const override { return DType::bf16; }
  bool serves_input(DType d) const override { return d == DType::bf16 || d == DType::e4m3; }
  int auto_priority() const override { return 2; }
  bool fast_path() const override { return true; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {
        layout_param(),
        {"kSeqQ", ParamDesc::integer, "long long", "sq"},
        {"kSeqK", ParamDesc::integer, "long long", "sk"},
        weights_param(),
        {"kUnitScale", ParamDesc::choice, "bool", "scale", kScaleChoices, kScaleLiterals, 2},
        {"kKvStages", ParamDesc::integer, "int", "s"},
        input_param(),
        split_param(),
        lean_heads_param(),
        lean_consumers_param(),
        lean_lse_param(),
        lean_free_param(),
        lean_trace_param(),
        lean_row_windows_param()};
    return p;
  }

  Gate check(const Problem& p, const DeviceInfo& dev) const override { return lean_check(p, dev); }
  std::string gate_key(const Problem& p, const DeviceInfo& dev) const override { return lean_gate_key(p, dev); }

  Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose) const override {
    return lean_plan(p, dev, purpose, lean_family(), 0);
  }
  void render(const KernelSpec& spec, GeneratedSource& g) const override {
    if (spec.values[kLayout] != layout_value(Layout::bshd)) {
      g.text += "\n// THD: the q-tile order is planned per packing and passed at launch (LeanThdSchedule).\n";
      g.kernels.push_back("dsa::sm90_indexer_lean_thd<DsaKernelConfig>");
      return;
    }
    lean_render_schedule(spec, g);
    g.kernels.push_back(spec.values[kKvSplit] ? "dsa::sm90_indexer_lean_split<DsaKernelConfig, DsaLeanSchedule>"
                                              : "dsa::sm90_indexer_lean<DsaKernelConfig, DsaLeanSchedule>");
    if (spec.values[kKvSplit] && spec.values[kLseSlot]) g.kernels.push_back("dsa::sm90_indexer_lean_lse_combine<DsaKernelConfig>");
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    lean_launch(p, plan, k, stream, nullptr, "cuLaunchKernelEx(sm90_indexer_lean)");
  }
};

// Per-CTA cost of `grid` CTAs walking the work items as LeanWork does.
std::vector<double> cta_costs(const LeanSchedule& s, const std::vector<double>& costs, int64_t batch, int64_t grid) {
  const int64_t items = static_cast<int64_t>(costs.size()) * batch;
  grid = std::max<int64_t>(1, std::min(grid, items));
  std::vector<double> load(static_cast<std::size_t>(grid), 0.0);
  for (int64_t pos = 0; pos < items; ++pos) {
    const int64_t k = pos / grid, slot = pos % grid;
    const int64_t cta = (s.policy == dsa::kLeanSnake && (k & 1)) ? grid - 1 - slot : slot;
    load[static_cast<std::size_t>(cta)] += costs[static_cast<std::size_t>(s.tile_of_rank(pos / batch))];
  }
  return load;
}

// An order of q-tiles as runs of constant step.
std::vector<dsa::LeanRun> runs_of(const std::vector<int64_t>& order) {
  std::vector<dsa::LeanRun> runs;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i + 1;
    const int64_t step = j < order.size() ? order[j] - order[i] : -1;
    while (j < order.size() && order[j] - order[j - 1] == step) ++j;
    runs.push_back(dsa::LeanRun{static_cast<int32_t>(order[i]), static_cast<int32_t>(step), static_cast<int32_t>(j - i),
                                static_cast<int32_t>(i)});
    i = j;
  }
  return runs;
}

// Tiles by descending cost / quantum, ties to the later tile (a counting sort: the costs are
// small integers, and this runs on the host per packing).
std::vector<int64_t> order_by_cost(const std::vector<int32_t>& kv, int32_t quantum) {
  const int32_t top = kv.empty() ? 0 : *std::max_element(kv.begin(), kv.end()) / quantum;
  std::vector<int64_t> first(static_cast<std::size_t>(top) + 2, 0);
  for (int32_t c : kv) ++first[static_cast<std::size_t>(top - c / quantum) + 1];
  for (std::size_t b = 1; b < first.size(); ++b) first[b] += first[b - 1];
  std::vector<int64_t> order(kv.size());
  for (int64_t t = static_cast<int64_t>(kv.size()) - 1; t >= 0; --t)
    order[static_cast<std::size_t>(first[static_cast<std::size_t>(top - kv[static_cast<std::size_t>(t)] / quantum)]++)] = t;
  return order;
}

// The model's cost of q-tile t of `tile` tokens: element t of lean_tile_costs, computed on demand.
double tile_cost(int64_t t, int64_t s_k, int64_t ratio, int64_t tile) {
  const int64_t hi = Problem::causal_limit(0, (t + 1) * tile - 1, ratio, s_k);
  return static_cast<double>((hi + LeanGeometry::kKvRows - 1) / LeanGeometry::kKvRows) + LeanGeometry::kTileOverhead;
}

// lean_balance of the longest-first order (the tiles from the last) under `policy`, without its
// tables: the same loads summed in the same order, so the same doubles; O(tiles x batch) time and
// O(grid) memory.
double reversed_balance(int32_t policy, int64_t tiles, int64_t s_k, int64_t ratio, int64_t batch, int64_t grid, int64_t tile) {
  const int64_t items = tiles * batch;
  grid = std::max<int64_t>(1, std::min(grid, items));
  std::vector<double> load(static_cast<std::size_t>(grid), 0.0);
  for (int64_t pos = 0; pos < items; ++pos) {
    const int64_t k = pos / grid, slot = pos % grid;
    const int64_t cta = (policy == dsa::kLeanSnake && (k & 1)) ? grid - 1 - slot : slot;
    load[static_cast<std::size_t>(cta)] += tile_cost(tiles - 1 - pos / batch, s_k, ratio, tile);
  }
  const double mx = *std::max_element(load.begin(), load.end());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
  return mean > 0 ? mx / mean : 1.0;
}

// The CTA policy under which `worst` (the max / mean per-CTA cost a schedule reaches) is lower;
// the snake on a tie.
int32_t best_policy(const LeanSchedule& s, const std::function<double(const LeanSchedule&)>& worst) {
  LeanSchedule rr = s, snake = s;
  rr.policy = dsa::kLeanRoundRobin;
  snake.policy = dsa::kLeanSnake;
  return worst(rr) < worst(snake) ? dsa::kLeanRoundRobin : dsa::kLeanSnake;
}

}  // namespace

int LeanGeometry::smem_bytes(DType w, int kv_stages, DType qk, int consumers, bool thd, bool split, bool lse) {
  // FP8: one 128-byte box per row of D (bf16: two), and fp32 weights (w * q_scale) either way.
  // The Q and weight regions hold the q-tile's 512 packed rows whatever the consumer count.
  const bool fp8 = qk == DType::e4m3;
  const int boxes = fp8 ? 1 : 2;
  // Weights read from shared memory per tile (fp32 or FP8's; bf16 for four consumers' THD and
  // split and for lse variants) have two buffers per consumer, by item parity.
  const bool w_smem = dsa::lean_weight_mode(w == DType::f32 || fp8, consumers, thd, split, lse) != 0;
  const int w_bytes = 2 * kTokensPerConsumer * kHeads * (w == DType::f32 || fp8 ? 4 : 2) * (w_smem ? 2 : 1);
  // FP8: two Q buffers (item parity) and, per consumer and buffer, the raw weights and q scales
  // the consumer folds (4 bytes each per row).
  const int q_bufs = fp8 ? 2 : 1;
  const int raw_bytes = fp8 ? 2 * 512 * 8 : 0;
  const int bars = (3 * consumers * q_bufs + 2 * kv_stages) * 8;
  return q_bufs * 2 * 256 * 128 * boxes + kv_stages * kKvRows * 128 * boxes + w_bytes + raw_bytes + bars + 1024;
}

int64_t LeanSchedule::tile_of_rank(int64_t r) const {
  for (const auto& run : runs) {
    if (r < run.count) return run.first + run.step * r;
    r -= run.count;
  }
  return -1;
}

std::vector<double> lean_tile_costs(int64_t s_q, int64_t s_k, int64_t ratio, int64_t heads) {
  const int64_t tile = LeanGeometry::tokens_per_tile(heads), tiles = s_q / tile;
  std::vector<double> c(static_cast<std::size_t>(tiles));
  for (int64_t t = 0; t < tiles; ++t) c[static_cast<std::size_t>(t)] = tile_cost(t, s_k, ratio, tile);
  return c;
}

LeanSchedule lean_schedule(int64_t s_q, int64_t s_k, int64_t heads) {
  LeanSchedule s;
  const int64_t tile = LeanGeometry::tokens_per_tile(heads);
  const int64_t tiles = s.tiles_per_batch = s_q / tile;
  // Longest first, ties to the later tile. A tile's cost never falls with its index (its window
  // never shrinks, whatever the ratio), so that order is the tiles from the last down: one run,
  // written directly (sorting a table of S_q / 8 costs cost 5 GB and 100 s near INT32_MAX).
  if (tiles > 0) s.runs.push_back(dsa::LeanRun{static_cast<int32_t>(tiles - 1), -1, static_cast<int32_t>(tiles), 0});
  if (tiles > kLeanMaxBalancedTiles) return s;  // the snake (see the header)
  // The policy that balances the planning profile (H100 SXM and H200: the same SM count) best
  // over the batch sizes a key meets most. The costs use the shape's own ratio.
  const int64_t ratio = std::max<int64_t>(1, s_q / std::max<int64_t>(1, s_k));
  s.policy = best_policy(s, [&](const LeanSchedule& c) {
    double w = 0;
    for (int64_t b : {1, 2, 4}) w = std::max(w, reversed_balance(c.policy, tiles, s_k, ratio, b, DeviceInfo::h200().sm_count, tile));
    return w;
  });
  return s;
}

double lean_balance(const LeanSchedule& s, const std::vector<double>& costs, int64_t batch, int64_t grid) {
  const std::vector<double> load = cta_costs(s, costs, batch, grid);
  const double mx = *std::max_element(load.begin(), load.end());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
  return mean > 0 ? mx / mean : 1.0;
}

std::vector<int32_t> lean_thd_tile_kv(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k, int64_t t_q,
                                      int64_t ratio, int64_t tile) {
  const int64_t tiles = (t_q + tile - 1) / tile;
  const std::size_t n_seg = cu_q.empty() ? 0 : cu_q.size() - 1;
  std::vector<int32_t> kv(static_cast<std::size_t>(tiles), 0);
  std::size_t s = 0;  // the segment of the tile's first row
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t * tile, r1 = std::min(r0 + tile, t_q);
    while (s + 1 < n_seg && cu_q[s + 1] <= r0) ++s;
    int64_t u_lo = INT64_MAX, u_hi = INT64_MIN;
    // Every segment with rows in [r0, r1): its last row there has its widest window.
    for (std::size_t g = s; g < n_seg && cu_q[g] < r1; ++g) {
      const int64_t last = std::min<int64_t>(r1, cu_q[g + 1]) - 1;
      if (last < std::max<int64_t>(r0, cu_q[g])) continue;  // an empty segment
      const int64_t k0 = cu_k[g], s_k = int64_t(cu_k[g + 1]) - cu_k[g];
      const int64_t hi = Problem::causal_limit(0, last - cu_q[g], ratio, s_k);
      if (hi <= 0) continue;
      u_lo = std::min(u_lo, k0);
      u_hi = std::max(u_hi, k0 + hi);
    }
    if (u_lo < u_hi) {
      const int64_t begin = u_lo / LeanGeometry::kKvRows * LeanGeometry::kKvRows;
      kv[static_cast<std::size_t>(t)] = static_cast<int32_t>((u_hi - begin + LeanGeometry::kKvRows - 1) / LeanGeometry::kKvRows);
    }
  }
  return kv;
}

LeanThdPlan lean_thd_plan(const std::vector<int32_t>& kv, int64_t grid, LeanThdOrder order) {
  LeanThdPlan plan{};
  std::vector<double> cost(kv.size());
  for (std::size_t t = 0; t < kv.size(); ++t) cost[t] = kv[t] + LeanGeometry::kTileOverhead;
  LeanSchedule s;
  s.tiles_per_batch = static_cast<int64_t>(kv.size());
  if (order == LeanThdOrder::balanced) {
    // Coarser cost classes give longer runs; the finest order that fits the parameter table.
    for (plan.quantum = 1;; plan.quantum *= 2) {
      s.runs = runs_of(order_by_cost(kv, plan.quantum));
      if (s.runs.size() <= static_cast<std::size_t>(dsa::kLeanThdMaxRuns)) break;
    }
    s.policy = best_policy(s, [&](const LeanSchedule& c) { return lean_balance(c, cost, 1, grid); });
  } else {
    // The static order: the packed q-tiles from the last one (the generic family's order).
    std::vector<int64_t> rev(kv.size());
    for (std::size_t i = 0; i < rev.size(); ++i) rev[i] = static_cast<int64_t>(rev.size() - 1 - i);
    s.runs = runs_of(rev);
    s.policy = dsa::kLeanSnake;
    plan.quantum = 0;
  }
  plan.balance = lean_balance(s, cost, 1, grid);
  plan.sched.policy = s.policy;
  plan.sched.n_runs = static_cast<int32_t>(s.runs.size());
  std::copy(s.runs.begin(), s.runs.end(), plan.sched.runs);
  return plan;
}

LeanSplitPlan lean_split_plan(int64_t s_k, int64_t base_items, int64_t grid) {
  LeanSplitPlan best;
  const int64_t n = std::max<int64_t>(1, (s_k + LeanGeometry::kKvRows - 1) / LeanGeometry::kKvRows);
  base_items = std::max<int64_t>(1, base_items);
  grid = std::max<int64_t>(1, grid);
  // Fewer parts first, so that a tie keeps the fewest items (the least fixed work).
  for (int64_t want = 1; want <= std::min<int64_t>(n, kLeanMaxParts); ++want) {
    const int64_t chunk = (n + want - 1) / want;
    if (want > 1 && chunk < kLeanMinChunk) break;
    const int64_t parts = (n + chunk - 1) / chunk;
    if (parts != want) continue;  // the same chunks as a smaller count
    // Items in rounds of `grid`: position p is chunk p / base_items (LeanSplitWork), so a
    // round's items are consecutive chunks, and only the last chunk (n - (parts - 1) x chunk
    // tiles) is shorter. The busiest CTA: one item per round, the longest of each round; the
    // rounds that start inside the last chunk have only it.
    const int64_t items = base_items * parts;
    const int64_t rounds = (items + grid - 1) / grid;
    const int64_t tail_rounds = rounds - std::min(rounds, ((parts - 1) * base_items + grid - 1) / grid);
    const int64_t last = n - (parts - 1) * chunk;
    const double makespan = static_cast<double>(rounds - tail_rounds) * (static_cast<double>(chunk) + LeanGeometry::kTileOverhead) +
                            static_cast<double>(tail_rounds) * (static_cast<double>(last) + LeanGeometry::kTileOverhead);
    if (best.chunk == 0 || makespan < best.makespan) {
      best.parts = static_cast<int32_t>(parts);
      best.chunk = static_cast<int32_t>(chunk);
      best.makespan = makespan;
    }
  }
  return best;
}

void set_lean_thd_order(LeanThdOrder order) { g_thd_order.store(order, std::memory_order_relaxed); }

void set_lean_consumers(int consumers) {
  if (consumers != 2 && consumers != 4)
    throw std::invalid_argument(fmt::format("set_lean_consumers: 2 or 4 consumer warpgroups, not {}", consumers));
  g_consumers.store(consumers, std::memory_order_relaxed);
}
int lean_consumers() { return g_consumers.load(std::memory_order_relaxed); }
void set_lean_free(bool free_running) { g_free.store(free_running, std::memory_order_relaxed); }
bool lean_free() { return g_free.load(std::memory_order_relaxed); }
void set_lean_trace(uint32_t* device_words) { g_trace.store(device_words, std::memory_order_relaxed); }
uint32_t* lean_trace() { return g_trace.load(std::memory_order_relaxed); }
int lean_spec_consumers(const KernelSpec& spec) { return spec.values[kConsumersSlot] ? static_cast<int>(spec.values[kConsumersSlot]) : 2; }
bool lean_spec_thd(const KernelSpec& spec) { return spec.values[kLayout] != layout_value(Layout::bshd); }

const Family& lean_family() {
  static const LeanFamily f;
  return f;
}

KernelSpec lean_spec(int64_t s_q, int64_t s_k, DType w, bool unit_scale, Layout layout, DType qk, bool split, int64_t heads,
                     int consumers, bool lse, bool free_running, bool row_windows) {
  KernelSpec s;
  s.family = &lean_family();
  s.values[kLayout] = layout_value(layout);
  s.values[kSeqQ] = s_q;
  s.values[kSeqK] = s_k;
  s.values[kWeights] = weights_value(w);
  s.values[kUnitScale] = unit_scale ? 1 : 0;
  const int stages = qk == DType::e4m3 ? LeanGeometry::kKvStagesFp8 : LeanGeometry::kKvStages;
  s.values[kStages] = stages;
  s.values[kInput] = input_value(qk);
  s.values[kKvSplit] = split ? 1 : 0;
  s.values[kHeadsSlot] = heads == LeanGeometry::kHeads ? 0 : heads;  // 64 is omitted (the variants from before)
  s.values[kConsumersSlot] = consumers == 2 ? 0 : consumers;            // 2 is omitted, as 64 heads
  s.values[kLseSlot] = lse ? 1 : 0;
  s.values[kFreeSlot] = free_running ? 1 : 0;
  s.values[kRowWindowsSlot] = row_windows ? 1 : 0;
  s.dynamic_smem = spec_smem(w, stages, qk, consumers, layout != Layout::bshd, split, lse, heads);
  return s;
}

}  // namespace dsa_indexer::detail
