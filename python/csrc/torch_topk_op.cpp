// The PyTorch operators of the top-k operation (include/dsa_indexer/topk.hpp):
//   indexer_topk      allocates the results and returns them as a list: indices, then values,
//                     softmax and lse in that order, each only when its return_* flag is set (the
//                     list's length is fixed by the flags, which are constants when traced);
//   indexer_topk_out  fills the caller's buffers (indices_out, and values_out / softmax_out /
//                     lse_out / workspace when given), declared mutated: the form for CUDA-graph
//                     capture with buffers the caller owns.
// Both run on the current CUDA stream of q's device under a device guard, with the same fake
// (Python, dsa_indexer._torch_op), Autograd and CPU registrations as the scores operators
// (torch_op.cpp, which defines the library; this file adds a fragment).
//
// The workspace: unless the caller passes one, indexer_topk_workspace_size bytes come from
// PyTorch's caching allocator on the current stream (never the driver's pool the C++ API would
// otherwise use), so torch.cuda.max_memory_allocated counts them, a CUDA graph captures them
// into its private pool, and nothing synchronizes. THD without host cu_seqlens mirrors copies
// the device arrays to the host once (on the current stream, as the scores operators do) and
// uses the copies for both the size query and the call.
#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "dsa_indexer/topk.hpp"
#include "torch_op_support.hpp"

