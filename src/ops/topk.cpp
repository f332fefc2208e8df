// The top-k operation's call: validate -> pointer checks -> dispatch (top-k families only) ->
// plan (with its workspace) -> kernel -> launch. The family runs its blocks; this file owns the
// contract's checks and the workspace.
#include "ops/topk.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/env.hpp"
#include "core/util.hpp"
#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "jit/runtime.hpp"
#include "ops/compile_mode.hpp"
#include "ops/forward.hpp"

namespace dsa_indexer::detail {
namespace {

constexpr const char* kWhere = "indexer_topk";

[[noreturn]] void bad(const std::string& param, const std::string& expected, const std::string& actual) {
  fail_param<InvalidArgument>(kWhere, param, expected, actual);
}

// The bytes a descriptor may touch, [first, last) ; empty for a tensor without elements.
struct Span {
  uintptr_t first = 0, last = 0;
  const char* name = "";
};
Span span_of(const TensorDesc& t, const char* name) {
  Span s;
  s.name = name;
  if (!t.present() || !t.data) return s;
  uint64_t extent = 0;  // the largest element offset; extents and strides are <= 2^40 (validated)
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return s;
    extent += uint64_t(t.shape[i] - 1) * uint64_t(t.strides[i]);
  }
  s.first = reinterpret_cast<uintptr_t>(t.data);
  s.last = s.first + (extent + 1) * uint64_t(dtype_size(t.dtype));
  return s;
}

}  // namespace

Problem validate_topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                      const IndexerOptions& opt, const TopkOptions& topk, const MetadataReader& read) {
  if (topk.k < 1) bad("k", ">= 1", std::to_string(topk.k));
  if (topk.k > kTopkMaxK)
    fail_param<UnsupportedConfig>(kWhere, "k", fmt::format("<= {} (the selection stages a row's k pairs in shared memory)", kTopkMaxK),
                                  std::to_string(topk.k));
  if (topk.indices != TopkIndices::local && topk.indices != TopkIndices::global)
    bad("topk.indices", "local (0) or global (1)", std::to_string(static_cast<int>(topk.indices)));
  if (opt.thd_columns != ThdColumns::local)
    bad("thd_columns", "local (indexer_topk's index convention is TopkOptions::indices)", "global");
  if (opt.ks.present() || opt.ke.present())
    fail_param<UnsupportedConfig>(kWhere, "ks / ke", "not given (explicit windows are not supported by indexer_topk)", "given");
  Problem p = validate_call(kWhere, q, k, w, indices, "indices", opt, read, [&](Problem& pr) {
    int64_t st[kMaxRank];
    const struct {
      const TensorDesc* t;
      const char* name;
      DType dt;
    } outs[] = {{&indices, "indices", DType::i32}, {&topk.values, "values", DType::f32}, {&topk.softmax, "softmax", DType::f32}};
    for (const auto& o : outs) {
      if (!o.t->present()) continue;
      check_output(*o.t, o.name, o.dt, pr, topk.k, "k", st);
      // The selection writes rows of k contiguous entries back to back.
      if (!o.t->is_contiguous()) bad(fmt::format("{}.strides", o.name), "contiguous (row-major)", describe(*o.t));
    }
  });
  if (topk.indices == TopkIndices::global && !p.is_thd() && p.batch * p.s_k > std::numeric_limits<int32_t>::max())
    fail_param<UnsupportedConfig>(kWhere, "topk.indices", "local when B * S_k > 2^31 - 1 (global indices are int32)",
                                  fmt::format("global with B * S_k = {}", p.batch * p.s_k));
  if (topk.workspace && reinterpret_cast<uintptr_t>(topk.workspace) % 256)
    bad("topk.workspace", "256-byte aligned", fmt::format("{}", topk.workspace));
  if (!topk.workspace && topk.workspace_bytes)
    bad("topk.workspace", "a device pointer when workspace_bytes is given", "null");

  // Outputs must not overlap the inputs or each other (the kernels read the inputs while they
  // write the outputs, and a partially overwritten input would be read back).
  std::vector<Span> in = {span_of(q, "q"), span_of(k, "k"), span_of(w, "w"), span_of(opt.q_causal_offsets, "q_causal_offsets"),
                          span_of(opt.cu_seqlens_q, "cu_seqlens_q"), span_of(opt.cu_seqlens_k, "cu_seqlens_k")};
  std::vector<Span> out = {span_of(indices, "indices"), span_of(topk.values, "values"), span_of(topk.softmax, "softmax"),
                           span_of(opt.lse, "lse")};
  if (topk.workspace) {
    Span ws;
    ws.name = "topk.workspace";
    ws.first = reinterpret_cast<uintptr_t>(topk.workspace);
    ws.last = ws.first + topk.workspace_bytes;
    out.push_back(ws);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].first == out[i].last) continue;
    auto overlaps = [&](const Span& o) { return o.first != o.last && out[i].first < o.last && o.first < out[i].last; };
    for (const Span& s : in)
      if (overlaps(s)) bad(out[i].name, fmt::format("memory that does not overlap {}", s.name), "an overlapping range");
    for (std::size_t j = i + 1; j < out.size(); ++j)
      if (overlaps(out[j])) bad(out[i].name, fmt::format("memory that does not overlap {}", out[j].name), "an overlapping range");
  }

  p.op = Operation::topk;
  p.topk.k = topk.k;
  p.topk.sort_by_score = topk.sort_by_score;
  p.topk.global_indices = topk.indices == TopkIndices::global;
  p.topk.indices = indices.data;
  p.topk.values = topk.values.present() ? topk.values.data : nullptr;
  p.topk.softmax = topk.softmax.present() ? topk.softmax.data : nullptr;
  p.topk.workspace = topk.workspace;
  p.topk.workspace_bytes = topk.workspace_bytes;
  return p;
}

