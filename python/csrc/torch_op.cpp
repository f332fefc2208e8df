// The PyTorch operators `dsa_indexer::indexer_forward` (scores), `indexer_forward_lse` (scores
// and lse), `indexer_forward_out` (into given tensors) and the short forms of the common calls
// `indexer_forward_bshd` / `indexer_forward_thd` on top of the library's C++ API
// (include/dsa_indexer/indexer.hpp).
//
// Loaded with torch.ops.load_library (python/dsa_indexer/_torch_op.py). It depends on libtorch's
// C++ ABI only, not on a Python version. Registered kernels:
//   CUDA      the forward, on the current CUDA stream of q's device under a device guard;
//   fake      (Python, dsa_indexer._torch_op) output shapes and dtypes only: what
//             FakeTensorMode, meta tensors and torch.compile run;
//   Autograd  torch's not-implemented fallback: the outputs get a grad_fn whose backward
//             raises "derivative for dsa_indexer::indexer_forward is not implemented".
// Library errors are rethrown as torch errors whose message starts with the C status name
// ("[DSA_STATUS_INVALID_ARGUMENT] ..."), which the Python side maps to its exception classes:
// InvalidArgument -> ValueError, UnsupportedConfig -> NotImplementedError, else RuntimeError.
#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#include "dsa_indexer/indexer.hpp"
#include "torch_op_support.hpp"