namespace {

using namespace dsa_torch;

constexpr const char* kWhere = "indexer_topk";

struct TopkCall {
  at::Tensor q, k, w;
  int64_t top_k, ratio;
  double sm_scale;
  OptTensor offsets, cu_q, cu_k;
  std::optional<int64_t> max_q, max_k;
  bool global_indices, sort_by_score;
  dsa::KernelFamily family;
  OptTensor cu_q_host, cu_k_host;
  OptTensor q_scale, k_scale;  // FP8: fp32 per-row scales (not given: 1)
};

// The outputs of one call (undefined: not computed) and its workspace (undefined: allocated here).
struct TopkOutputs {
  at::Tensor indices, values, softmax, lse, workspace;
};

// indices (B, S_q, top_k) / THD (T_q, top_k) and lse (B, S_q) / (T_q,): the Python fake kernel
// (dsa_indexer._torch_op.topk_shapes) computes the same.
struct TopkShapes {
  Shape indices, rows;
};
TopkShapes topk_shapes(const TopkCall& c, bool thd) {
  // Checked before the outputs are allocated (their shape is (..., top_k)); the library checks
  // its `k` again with the same bounds.
  TORCH_CHECK_VALUE(c.top_k >= 1, "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: top_k: expected >= 1, got ", c.top_k);
  TORCH_CHECK_NOT_IMPLEMENTED(c.top_k <= dsa::kTopkMaxK, "[DSA_STATUS_UNSUPPORTED_CONFIG] indexer_topk: top_k: expected <= ",
                              dsa::kTopkMaxK, ", got ", c.top_k);
  if (thd) {
    TORCH_CHECK_VALUE(c.q.dim() == 3 && c.k.dim() == 3,
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: q / k: expected rank 3 ((T_q, H, D), "
                      "(T_k, 1, D)) for THD, got shapes ", c.q.sizes(), " / ", c.k.sizes());
    return {{{c.q.size(0), c.top_k}, 2}, {{c.q.size(0)}, 1}};
  }
  TORCH_CHECK_VALUE(c.q.dim() == 4 && c.k.dim() == 4,
                    "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: q / k: expected rank 4 ((B, S_q, H, D), "
                    "(B, S_k, 1, D)) for BSHD (THD needs cu_seqlens_q/k), got shapes ", c.q.sizes(), " / ",
                    c.k.sizes());
  return {{{c.q.size(0), c.q.size(1), c.top_k}, 3}, {{c.q.size(0), c.q.size(1)}, 2}};
}

at::Tensor empty_on(const at::Device& device, at::IntArrayRef shape, at::ScalarType dtype) {
  return at::Tensor(at::detail::empty_cuda(shape, dtype, device, std::nullopt));
}

// Validates what the library cannot see (devices, THD argument pairs), then runs the top-k into
// `out` on the current stream of q's device. The caller holds a device guard for q's device.
void run_topk(TopkCall c, TopkOutputs& out) {
  require_cuda(c.q, "q", kWhere);
  require_cuda(c.k, "k", kWhere);
  require_cuda(c.w, "w", kWhere);
  const bool thd = is_thd(c.cu_q, c.cu_k, c.max_q, c.max_k, kWhere);
  at::Tensor keep[2];  // contiguous copies of strided host mirrors
  dsa::IndexerOptions opt;
  opt.ratio = c.ratio;
  opt.sm_scale = static_cast<float>(c.sm_scale);
  opt.family = c.family;
  opt.check_pointers = false;  // CUDA tensors of q's device (the library checks the devices)
  opt.q_causal_offsets = desc(c.offsets, "q_causal_offsets", kWhere);
  opt.q_scale = desc(c.q_scale, "q_scale", kWhere);
  opt.k_scale = desc(c.k_scale, "k_scale", kWhere);
  if (out.lse.defined()) opt.lse = desc(out.lse, "lse", kWhere);
  if (thd) {
    // The size query and the call both validate cu_seqlens on the host: CPU cu_seqlens are copied
    // to the device and serve as mirrors; device ones without mirrors are read once, here.
    for (auto pair : {std::make_pair(&c.cu_q, &c.cu_q_host), std::make_pair(&c.cu_k, &c.cu_k_host)}) {
      if (pair.first->value().is_cuda()) continue;
      if (!pair.second->has_value()) *pair.second = *pair.first;
      *pair.first = pair.first->value().to(c.q.device());
    }
    TORCH_CHECK_VALUE(c.cu_q_host.has_value() == c.cu_k_host.has_value(),
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: cu_seqlens_q_host / cu_seqlens_k_host: "
                      "expected both or neither, got one");
    if (!c.cu_q_host.has_value()) {
      c.cu_q_host = c.cu_q->to(at::kCPU);
      c.cu_k_host = c.cu_k->to(at::kCPU);
    }
    opt.cu_seqlens_q = desc(c.cu_q, "cu_seqlens_q", kWhere);
    opt.cu_seqlens_k = desc(c.cu_k, "cu_seqlens_k", kWhere);
    opt.max_seqlen_q = *c.max_q;
    opt.max_seqlen_k = *c.max_k;
    opt.cu_seqlens_q_host = host_mirror(c.cu_q_host, c.cu_q->numel(), "cu_seqlens_q_host", keep[0], kWhere);
    opt.cu_seqlens_k_host = host_mirror(c.cu_k_host, c.cu_k->numel(), "cu_seqlens_k_host", keep[1], kWhere);
  } else {
    TORCH_CHECK_VALUE(!c.cu_q_host.has_value() && !c.cu_k_host.has_value(),
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: cu_seqlens_q_host / cu_seqlens_k_host: "
                      "expected none for a BSHD call, got a mirror");
  }
  dsa::TopkOptions t;
  t.k = static_cast<int32_t>(c.top_k);
  t.sort_by_score = c.sort_by_score;
  t.indices = c.global_indices ? dsa::TopkIndices::global : dsa::TopkIndices::local;
  if (out.values.defined()) t.values = desc(out.values, "values", kWhere);
  if (out.softmax.defined()) t.softmax = desc(out.softmax, "softmax", kWhere);
  const at::Tensor q = inner_contiguous(c.q), k = inner_contiguous(c.k), w = inner_contiguous(c.w);
  const dsa::TensorDesc dq = desc(q, "q", kWhere), dk = desc(k, "k", kWhere), dw = desc(w, "w", kWhere);
  const dsa::TensorDesc di = desc(out.indices, "indices", kWhere);
  const CUstream stream = c10::cuda::getCurrentCUDAStream(c.q.get_device()).stream();
  try {
    if (out.workspace.defined()) {
      TORCH_CHECK_VALUE(out.workspace.is_contiguous(),
                        "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: workspace: expected a contiguous tensor, got strides ",
                        out.workspace.strides());
      t.workspace = out.workspace.data_ptr();
      t.workspace_bytes = static_cast<std::size_t>(out.workspace.nbytes());
    } else {
      // The size query validates the whole call, so a malformed one fails here, before any allocation.
      const std::size_t bytes = dsa::indexer_topk_workspace_size(dq, dk, dw, di, opt, t);
      if (bytes > 0) {
        out.workspace = empty_on(c.q.device(), {static_cast<int64_t>(bytes)}, at::kByte);
        t.workspace = out.workspace.data_ptr();
        t.workspace_bytes = bytes;
      }
    }
    dsa::indexer_topk(dq, dk, dw, di, opt, t, stream);
  } catch (const dsa::Error& e) {
    rethrow(e, status_name(e));
  }
}

// A family of the top-k operation (or automatic), by name: the registry's names, so that a
// scores family is refused here as the fake kernel and the ctypes binding refuse it.
dsa::KernelFamily topk_family_of(const std::string& name) {
  const dsa::KernelFamily id = family_of(name, kWhere);
  if (id == dsa::KernelFamily::automatic) return id;
  std::string names = "'auto'";
  bool topk = false;
  for (int i = 0; i < dsa::kernel_family_count(); ++i) {
    const dsa::KernelFamilyInfo info = dsa::kernel_family_info(i);
    if (std::string(info.operation) != "topk") continue;
    names += std::string(", '") + info.name + "'";
    topk = topk || info.id == id;
  }
  TORCH_CHECK_VALUE(topk, "[DSA_STATUS_INVALID_ARGUMENT] indexer_topk: family: expected one of ", names, ", got '", name, "'");
  return id;
}

TopkCall make_topk_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t top_k, int64_t ratio,
                        double sm_scale, const OptTensor& offsets, const OptTensor& cu_q, const OptTensor& cu_k,
                        std::optional<int64_t> max_q, std::optional<int64_t> max_k, bool global_indices,
                        bool sort_by_score, const std::string& family, const OptTensor& cu_q_host,
                        const OptTensor& cu_k_host, const OptTensor& q_scale, const OptTensor& k_scale) {
  return TopkCall{q,     k,     w,     top_k,          ratio,         sm_scale, offsets, cu_q, cu_k,
                  max_q, max_k, global_indices, sort_by_score, topk_family_of(family), cu_q_host, cu_k_host,
                  q_scale, k_scale};
}

std::vector<at::Tensor> topk_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t top_k,
                                  int64_t ratio, double sm_scale, const OptTensor& offsets, const OptTensor& cu_q,
                                  const OptTensor& cu_k, std::optional<int64_t> max_q, std::optional<int64_t> max_k,
                                  bool global_indices, bool sort_by_score, bool return_values, bool return_softmax,
                                  bool return_lse, const std::string& family, const OptTensor& cu_q_host,
                                  const OptTensor& cu_k_host, const OptTensor& q_scale, const OptTensor& k_scale) {
  require_cuda(q, "q", kWhere);
  const c10::cuda::CUDAGuard guard(q.device());  // outputs are allocated on q's device
  TopkCall c = make_topk_call(q, k, w, top_k, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, global_indices,
                              sort_by_score, family, cu_q_host, cu_k_host, q_scale, k_scale);
  const TopkShapes s = topk_shapes(c, is_thd(c.cu_q, c.cu_k, c.max_q, c.max_k, kWhere));
  TopkOutputs out;
  out.indices = empty_on(q.device(), s.indices.ref(), at::kInt);
  if (return_values) out.values = empty_on(q.device(), s.indices.ref(), at::kFloat);
  if (return_softmax) out.softmax = empty_on(q.device(), s.indices.ref(), at::kFloat);
  if (return_lse) out.lse = empty_on(q.device(), s.rows.ref(), at::kFloat);
  run_topk(std::move(c), out);
  std::vector<at::Tensor> result{out.indices};
  for (const at::Tensor* t : {&out.values, &out.softmax, &out.lse})
    if (t->defined()) result.push_back(*t);
  return result;
}

