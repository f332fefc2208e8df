// Host side of the lean family (templates/sm90_indexer_lean.cuh): its gate, its plan and
// emitted schedule, the generated schedule struct, and its launch.
#include "sm90_indexer_lean.hpp"

#include <algorithm>
#include <numeric>

#include "codegen.hpp"
#include "family_params.hpp"
#include "launch.hpp"
#include "runtime.hpp"
#include "util.hpp"

namespace dsa_indexer::detail {
namespace {

enum Slot { kSeqQ, kSeqK, kWeights, kUnitScale, kStages };
constexpr const char* kScaleChoices[] = {"any", "1"};
constexpr const char* kScaleLiterals[] = {"false", "true"};
constexpr const char* kPolicyNames[] = {"dsa::kLeanRoundRobin", "dsa::kLeanSnake"};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool contiguous(const Problem& p) {
  const int64_t H = p.heads, D = p.head_dim;
  return p.q_stride[2] == D && p.q_stride[1] == H * D && p.q_stride[0] == p.s_q * H * D && p.k_stride[1] == D &&
         p.k_stride[0] == p.s_k * D && p.w_stride[2] == 1 && p.w_stride[1] == H && p.w_stride[0] == p.s_q * H &&
         p.out_stride[1] == p.s_k && p.out_stride[0] == p.s_q * p.s_k;
}

bool saturated(const Problem& p, const DeviceInfo& dev) {
  return p.s_q / LeanGeometry::kTokensPerTile * p.batch >= dev.sm_count;
}

class LeanFamily final : public Family {
 public:
  const char* name() const override { return "sm90_indexer_lean"; }
  const char* option() const override { return "lean"; }
  KernelFamily id() const override { return KernelFamily::lean; }
  int auto_priority() const override { return 2; }
  bool fast_path() const override { return true; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {
        {"kSeqQ", ParamDesc::integer, "long long", "sq"},
        {"kSeqK", ParamDesc::integer, "long long", "sk"},
        weights_param(),
        {"kUnitScale", ParamDesc::choice, "bool", "scale", kScaleChoices, kScaleLiterals, 2},
        {"kKvStages", ParamDesc::integer, "int", "s"}};
    return p;
  }

  Gate check(const Problem& p, const DeviceInfo& dev) const override {
    if (dev.cc_major != 9 || dev.cc_minor != 0)
      return Gate::fail("device compute capability", "9.0 (sm_90)", fmt::format("{}.{}", dev.cc_major, dev.cc_minor));
    if (p.layout != Layout::bshd) return Gate::fail("layout", "bshd", layout_name(p.layout));
    if (p.heads != LeanGeometry::kHeads) return Gate::fail("heads H", "64", std::to_string(p.heads));
    if (p.head_dim != 128) return Gate::fail("head dim D", "128", std::to_string(p.head_dim));
    if (p.has_lse) return Gate::fail("lse", "not requested", "an lse output");
    if (p.has_windows) return Gate::fail("explicit windows ks/ke", "not given", "given");
    if (!contiguous(p)) return Gate::fail("operand strides", "contiguous q, k, w and scores", "a strided operand");
    for (const void* ptr : {p.q, p.k, p.w, static_cast<const void*>(p.out)})
      if (!aligned16(ptr)) return Gate::fail("operand alignment", "16-byte-aligned q, k, w and scores", fmt::format("{}", ptr));
    if (p.s_q % LeanGeometry::kTokensPerTile != 0)
      return Gate::fail("S_q", fmt::format("a multiple of {} (the lean q-tile)", LeanGeometry::kTokensPerTile), std::to_string(p.s_q));
    if (!saturated(p, dev))
      return Gate::fail("grid saturation (q-tiles x B)", fmt::format(">= the device's {} SMs", dev.sm_count),
                        std::to_string(p.s_q / LeanGeometry::kTokensPerTile * p.batch));
    return Gate::pass();
  }