std::size_t topk_workspace_size(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                                const IndexerOptions& opt, const TopkOptions& topk) {
  TopkOptions no_ws = topk;
  no_ws.workspace = nullptr;
  no_ws.workspace_bytes = 0;
  // The size is a function of the shapes: the caller's host mirrors, or one read of the device
  // cu_seqlens on the legacy stream, as the call itself would do.
  Problem p = validate_topk(q, k, w, indices, opt, no_ws, device_reader(q.device, nullptr));
  const DeviceInfo& dev = device_info(p.device);
  const Family& family = choose_family(p, dev, opt.family, env().disable_lean);
  uint64_t bytes = make_plan(p, dev, family, PlanPurpose::spec_only).workspace_bytes;
  // An automatic fast-path call may run the escape hatch's family instead in async compile mode
  // (while its kernels compile): there the size covers both. In sync mode it never does, and the
  // fused path's smaller workspace is the size (S_k past about 127k keys at k 2048:
  // topk_fused_automatic, on since session 33).
  if (opt.family == KernelFamily::automatic && family.fast_path() && env().lean_compile == LeanCompile::async)
    bytes = std::max(bytes, make_plan(p, dev, choose_family(p, dev, opt.family, true), PlanPurpose::spec_only).workspace_bytes);
  return static_cast<std::size_t>(bytes);
}

void topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices, const IndexerOptions& opt,
          const TopkOptions& topk, CUstream stream) {
  Problem p = validate_topk(q, k, w, indices, opt, topk, device_reader(q.device, stream));
  const DeviceInfo& dev = device_info(p.device);
  ScopedContext ctx(p.device);
  check_stream(stream, p.device);
  if (opt.check_pointers) {
    check_problem_pointers(p);
    check_pointer(p.topk.indices, "indices", p.device);
    check_pointer(p.topk.values, "values", p.device);
    check_pointer(p.topk.softmax, "softmax", p.device);
    check_pointer(p.topk.workspace, "topk.workspace", p.device);
  }
  const Family& family = choose_family(p, dev, opt.family, env().disable_lean);
  Plan plan = make_plan(p, dev, family);
  if (plan.empty) return;
  std::shared_ptr<LoadedKernel> kernel = kernel_for_call(p, dev, opt.family, plan);  // may take the hatch's plan
  if (p.topk.workspace && p.topk.workspace_bytes < plan.workspace_bytes)
    bad("topk.workspace_bytes", fmt::format(">= {} (indexer_topk_workspace_size)", plan.workspace_bytes),
        std::to_string(p.topk.workspace_bytes));
  // Without the caller's workspace, the stream-ordered pool's: the memory is the stream's until
  // its free runs on it, so a later call (or another stream) never sees it in use.
  StreamScratch owned(p.topk.workspace ? 0 : plan.workspace_bytes, stream, "topk workspace");
  if (owned.get()) {
    p.topk.workspace = owned.get();
    p.topk.workspace_bytes = plan.workspace_bytes;
  }
  launch_forward(p, plan, *kernel, stream);
  owned.free();
}

}  // namespace dsa_indexer::detail