void topk_out_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t top_k, int64_t ratio,
                   double sm_scale, const OptTensor& offsets, const OptTensor& cu_q, const OptTensor& cu_k,
                   std::optional<int64_t> max_q, std::optional<int64_t> max_k, const at::Tensor& indices_out,
                   const OptTensor& values_out, const OptTensor& softmax_out, const OptTensor& lse_out,
                   const OptTensor& workspace, bool global_indices, bool sort_by_score, const std::string& family,
                   const OptTensor& cu_q_host, const OptTensor& cu_k_host, const OptTensor& q_scale,
                   const OptTensor& k_scale) {
  require_cuda(q, "q", kWhere);
  require_cuda(indices_out, "indices_out", kWhere);
  TopkOutputs out;
  out.indices = indices_out;
  const struct {
    const OptTensor* given;
    at::Tensor* into;
    const char* name;
  } optional_outs[] = {{&values_out, &out.values, "values_out"},
                       {&softmax_out, &out.softmax, "softmax_out"},
                       {&lse_out, &out.lse, "lse_out"},
                       {&workspace, &out.workspace, "workspace"}};
  for (const auto& o : optional_outs) {
    if (!o.given->has_value()) continue;
    require_cuda(**o.given, o.name, kWhere);
    *o.into = **o.given;
  }
  const c10::cuda::CUDAGuard guard(q.device());
  run_topk(make_topk_call(q, k, w, top_k, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, global_indices,
                          sort_by_score, family, cu_q_host, cu_k_host, q_scale, k_scale),
           out);
}

}  // namespace