  std::string gate_key(const Problem& p, const DeviceInfo& dev) const override {
    // Exactly what check() reads: never B itself (only whether it saturates the grid), never
    // the exact sm_scale.
    std::string k = "cc";
    k += std::to_string(dev.cc_major * 10 + dev.cc_minor);
    k += layout_name(p.layout);
    k += ".h" + std::to_string(p.heads) + ".d" + std::to_string(p.head_dim);
    k += p.has_lse ? ".lse1" : ".lse0";
    k += p.has_windows ? ".win1" : ".win0";
    k += contiguous(p) ? ".c1" : ".c0";
    k += aligned16(p.q) && aligned16(p.k) && aligned16(p.w) && aligned16(p.out) ? ".a1" : ".a0";
    k += ".sq" + std::to_string(p.s_q);
    k += saturated(p, dev) ? ".sat1" : ".sat0";
    return k;
  }

  Plan plan(const Problem& p, const DeviceInfo& dev) const override {
    Plan plan;
    plan.spec = lean_spec(p.s_q, p.s_k, p.w_dtype, p.sm_scale == 1.0f);
    plan.tokens_per_tile = LeanGeometry::kTokensPerTile;
    plan.tiles_per_batch = p.s_q / LeanGeometry::kTokensPerTile;
    plan.num_tiles = plan.tiles_per_batch * p.batch;
    KernelLaunch& l = plan.launches[plan.n_launches++];
    l.grid[0] = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(plan.num_tiles, dev.sm_count)));
    l.block[0] = LeanGeometry::kThreads;
    l.smem = plan.spec.dynamic_smem;
    plan.empty = plan.num_tiles == 0;
    return plan;
  }

  void render(const KernelSpec& spec, GeneratedSource& g) const override {
    const LeanSchedule s = lean_schedule(spec.values[kSeqQ], spec.values[kSeqK]);
    g.text += "\n// The planner's schedule: q-tiles by rank in runs {first, step, count} (longest first),\n"
              "// and how work items go to CTAs.\n";
    g.text += fmt::format("__constant__ dsa::LeanRun kDsaLeanRuns[{}] = {{", s.runs.size());
    for (std::size_t i = 0; i < s.runs.size(); ++i)
      g.text += fmt::format("{}{{{}, {}, {}, 0}}", i ? ", " : "", s.runs[i].first, s.runs[i].step, s.runs[i].count);
    g.text += "};\n";
    g.text += "struct DsaLeanSchedule {\n";
    g.text += fmt::format("  static constexpr int kPolicy = {};\n", kPolicyNames[s.policy]);
    g.text += fmt::format("  static constexpr int kNumRuns = {};\n", s.runs.size());
    g.text += fmt::format("  static constexpr long long kTilesPerBatch = {};\n", s.tiles_per_batch);
    g.text += "  __device__ __forceinline__ static dsa::LeanRun run(int i) { return kDsaLeanRuns[i]; }\n";
    g.text += "};\n";
    g.text += "static_assert(DsaLeanSchedule::kTilesPerBatch == dsa::LeanTraits<DsaKernelConfig>::kTilesPerBatch,\n"
              "              \"sm90_indexer_lean: the schedule covers another number of q-tiles\");\n";
    g.kernels.push_back("dsa::sm90_indexer_lean<DsaKernelConfig, DsaLeanSchedule>");
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    dsa::LeanArgs args{};
    args.w = reinterpret_cast<uintptr_t>(p.w);
    args.out = reinterpret_cast<uintptr_t>(p.out);
    args.offsets = reinterpret_cast<uintptr_t>(p.offsets);
    args.batch = p.batch;
    args.ratio = p.ratio;
    args.num_items = plan.num_tiles;
    args.offsets_stride = p.offsets_stride;
    args.sm_scale = p.sm_scale;
    args.has_offsets = p.has_offsets ? 1 : 0;
    thread_local TmaMemo q_memo, k_memo;
    const TmaDescBytes& qmap = q_memo.get(p.q, q_tma_geometry(p, LeanGeometry::kTokensPerConsumer));
    const TmaDescBytes& kmap = k_memo.get(p.k, k_tma_geometry(p));
    void* params[] = {const_cast<TmaDescBytes*>(&qmap), const_cast<TmaDescBytes*>(&kmap), &args};
    launch_one(k.functions[0], plan.launches[0], stream, params, "cuLaunchKernelEx(sm90_indexer_lean)");
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

}  // namespace

int LeanGeometry::smem_bytes(DType w, int kv_stages) {
  const int w_bytes = 2 * kTokensPerConsumer * kHeads * (w == DType::f32 ? 4 : 2);
  const int bars = (3 * 2 + 2 * kv_stages) * 8;
  return 2 * 256 * 128 * 2 + kv_stages * kKvRows * 128 * 2 + w_bytes + bars + 1024;
}

int64_t LeanSchedule::tile_of_rank(int64_t r) const {
  for (const auto& run : runs) {
    if (r < run.count) return run.first + run.step * r;
    r -= run.count;
  }
  return -1;
}

std::vector<double> lean_tile_costs(int64_t s_q, int64_t s_k, int64_t ratio) {
  const int64_t tiles = s_q / LeanGeometry::kTokensPerTile;
  std::vector<double> c(static_cast<std::size_t>(tiles));
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t hi = Problem::causal_limit(0, (t + 1) * LeanGeometry::kTokensPerTile - 1, ratio, s_k);
    c[static_cast<std::size_t>(t)] = static_cast<double>((hi + LeanGeometry::kKvRows - 1) / LeanGeometry::kKvRows) +
                                     LeanGeometry::kTileOverhead;
  }
  return c;
}