namespace {

using namespace dsa_torch;

dsa::ThdColumns columns_of(const std::string& s) {
  if (s == "local") return dsa::ThdColumns::local;
  if (s == "global") return dsa::ThdColumns::global;
  TORCH_CHECK_VALUE(false, "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: thd_columns: expected one of "
                           "'local', 'global', got '", s, "'");
}

dsa::WindowColumns window_columns_of(const std::string& s) {
  if (s == "key") return dsa::WindowColumns::key;
  if (s == "window_start") return dsa::WindowColumns::window_start;
  TORCH_CHECK_VALUE(false, "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: window_columns: expected one of "
                           "'key', 'window_start', got '", s, "'");
}

struct Shapes {
  Shape scores;
  Shape rows;  // lse
};

// The Python fake kernel (dsa_indexer._torch_op.result_shapes) computes the same shapes.
Shapes result_shapes(const at::Tensor& q, const at::Tensor& k, bool thd, std::optional<int64_t> max_k,
                     dsa::ThdColumns columns, dsa::WindowColumns window_columns) {
  if (thd) {
    TORCH_CHECK_VALUE(q.dim() == 3 && k.dim() == 3,
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: q / k: expected rank 3 ((T_q, H, D), "
                      "(T_k, 1, D)) for THD, got shapes ", q.sizes(), " / ", k.sizes());
    return {{{q.size(0), columns == dsa::ThdColumns::local ? *max_k : k.size(0)}, 2}, {{q.size(0)}, 1}};
  }
  TORCH_CHECK_VALUE(columns == dsa::ThdColumns::local,
                    "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: thd_columns: expected 'local' (the "
                    "default) for a BSHD call, got 'global'");
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4,
                    "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: q / k: expected rank 4 ((B, S_q, H, D), "
                    "(B, S_k, 1, D)) for BSHD (THD needs cu_seqlens_q/k), got shapes ", q.sizes(), " / ",
                    k.sizes());
  if (window_columns == dsa::WindowColumns::window_start) {
    TORCH_CHECK_VALUE(max_k.has_value() && *max_k >= 1,
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: max_seqlen_k: expected the width N >= 1 of "
                      "the scores (B, S_q, N) with window_columns='window_start', got ",
                      max_k.has_value() ? std::to_string(*max_k) : std::string("None"));
    return {{{q.size(0), q.size(1), *max_k}, 3}, {{q.size(0), q.size(1)}, 2}};
  }
  return {{{q.size(0), q.size(1), k.size(1)}, 3}, {{q.size(0), q.size(1)}, 2}};
}

struct Call {
  at::Tensor q, k, w;
  int64_t ratio;
  double sm_scale;
  OptTensor offsets, cu_q, cu_k;
  std::optional<int64_t> max_q, max_k;
  dsa::ThdColumns columns;
  dsa::KernelFamily family;
  OptTensor ks, ke, cu_q_host, cu_k_host;
  OptTensor q_scale, k_scale;  // FP8: fp32 per-row scales (not given: 1)
  dsa::WindowColumns window_columns = dsa::WindowColumns::key;
};

// Validates what the library cannot see (devices, THD argument pairs), then runs the forward
// into `scores` / `lse` (lse undefined: not computed) on the current stream of q's device. The
// caller holds a device guard for q's device.
void run(Call c, const at::Tensor& scores, const at::Tensor& lse) {
  require_cuda(c.k, "k");
  require_cuda(c.w, "w");
  const bool thd = is_thd(c.cu_q, c.cu_k, c.max_q, c.max_k);
  at::Tensor keep[2];  // contiguous copies of strided host mirrors
  dsa::IndexerOptions opt;
  opt.ratio = c.ratio;
  opt.sm_scale = static_cast<float>(c.sm_scale);
  opt.thd_columns = c.columns;
  opt.window_columns = c.window_columns;
  opt.family = c.family;
  // Tensors checked above to be CUDA tensors, and by the library to be of q's device: their data
  // pointers are that device's memory, so the driver is not asked again.
  opt.check_pointers = false;
  opt.q_causal_offsets = desc(c.offsets, "q_causal_offsets");
  opt.ks = desc(c.ks, "ks");
  opt.ke = desc(c.ke, "ke");
  // As the other optional operands: a CPU scale is described with device -1 and refused by the
  // library's validation, which names it.
  opt.q_scale = desc(c.q_scale, "q_scale");
  opt.k_scale = desc(c.k_scale, "k_scale");
  if (lse.defined()) opt.lse = desc(lse, "lse");
  if (thd) {
    // CPU cu_seqlens are copied to the device and serve as the host mirrors, as in the ctypes path.
    for (auto pair : {std::make_pair(&c.cu_q, &c.cu_q_host), std::make_pair(&c.cu_k, &c.cu_k_host)}) {
      if (pair.first->value().is_cuda()) continue;
      if (!pair.second->has_value()) *pair.second = *pair.first;
      *pair.first = pair.first->value().to(c.q.device());
    }
    TORCH_CHECK_VALUE(c.cu_q_host.has_value() == c.cu_k_host.has_value(),
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: cu_seqlens_q_host / cu_seqlens_k_host: "
                      "expected both or neither, got one");
    opt.cu_seqlens_q = desc(c.cu_q, "cu_seqlens_q");
    opt.cu_seqlens_k = desc(c.cu_k, "cu_seqlens_k");
    opt.max_seqlen_q = *c.max_q;
    opt.max_seqlen_k = *c.max_k;
    opt.cu_seqlens_q_host = host_mirror(c.cu_q_host, c.cu_q->numel(), "cu_seqlens_q_host", keep[0]);
    opt.cu_seqlens_k_host = host_mirror(c.cu_k_host, c.cu_k->numel(), "cu_seqlens_k_host", keep[1]);
  } else {
    TORCH_CHECK_VALUE(!c.cu_q_host.has_value() && !c.cu_k_host.has_value(),
                      "[DSA_STATUS_INVALID_ARGUMENT] indexer_forward: cu_seqlens_q_host / cu_seqlens_k_host: "
                      "expected none for a BSHD call, got a mirror");
  }
  const at::Tensor q = inner_contiguous(c.q), k = inner_contiguous(c.k), w = inner_contiguous(c.w);
  // cudaStream_t and CUstream are the same type (struct CUstream_st*).
  const CUstream stream = c10::cuda::getCurrentCUDAStream(c.q.get_device()).stream();
  try {
    dsa::indexer_forward(desc(q, "q"), desc(k, "k"), desc(w, "w"), desc(scores, "scores"), opt, stream);
  } catch (const dsa::Error& e) {
    rethrow(e, status_name(e));
  }
}

// The results on q's device (the caller holds its guard), from the CUDA caching allocator
// directly: at::empty would go through the dispatcher once more per tensor.
std::tuple<at::Tensor, at::Tensor> allocate(const Call& c, bool with_lse) {
  const bool thd = is_thd(c.cu_q, c.cu_k, c.max_q, c.max_k);
  const Shapes s = result_shapes(c.q, c.k, thd, c.max_k, c.columns, c.window_columns);
  auto empty = [&](const Shape& shape) {
    return at::Tensor(at::detail::empty_cuda(shape.ref(), at::kFloat, c.q.device(), std::nullopt));
  };
  return {empty(s.scores), with_lse ? empty(s.rows) : at::Tensor()};
}

Call make_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t ratio, double sm_scale,
               const OptTensor& offsets, const OptTensor& cu_q, const OptTensor& cu_k,
               std::optional<int64_t> max_q, std::optional<int64_t> max_k, const std::string& columns,
               const std::string& family, const OptTensor& ks, const OptTensor& ke, const OptTensor& cu_q_host,
               const OptTensor& cu_k_host, const OptTensor& q_scale, const OptTensor& k_scale,
               const std::string& window_columns) {
  return Call{q, k, w, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, columns_of(columns), family_of(family),
              ks, ke, cu_q_host, cu_k_host, q_scale, k_scale, window_columns_of(window_columns)};
}

