// Host side of the generic family (templates/sm90_indexer_generic.cuh): a static persistent
// grid of one CTA per SM over q-tiles of tokens_per_cta(H) tokens, reversed longest-processing-
// time order (tile t = tile_in_batch * B + b for BSHD), Q and K through 128-byte-swizzled TMA.
#include "families/sm90_indexer_generic.hpp"

#include <algorithm>

#include "jit/codegen.hpp"
#include "families/family_params.hpp"
#include "ops/scores_args.hpp"
#include "jit/runtime.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

enum Slot { kHeads, kWeights, kLse, kLayout, kStages, kInput, kWindowStart };

class GenericFamily final : public Family {
 public:
  const char* name() const override { return "sm90_indexer_generic"; }
  const char* option() const override { return "generic"; }
  KernelFamily id() const override { return KernelFamily::generic; }
  Operation operation() const override { return Operation::scores; }
  DType input_dtype() const override { return DType::bf16; }
  bool serves_input(DType d) const override { return d == DType::bf16 || d == DType::e4m3; }
  int auto_priority() const override { return 1; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {heads_param(), weights_param(), lse_param(), layout_param(),
                                             {"kKvStages", ParamDesc::integer, "int", "s"}, input_param(),
                                             window_start_param()};
    return p;
  }
  // validate() admits exactly what this family serves.
  Gate check(const Problem&, const DeviceInfo&) const override { return Gate::pass(); }
  std::string gate_key(const Problem&, const DeviceInfo&) const override { return std::string(); }

  Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose) const override {
    Plan plan;
    plan.spec = generic_spec(p.heads, p.w_dtype, p.has_lse, p.layout, GenericGeometry::kDefaultKvStages, p.qk_dtype,
                             p.window_start);
    plan.tokens_per_tile = GenericGeometry::tokens_per_cta(p.heads);
    const int64_t rows = p.layout == Layout::bshd ? p.s_q : p.t_q;
    plan.tiles_per_batch = (rows + plan.tokens_per_tile - 1) / plan.tokens_per_tile;
    plan.num_tiles = plan.tiles_per_batch * (p.layout == Layout::bshd ? p.batch : 1);
    KernelLaunch& l = plan.launches[plan.n_launches++];
    l.grid[0] = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(plan.num_tiles, dev.sm_count)));
    l.block[0] = GenericGeometry::kThreads;
    l.smem = plan.spec.dynamic_smem;
    plan.empty = p.rows == 0 || plan.num_tiles == 0;
    return plan;
  }

  void render(const KernelSpec&, GeneratedSource& g) const override {
    g.text += "static_assert(dsa::GenericSmem<DsaKernelConfig>::kAlloc == DsaKernelConfig::kSmemBytes,\n"
              "              \"host planner and device template disagree on the shared-memory size\");\n";
    g.kernels.push_back("dsa::sm90_indexer_generic<DsaKernelConfig>");
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    dsa::DsaArgs args = make_args(p);
    dsa::TileGrid grid{plan.num_tiles, plan.tiles_per_batch};
    // Encoding is a pure function of (base, geometry): a thread repeating its last call (the
    // steady state of a training step) reuses the descriptors instead of encoding them again.
    thread_local TmaMemo q_memo, k_memo;
    const TmaDescBytes& qmap = q_memo.get(p.q, q_tma_geometry(p, GenericGeometry::tokens_per_consumer(p.heads)));
    const TmaDescBytes& kmap = k_memo.get(p.t_k > 0 ? p.k : p.q, k_tma_geometry(p));
    // cuLaunchKernelEx copies the parameters at the call, so the memo's bytes may change later.
    dsa::DsaScales scales = make_scales(p);
    void* params[] = {const_cast<TmaDescBytes*>(&qmap), const_cast<TmaDescBytes*>(&kmap), &args, &grid, &scales};
    launch_one(k.functions[0], plan.launches[0], stream, params, "cuLaunchKernelEx(sm90_indexer_generic)");
  }
};

}  // namespace

int GenericGeometry::smem_bytes(int heads, int kv_stages, DType qk) {
  // Mirrors GenericSmem in templates/sm90_indexer_generic.cuh; the generated source
  // static_asserts that both agree. A row of D is two 128-byte boxes of bf16, one of FP8.
  const int tpw = tokens_per_consumer(heads);
  const int boxes = qk == DType::e4m3 ? 1 : 2;
  const int q = kConsumers * boxes * kPackedRowsPerConsumer * 128;
  const int kv = kv_stages * boxes * kKvRows * 128;
  const int w = 2 * 4 * (tokens_per_cta(heads) * heads / 4 + 4) * 4;
  const int info = 2 * (40 + 32 * 48);
  const int lse = kConsumers * 4 * tpw * 2 * 4;
  const int bars = (2 * 2 + 2 * kv_stages + 2 * 2) * 8;
  return q + kv + w + info + lse + bars + 1024;
}

const Family& generic_family() {
  static const GenericFamily f;
  return f;
}

KernelSpec generic_spec(int heads, DType w, bool lse, Layout layout, int kv_stages, DType qk, bool window_start) {
  KernelSpec s;
  s.family = &generic_family();
  s.values[kHeads] = heads;
  s.values[kWeights] = weights_value(w);
  s.values[kLse] = lse ? 1 : 0;
  s.values[kLayout] = layout_value(layout);
  s.values[kStages] = kv_stages;
  s.values[kInput] = input_value(qk);
  s.values[kWindowStart] = window_start ? 1 : 0;
  s.dynamic_smem = static_cast<uint32_t>(GenericGeometry::smem_bytes(heads, kv_stages, qk));
  return s;
}

std::vector<int64_t> generic_cta_tiles(const Plan& plan, int64_t cta) {
  std::vector<int64_t> tiles;
  for (int64_t lin = cta; lin < plan.num_tiles; lin += plan.launches[0].grid[0]) tiles.push_back(plan.num_tiles - 1 - lin);
  return tiles;
}

}  // namespace dsa_indexer::detail
