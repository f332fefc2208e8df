#include "gpu_runner.hpp"

#include <fmt/format.h>

#include <cstring>

#include "cuda/driver.hpp"

namespace dsa_support {

using dsa_indexer::DType;
using dsa_indexer::TensorDesc;
namespace dd = dsa_indexer::detail;

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  dd::ScopedContext ctx(device);
  DSA_CU(cuMemAlloc(&ptr_, bytes ? bytes : 16));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) {
    dd::ScopedContext ctx(device_);
    dd::Driver::get().cuMemFree(ptr_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) { o.ptr_ = 0; }
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  std::swap(device_, o.device_);
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t n) {
  if (!n) return;
  dd::ScopedContext ctx(device_);
  DSA_CU(cuMemcpyHtoD(ptr_, src, n));
}
void DeviceBuffer::download(void* dst, size_t n) const {
  if (!n) return;
  dd::ScopedContext ctx(device_);
  DSA_CU(cuMemcpyDtoH(dst, ptr_, n));
}
void DeviceBuffer::fill_u32(uint32_t v) {
  dd::ScopedContext ctx(device_);
  DSA_CU(cuMemsetD32(ptr_, v, bytes_ / 4));
}

bool gpu_available(std::string* why) {
  if (!dd::Driver::probe(why)) return false;
  const auto& info = dd::device_info(0);
  if (info.cc_major != 9) {
    if (why) *why = fmt::format("device 0 is {} (compute capability {}.{}), not Hopper", info.name, info.cc_major, info.cc_minor);
    return false;
  }
  return true;
}

void sync_device(int device) {
  dd::ScopedContext ctx(device);
  DSA_CU(cuCtxSynchronize());
}