// Allocates the results on q's device and runs the call: scores (kLse false) or scores and lse.
template <bool kLse>
std::conditional_t<kLse, std::tuple<at::Tensor, at::Tensor>, at::Tensor> forward_call(Call c) {
  require_cuda(c.q, "q");
  const c10::cuda::CUDAGuard guard(c.q.device());  // outputs are allocated on q's device
  auto [scores, lse] = allocate(c, kLse);
  run(std::move(c), scores, lse);
  if constexpr (kLse) {
    return {scores, lse};
  } else {
    return scores;
  }
}

// indexer_forward (kLse false: the scores) and indexer_forward_lse (kLse true: scores and lse).
template <bool kLse>
std::conditional_t<kLse, std::tuple<at::Tensor, at::Tensor>, at::Tensor> forward_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t ratio, double sm_scale,
    const OptTensor& offsets, const OptTensor& cu_q, const OptTensor& cu_k, std::optional<int64_t> max_q,
    std::optional<int64_t> max_k, const std::string& columns, const std::string& family, const OptTensor& ks,
    const OptTensor& ke, const OptTensor& cu_q_host, const OptTensor& cu_k_host, const OptTensor& q_scale,
    const OptTensor& k_scale, const std::string& window_columns) {
  return forward_call<kLse>(make_call(q, k, w, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, columns, family, ks,
                                      ke, cu_q_host, cu_k_host, q_scale, k_scale, window_columns));
}

// The short forms of indexer_forward for the common calls (local columns, automatic family, no
// explicit windows, no FP8 scales): every argument of their schemas is given and none has a default, so the
// dispatcher converts 6 (BSHD) or 12 (THD) arguments instead of 16 (docs/PERF_NOTES.md, host
// cost of a Python call).
at::Tensor forward_bshd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t ratio,
                             double sm_scale, const OptTensor& offsets) {
  return forward_call<false>(Call{q, k, w, ratio, sm_scale, offsets, std::nullopt, std::nullopt, std::nullopt,
                                  std::nullopt, dsa::ThdColumns::local, dsa::KernelFamily::automatic, std::nullopt,
                                  std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                                  dsa::WindowColumns::key});
}

at::Tensor forward_thd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t ratio,
                            double sm_scale, const OptTensor& offsets, const at::Tensor& cu_q, const at::Tensor& cu_k,
                            int64_t max_q, int64_t max_k, const OptTensor& cu_q_host, const OptTensor& cu_k_host) {
  return forward_call<false>(Call{q, k, w, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, dsa::ThdColumns::local,
                                  dsa::KernelFamily::automatic, std::nullopt, std::nullopt, cu_q_host, cu_k_host,
                                  std::nullopt, std::nullopt, dsa::WindowColumns::key});
}

void forward_out_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w, int64_t ratio,
                      double sm_scale, const OptTensor& offsets, const OptTensor& cu_q, const OptTensor& cu_k,
                      std::optional<int64_t> max_q, std::optional<int64_t> max_k, const std::string& columns,
                      const at::Tensor& out, const OptTensor& lse_out, const std::string& family,
                      const OptTensor& ks, const OptTensor& ke, const OptTensor& cu_q_host,
                      const OptTensor& cu_k_host, const OptTensor& q_scale, const OptTensor& k_scale,
                      const std::string& window_columns) {
  require_cuda(q, "q");
  require_cuda(out, "out");
  if (lse_out.has_value()) require_cuda(*lse_out, "lse_out");
  const c10::cuda::CUDAGuard guard(q.device());
  run(make_call(q, k, w, ratio, sm_scale, offsets, cu_q, cu_k, max_q, max_k, columns, family, ks, ke, cu_q_host,
                cu_k_host, q_scale, k_scale, window_columns),
      out, lse_out.has_value() ? *lse_out : at::Tensor());
}

}  // namespace

