#include "ops/scores_args.hpp"

#include <algorithm>

namespace dsa_indexer::detail {

dsa::DsaArgs make_args(const Problem& p) {
  dsa::DsaArgs a{};
  auto addr = [](const void* ptr) { return static_cast<u64>(reinterpret_cast<uintptr_t>(ptr)); };
  a.q = addr(p.q);
  a.k = addr(p.k);
  a.w = addr(p.w);
  a.out = addr(p.out);
  a.lse = addr(p.lse);
  a.offsets = addr(p.offsets);
  a.cu_q = addr(p.cu_q);
  a.cu_k = addr(p.cu_k);
  a.ks = addr(p.ks);
  a.ke = addr(p.ke);
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = p.q_stride[i];
    a.w_stride[i] = p.w_stride[i];
  }
  for (int i = 0; i < 2; ++i) {
    a.k_stride[i] = p.k_stride[i];
    a.out_stride[i] = p.out_stride[i];
    a.lse_stride[i] = p.lse_stride[i];
    a.win_stride[i] = p.win_stride[i];
  }
  a.offsets_stride = p.offsets_stride;
  a.batch = p.batch;
  a.s_q = p.s_q;
  a.s_k = p.s_k;
  a.t_q = p.t_q;
  a.t_k = p.t_k;
  a.out_cols = p.out_cols;
  a.ratio = p.ratio;
  a.sm_scale = p.sm_scale;
  a.has_offsets = p.has_offsets ? 1 : 0;
  a.has_windows = p.has_windows ? 1 : 0;
  return a;
}

dsa::DsaScales make_scales(const Problem& p) {
  dsa::DsaScales s{};
  s.q_scale = p.has_q_scale ? static_cast<u64>(reinterpret_cast<uintptr_t>(p.q_scale)) : 0;
  s.k_scale = p.has_k_scale ? static_cast<u64>(reinterpret_cast<uintptr_t>(p.k_scale)) : 0;
  for (int i = 0; i < 3; ++i) s.q_scale_stride[i] = p.q_scale_stride[i];
  for (int i = 0; i < 2; ++i) s.k_scale_stride[i] = p.k_scale_stride[i];
  return s;
}

// bf16: two 64-column (128-byte) boxes per row of D; FP8: one 128-column (128-byte) box.
TmaGeometry q_tma_geometry(const Problem& p, int tokens_per_box) {
  TmaGeometry g;
  const uint32_t tpw = static_cast<uint32_t>(tokens_per_box);
  const uint64_t e = p.qk_dtype == DType::e4m3 ? 1 : 2;
  const uint32_t inner = static_cast<uint32_t>(128 / e);
  g.elem_bytes = static_cast<int>(e);
  if (p.layout == Layout::bshd) {
    g.rank = 4;
    const uint64_t d[4] = {128, uint64_t(p.heads), uint64_t(p.s_q), uint64_t(p.batch)};
    const uint64_t s[3] = {uint64_t(p.q_stride[2]) * e, uint64_t(p.q_stride[1]) * e, uint64_t(p.q_stride[0]) * e};
    const uint32_t b[4] = {inner, uint32_t(p.heads), tpw, 1};
    std::copy(d, d + 4, g.dims);
    std::copy(s, s + 3, g.strides_bytes);
    std::copy(b, b + 4, g.box);
  } else {
    g.rank = 3;
    const uint64_t d[3] = {128, uint64_t(p.heads), uint64_t(std::max<int64_t>(p.t_q, 1))};
    const uint64_t s[2] = {uint64_t(p.q_stride[2]) * e, uint64_t(p.q_stride[1]) * e};
    const uint32_t b[3] = {inner, uint32_t(p.heads), tpw};
    std::copy(d, d + 3, g.dims);
    std::copy(s, s + 2, g.strides_bytes);
    std::copy(b, b + 3, g.box);
  }
  return g;
}

TmaGeometry k_tma_geometry(const Problem& p) {
  TmaGeometry g;
  const uint64_t e = p.qk_dtype == DType::e4m3 ? 1 : 2;
  const uint32_t inner = static_cast<uint32_t>(128 / e);
  g.elem_bytes = static_cast<int>(e);
  if (p.layout == Layout::bshd) {
    g.rank = 3;
    const uint64_t d[3] = {128, uint64_t(p.s_k), uint64_t(p.batch)};
    const uint64_t s[2] = {uint64_t(p.k_stride[1]) * e, uint64_t(p.k_stride[0]) * e};
    const uint32_t b[3] = {inner, 64, 1};
    std::copy(d, d + 3, g.dims);
    std::copy(s, s + 2, g.strides_bytes);
    std::copy(b, b + 3, g.box);
  } else {
    g.rank = 2;
    // T_k == 0: every window is empty and no K tile is ever loaded; the map only has to encode.
    const uint64_t d[2] = {128, uint64_t(std::max<int64_t>(p.t_k, 1))};
    const uint64_t s[1] = {uint64_t(p.k_stride[1]) * e};
    const uint32_t b[2] = {inner, 64};
    std::copy(d, d + 2, g.dims);
    std::copy(s, s + 1, g.strides_bytes);
    std::copy(b, b + 2, g.box);
  }
  return g;
}

}  // namespace dsa_indexer::detail
