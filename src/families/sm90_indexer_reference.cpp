// Host side of the reference family (templates/sm90_indexer_reference.cuh): one block of 128
// threads per (output row, 128-column block) for the scores, then one 256-thread block per row
// for the LSE when asked for.
#include "families/sm90_indexer_reference.hpp"

#include <algorithm>

#include "jit/codegen.hpp"
#include "families/family_params.hpp"
#include "ops/scores_args.hpp"
#include "jit/runtime.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

enum Slot { kHeads, kWeights, kLse, kLayout, kWindowStart };
constexpr uint32_t kScoreThreads = 128;
constexpr uint32_t kLseThreads = 256;  // kRefLseThreads in the template

class ReferenceFamily final : public Family {
 public:
  const char* name() const override { return "sm90_indexer_reference"; }
  const char* option() const override { return "reference"; }
  KernelFamily id() const override { return KernelFamily::reference; }
  Operation operation() const override { return Operation::scores; }
  DType input_dtype() const override { return DType::bf16; }
  int auto_priority() const override { return 0; }
  const std::vector<ParamDesc>& params() const override {
    static const std::vector<ParamDesc> p = {heads_param(), weights_param(), lse_param(), layout_param(), window_start_param()};
    return p;
  }
  Gate check(const Problem&, const DeviceInfo&) const override { return Gate::pass(); }
  std::string gate_key(const Problem&, const DeviceInfo&) const override { return std::string(); }

  Plan plan(const Problem& p, const DeviceInfo&, PlanPurpose) const override {
    Plan plan;
    plan.spec = reference_spec(p.heads, p.w_dtype, p.has_lse, p.layout, p.window_start);
    plan.empty = p.rows == 0 || p.out_cols == 0;
    const int64_t col_blocks = (p.out_cols + kScoreThreads - 1) / kScoreThreads;
    if (col_blocks > 65535)
      fail_param<UnsupportedConfig>("planner", "reference kernel columns", "<= 65535 * 128", p.out_cols);
    KernelLaunch& s = plan.launches[plan.n_launches++];
    s.grid[0] = static_cast<uint32_t>(std::max<int64_t>(p.rows, 1));
    s.grid[1] = static_cast<uint32_t>(std::max<int64_t>(col_blocks, 1));
    s.block[0] = kScoreThreads;
    if (p.has_lse) {
      KernelLaunch& l = plan.launches[plan.n_launches++];
      l.grid[0] = s.grid[0];
      l.block[0] = kLseThreads;
    }
    return plan;
  }

  void render(const KernelSpec& spec, GeneratedSource& g) const override {
    g.kernels.push_back("dsa::sm90_indexer_reference_scores<DsaKernelConfig>");
    if (spec.values[kLse]) g.kernels.push_back("dsa::sm90_indexer_reference_lse<DsaKernelConfig>");
  }

  void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const override {
    dsa::DsaArgs args = make_args(p);
    void* params[] = {&args};
    static const char* const what[] = {"cuLaunchKernelEx(sm90_indexer_reference_scores)",
                                       "cuLaunchKernelEx(sm90_indexer_reference_lse)"};
    for (int i = 0; i < plan.n_launches; ++i) launch_one(k.functions[i], plan.launches[i], stream, params, what[i]);
  }
};

}  // namespace

const Family& reference_family() {
  static const ReferenceFamily f;
  return f;
}

KernelSpec reference_spec(int heads, DType w, bool lse, Layout layout, bool window_start) {
  KernelSpec s;
  s.family = &reference_family();
  s.values[kHeads] = heads;
  s.values[kWeights] = weights_value(w);
  s.values[kLse] = lse ? 1 : 0;
  s.values[kLayout] = layout_value(layout);
  s.values[kWindowStart] = window_start ? 1 : 0;
  return s;
}

}  // namespace dsa_indexer::detail