// The argument names, order and defaults are those of dsa_indexer.indexer_forward (and so of
// cuDNN-frontend's wrapper where they overlap), but for return_lse: `indexer_forward` returns the
// scores alone and `indexer_forward_lse` scores and lse (a second result that is not wanted would
// cost an allocation and a Python object per call).
#define DSA_OP_ARGS                                                                                         \
  "Tensor q, Tensor k, Tensor w, int ratio=4, float sm_scale=1.0, Tensor? q_causal_offsets=None, "         \
  "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, int? max_seqlen_q=None, int? max_seqlen_k=None, " \
  "str thd_columns=\"local\""
// q_scale / k_scale (FP8 inputs) and then window_columns came after the others and stay last:
// keyword-only with defaults, so that every call written against the earlier schema still binds.
#define DSA_OP_EXTENSIONS                                                                                          \
  "str family=\"auto\", Tensor? ks=None, Tensor? ke=None, Tensor? cu_seqlens_q_host=None, Tensor? cu_seqlens_k_host=None, " \
  "Tensor? q_scale=None, Tensor? k_scale=None, str window_columns=\"key\""
TORCH_LIBRARY(dsa_indexer, m) {
  // The fake (meta) kernels are Python's (dsa_indexer._torch_op registers them when it loads
  // this library): a C++ Meta kernel would make FakeTensor propagate one device over all
  // operands, and the CPU host mirrors of cu_seqlens are not on q's device.
  m.set_python_module("dsa_indexer._torch_op");
  m.def("indexer_forward(" DSA_OP_ARGS ", *, " DSA_OP_EXTENSIONS ") -> Tensor");
  m.def("indexer_forward_lse(" DSA_OP_ARGS ", *, " DSA_OP_EXTENSIONS ") -> (Tensor scores, Tensor lse)");
  // indexer_forward with thd_columns="local" and family="auto", every argument required.
  m.def("indexer_forward_bshd(Tensor q, Tensor k, Tensor w, int ratio, float sm_scale, Tensor? q_causal_offsets) -> Tensor");
  m.def("indexer_forward_thd(Tensor q, Tensor k, Tensor w, int ratio, float sm_scale, Tensor? q_causal_offsets, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, Tensor? cu_seqlens_q_host, "
        "Tensor? cu_seqlens_k_host) -> Tensor");
  // A separate name rather than an `.out` overload: torch.compile functionalizes a custom op
  // that mutates its arguments and returns nothing; one returning an alias of `out` it cannot.
  m.def("indexer_forward_out(" DSA_OP_ARGS ", *, Tensor(a!) out, Tensor(b!)? lse_out=None, " DSA_OP_EXTENSIONS
        ") -> ()");
}

TORCH_LIBRARY_IMPL(dsa_indexer, CUDA, m) {
  m.impl("indexer_forward", &forward_cuda<false>);
  m.impl("indexer_forward_lse", &forward_cuda<true>);
  m.impl("indexer_forward_bshd", &forward_bshd_cuda);
  m.impl("indexer_forward_thd", &forward_thd_cuda);
  m.impl("indexer_forward_out", &forward_out_cuda);
}

// CPU operands reach the CUDA kernel's checks, which name the operand that is not on the GPU
// (instead of the dispatcher's "could not run ... with arguments from the 'CPU' backend").
TORCH_LIBRARY_IMPL(dsa_indexer, CPU, m) {
  m.impl("indexer_forward", &forward_cuda<false>);
  m.impl("indexer_forward_lse", &forward_cuda<true>);
  m.impl("indexer_forward_bshd", &forward_bshd_cuda);
  m.impl("indexer_forward_thd", &forward_thd_cuda);
  m.impl("indexer_forward_out", &forward_out_cuda);
}

// The out variant mutates its arguments: version counters are bumped as for in-place ops.
TORCH_LIBRARY_IMPL(dsa_indexer, ADInplaceOrView, m) {
  m.impl("indexer_forward_out", torch::autograd::autogradNotImplementedInplaceOrViewFallback());
}

TORCH_LIBRARY_IMPL(dsa_indexer, Autograd, m) {
  m.impl("indexer_forward", torch::autograd::autogradNotImplementedFallback());
  m.impl("indexer_forward_lse", torch::autograd::autogradNotImplementedFallback());
  m.impl("indexer_forward_bshd", torch::autograd::autogradNotImplementedFallback());
  m.impl("indexer_forward_thd", torch::autograd::autogradNotImplementedFallback());
  m.impl("indexer_forward_out", torch::autograd::autogradNotImplementedFallback());
}