// dsa_indexer.indexer_topk's arguments (top_k named as in cuDNN-frontend's top-k wrappers; ratio 4
// as in indexer_forward); the flags and extensions are keyword-only.
#define DSA_TOPK_ARGS                                                                                          \
  "Tensor q, Tensor k, Tensor w, int top_k=2048, int ratio=4, float sm_scale=1.0, "                           \
  "Tensor? q_causal_offsets=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, int? max_seqlen_q=None, " \
  "int? max_seqlen_k=None"
#define DSA_TOPK_OPTIONS "bool global_indices=False, bool sort_by_score=False"
// q_scale / k_scale (FP8 inputs, as the scores operators) last, keyword-only with defaults: the
// earlier schema's calls still bind.
#define DSA_TOPK_EXTENSIONS                                                                     \
  "str family=\"auto\", Tensor? cu_seqlens_q_host=None, Tensor? cu_seqlens_k_host=None, " \
  "Tensor? q_scale=None, Tensor? k_scale=None"
TORCH_LIBRARY_FRAGMENT(dsa_indexer, m) {
  m.def("indexer_topk(" DSA_TOPK_ARGS ", *, " DSA_TOPK_OPTIONS
        ", bool return_values=False, bool return_softmax=False, bool return_lse=False, " DSA_TOPK_EXTENSIONS
        ") -> Tensor[]");
  m.def("indexer_topk_out(" DSA_TOPK_ARGS ", *, Tensor(a!) indices_out, Tensor(b!)? values_out=None, "
        "Tensor(c!)? softmax_out=None, Tensor(d!)? lse_out=None, Tensor(e!)? workspace=None, " DSA_TOPK_OPTIONS
        ", " DSA_TOPK_EXTENSIONS ") -> ()");
}

TORCH_LIBRARY_IMPL(dsa_indexer, CUDA, m) {
  m.impl("indexer_topk", &topk_cuda);
  m.impl("indexer_topk_out", &topk_out_cuda);
}

// CPU operands reach the CUDA kernel's checks, which name the operand that is not on the GPU.
TORCH_LIBRARY_IMPL(dsa_indexer, CPU, m) {
  m.impl("indexer_topk", &topk_cuda);
  m.impl("indexer_topk_out", &topk_out_cuda);
}

TORCH_LIBRARY_IMPL(dsa_indexer, ADInplaceOrView, m) {
  m.impl("indexer_topk_out", torch::autograd::autogradNotImplementedInplaceOrViewFallback());
}

TORCH_LIBRARY_IMPL(dsa_indexer, Autograd, m) {
  m.impl("indexer_topk", torch::autograd::autogradNotImplementedFallback());
  m.impl("indexer_topk_out", torch::autograd::autogradNotImplementedFallback());
}
