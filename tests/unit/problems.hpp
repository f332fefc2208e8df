#pragma once
// Well-formed descriptors over fake (never dereferenced) device addresses, for tests that
// exercise validation and planning without a GPU.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa_indexer/indexer.hpp"

namespace dsa_test {

using dsa_indexer::DType;
using dsa_indexer::IndexerOptions;
using dsa_indexer::TensorDesc;

inline void* fake(uintptr_t a) { return reinterpret_cast<void*>(a); }

struct Call {
  TensorDesc q, k, w, out;
  IndexerOptions opt;
};

inline Call bshd_call(int64_t B = 2, int64_t sq = 256, int64_t sk = 128, int64_t H = 64, DType wt = DType::bf16) {
  Call c;
  c.q = TensorDesc::contiguous(fake(0x100000), DType::bf16, {B, sq, H, 128});
  c.k = TensorDesc::contiguous(fake(0x200000), DType::bf16, {B, sk, 1, 128});
  c.w = TensorDesc::contiguous(fake(0x300000), wt, {B, sq, H});
  c.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {B, sq, sk});
  c.opt.ratio = 2;
  return c;
}

// THD with host mirrors of cu_seqlens (no device read).
struct ThdCall : Call {
  int32_t cuq[4] = {0, 5, 5, 12};
  int32_t cuk[4] = {0, 3, 10, 16};
};

inline void make_thd(ThdCall& c, int64_t H = 32, bool global = false) {
  const int64_t tq = 12, tk = 16;
  c.q = TensorDesc::contiguous(fake(0x100000), DType::bf16, {tq, H, 128});
  c.k = TensorDesc::contiguous(fake(0x200000), DType::bf16, {tk, 1, 128});
  c.w = TensorDesc::contiguous(fake(0x300000), DType::f32, {tq, H});
  c.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {tq, global ? tk : 7});
  c.opt.cu_seqlens_q = TensorDesc::contiguous(fake(0x500000), DType::i32, {4});
  c.opt.cu_seqlens_k = TensorDesc::contiguous(fake(0x600000), DType::i32, {4});
  c.opt.cu_seqlens_q_host = c.cuq;
  c.opt.cu_seqlens_k_host = c.cuk;
  c.opt.max_seqlen_q = 7;
  c.opt.max_seqlen_k = 7;
  c.opt.thd_columns = global ? dsa_indexer::ThdColumns::global : dsa_indexer::ThdColumns::local;
}

// A packed call over fake addresses: segments of sq[i] query and sk[i] key rows, host mirrors.
struct PackedCall : Call {
  std::vector<int32_t> cuq{0}, cuk{0};
  PackedCall(const std::vector<int64_t>& sq, const std::vector<int64_t>& sk, bool global = false, int64_t H = 64) {
    int64_t mq = 0, mk = 0;
    for (std::size_t i = 0; i < sq.size(); ++i) {
      cuq.push_back(cuq.back() + static_cast<int32_t>(sq[i]));
      cuk.push_back(cuk.back() + static_cast<int32_t>(sk[i]));
      mq = std::max(mq, sq[i]);
      mk = std::max(mk, sk[i]);
    }
    const int64_t tq = cuq.back(), tk = cuk.back(), n = static_cast<int64_t>(cuq.size());
    q = TensorDesc::contiguous(fake(0x100000), DType::bf16, {tq, H, 128});
    k = TensorDesc::contiguous(fake(0x200000), DType::bf16, {tk, 1, 128});
    w = TensorDesc::contiguous(fake(0x300000), DType::bf16, {tq, H});
    out = TensorDesc::contiguous(fake(0x400000), DType::f32, {tq, global ? tk : mk});
    opt.ratio = 2;
    opt.cu_seqlens_q = TensorDesc::contiguous(fake(0x500000), DType::i32, {n});
    opt.cu_seqlens_k = TensorDesc::contiguous(fake(0x600000), DType::i32, {n});
    opt.cu_seqlens_q_host = cuq.data();
    opt.cu_seqlens_k_host = cuk.data();
    opt.max_seqlen_q = mq;
    opt.max_seqlen_k = mk;
    opt.thd_columns = global ? dsa_indexer::ThdColumns::global : dsa_indexer::ThdColumns::local;
  }
  PackedCall(const PackedCall&) = delete;
};

}  // namespace dsa_test