LeanSchedule lean_schedule(int64_t s_q, int64_t s_k) {
  LeanSchedule s;
  s.tiles_per_batch = s_q / LeanGeometry::kTokensPerTile;
  // Longest first; ties go to the later tile. The costs use the shape's own ratio, but any
  // ratio gives the same order (see the header).
  const std::vector<double> cost = lean_tile_costs(s_q, s_k, std::max<int64_t>(1, s_q / std::max<int64_t>(1, s_k)));
  std::vector<int64_t> order(static_cast<std::size_t>(s.tiles_per_batch));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return cost[static_cast<std::size_t>(a)] != cost[static_cast<std::size_t>(b)] ? cost[static_cast<std::size_t>(a)] > cost[static_cast<std::size_t>(b)]
                                                                                  : a > b;
  });
  // Runs of constant step.
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i + 1;
    const int64_t step = j < order.size() ? order[j] - order[i] : -1;
    while (j < order.size() && order[j] - order[j - 1] == step) ++j;
    s.runs.push_back(dsa::LeanRun{static_cast<int32_t>(order[i]), static_cast<int32_t>(step), static_cast<int32_t>(j - i), 0});
    i = j;
  }
  // The policy that balances the planning profile (H100 SXM and H200: the same SM count) best
  // over the batch sizes a key meets most.
  auto worst = [&](int32_t policy) {
    LeanSchedule c = s;
    c.policy = policy;
    double w = 0;
    for (int64_t b : {1, 2, 4}) w = std::max(w, lean_balance(c, cost, b, DeviceInfo::h200().sm_count));
    return w;
  };
  s.policy = worst(dsa::kLeanRoundRobin) < worst(dsa::kLeanSnake) ? dsa::kLeanRoundRobin : dsa::kLeanSnake;
  return s;
}

double lean_balance(const LeanSchedule& s, const std::vector<double>& costs, int64_t batch, int64_t grid) {
  const std::vector<double> load = cta_costs(s, costs, batch, grid);
  const double mx = *std::max_element(load.begin(), load.end());
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
  return mean > 0 ? mx / mean : 1.0;
}

const Family& lean_family() {
  static const LeanFamily f;
  return f;
}

KernelSpec lean_spec(int64_t s_q, int64_t s_k, DType w, bool unit_scale) {
  KernelSpec s;
  s.family = &lean_family();
  s.values[kSeqQ] = s_q;
  s.values[kSeqK] = s_k;
  s.values[kWeights] = weights_value(w);
  s.values[kUnitScale] = unit_scale ? 1 : 0;
  s.values[kStages] = LeanGeometry::kKvStages;
  s.dynamic_smem = static_cast<uint32_t>(LeanGeometry::smem_bytes(w));
  return s;
}

}  // namespace dsa_indexer::detail