namespace {
// A device copy of a host vector.
template <class T>
DeviceBuffer to_device(const std::vector<T>& v, int device) {
  DeviceBuffer b(v.size() * sizeof(T), device);
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
}  // namespace

DeviceProblem upload(const HostProblem& p, int device, bool host_seqlens) {
  DeviceProblem d;
  const int64_t rows = p.rows(), cols = p.cols();
  if (!p.fp8) {
    d.q = to_device(p.q, device);
    d.k = to_device(p.k, device);
  } else {
    d.q = to_device(p.q8, device);
    d.k = to_device(p.k8, device);
    if (!p.q_scale.empty()) d.q_scale = to_device(p.q_scale, device);
    if (!p.k_scale.empty()) d.k_scale = to_device(p.k_scale, device);
  }
  d.w = p.w_f32 ? to_device(p.w_f32v, device) : to_device(p.w_bf16, device);
  d.out = DeviceBuffer(static_cast<size_t>(rows * cols) * 4, device);
  if (p.thd()) {
    d.cu_q = to_device(p.cu_q, device);
    d.cu_k = to_device(p.cu_k, device);
  }
  if (!p.offsets.empty()) d.offsets = to_device(p.offsets, device);
  if (!p.ks.empty()) {
    d.ks = to_device(p.ks, device);
    d.ke = to_device(p.ke, device);
  }
  if (p.lse) d.lse = DeviceBuffer(static_cast<size_t>(rows) * 4, device);
  ProblemPointers ptr;
  ptr.q = d.q.get();
  ptr.k = d.k.get();
  ptr.w = d.w.get();
  ptr.out = d.out.get();
  ptr.lse = d.lse.get();
  ptr.offsets = d.offsets.get();
  ptr.cu_q = d.cu_q.get();
  ptr.cu_k = d.cu_k.get();
  ptr.ks = d.ks.get();
  ptr.ke = d.ke.get();
  ptr.q_scale = d.q_scale.get();
  ptr.k_scale = d.k_scale.get();
  describe_problem(p, ptr, d, device, host_seqlens);
  return d;
}

void describe_problem(const HostProblem& p, const ProblemPointers& ptr, DeviceProblem& d, int device, bool host_seqlens) {
  const int64_t H = p.heads, D = 128, rows = p.rows(), cols = p.cols();
  auto vec_i32 = [device](void* data, int64_t n) { return TensorDesc::contiguous(data, DType::i32, {n}, device); };
  const DType wt = p.w_f32 ? DType::f32 : DType::bf16;
  const DType qk = p.fp8 ? DType::e4m3 : DType::bf16;
  if (!p.thd()) {
    d.tq = TensorDesc::contiguous(ptr.q, qk, {p.batch, p.s_q, H, D}, device);
    d.tk = TensorDesc::contiguous(ptr.k, qk, {p.batch, p.s_k, 1, D}, device);
    d.tw = TensorDesc::contiguous(ptr.w, wt, {p.batch, p.s_q, H}, device);
    d.tout = TensorDesc::contiguous(ptr.out, DType::f32, {p.batch, p.s_q, cols}, device);
  } else {
    d.tq = TensorDesc::contiguous(ptr.q, qk, {p.t_q(), H, D}, device);
    d.tk = TensorDesc::contiguous(ptr.k, qk, {p.t_k(), 1, D}, device);
    d.tw = TensorDesc::contiguous(ptr.w, wt, {p.t_q(), H}, device);
    d.tout = TensorDesc::contiguous(ptr.out, DType::f32, {p.t_q(), cols}, device);
    const int64_t n = static_cast<int64_t>(p.cu_q.size());
    d.opt.cu_seqlens_q = vec_i32(ptr.cu_q, n);
    d.opt.cu_seqlens_k = vec_i32(ptr.cu_k, n);
    d.opt.max_seqlen_q = p.max_q;
    d.opt.max_seqlen_k = p.max_k;
    if (host_seqlens) {
      d.cu_q_host = p.cu_q;
      d.cu_k_host = p.cu_k;
      d.opt.cu_seqlens_q_host = d.cu_q_host.data();
      d.opt.cu_seqlens_k_host = d.cu_k_host.data();
    }
    d.opt.thd_columns = p.layout == Layout::thd_global ? dsa_indexer::ThdColumns::global : dsa_indexer::ThdColumns::local;
  }
  d.opt.ratio = p.ratio;
  d.opt.sm_scale = p.sm_scale;
  if (p.window_width > 0) d.opt.window_columns = dsa_indexer::WindowColumns::window_start;
  if (!p.offsets.empty()) d.opt.q_causal_offsets = vec_i32(ptr.offsets, static_cast<int64_t>(p.offsets.size()));
  if (!p.ks.empty()) {
    if (p.thd()) {
      d.opt.ks = vec_i32(ptr.ks, rows);
      d.opt.ke = vec_i32(ptr.ke, rows);
    } else {
      d.opt.ks = TensorDesc::contiguous(ptr.ks, DType::i32, {p.batch, p.s_q}, device);
      d.opt.ke = TensorDesc::contiguous(ptr.ke, DType::i32, {p.batch, p.s_q}, device);
    }
  }
  if (p.lse)
    d.opt.lse = p.thd() ? TensorDesc::contiguous(ptr.lse, DType::f32, {rows}, device)
                        : TensorDesc::contiguous(ptr.lse, DType::f32, {p.batch, p.s_q}, device);
  if (p.fp8 && !p.q_scale.empty())
    d.opt.q_scale = p.thd() ? TensorDesc::contiguous(ptr.q_scale, DType::f32, {p.t_q(), H}, device)
                            : TensorDesc::contiguous(ptr.q_scale, DType::f32, {p.batch, p.s_q, H}, device);
  if (p.fp8 && !p.k_scale.empty()) {
    if (p.thd())
      d.opt.k_scale = p.k_scale_unit_dim ? TensorDesc::contiguous(ptr.k_scale, DType::f32, {p.t_k(), 1}, device)
                                         : TensorDesc::contiguous(ptr.k_scale, DType::f32, {p.t_k()}, device);
    else
      d.opt.k_scale = p.k_scale_unit_dim ? TensorDesc::contiguous(ptr.k_scale, DType::f32, {p.batch, p.s_k, 1}, device)
                                         : TensorDesc::contiguous(ptr.k_scale, DType::f32, {p.batch, p.s_k}, device);
  }
}

GpuResult run(const HostProblem& p, DeviceProblem& dp, dsa_indexer::KernelFamily family, CUstream stream) {
  dp.out.fill_u32(kPoison);
  if (p.lse) dp.lse.fill_u32(kPoison);
  dp.opt.family = family;
  dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, stream);
  {
    dd::ScopedContext ctx(dp.tq.device);
    DSA_CU(cuStreamSynchronize(stream));
  }
  GpuResult r;
  r.scores.resize(static_cast<size_t>(p.rows() * p.cols()));
  dp.out.download(r.scores.data(), r.scores.size() * 4);
  if (p.lse) {
    r.lse.resize(static_cast<size_t>(p.rows()));
    dp.lse.download(r.lse.data(), r.lse.size() * 4);
  }
  return r;
}

}  // namespace dsa_support
