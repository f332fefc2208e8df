#pragma once
// One indexer_topk call on the GPU with poisoned outputs and a poisoned caller-owned workspace
// (the fused path must not read what it did not write): indices, values and softmax back on
// the host. BSHD problems (p.batch x p.s_q rows).
#include <vector>

#include "dsa_indexer/topk.hpp"
#include "gpu_cases.hpp"
#include "gpu_runner.hpp"

namespace dsa_gpu_test {

struct TopkOut {
  std::vector<int32_t> indices;
  std::vector<float> values, softmax;
};

inline TopkOut run_topk(const HostProblem& p, dsa_support::DeviceProblem& dp, KernelFamily family, int k, bool sorted, bool global) {
  namespace ds = dsa_support;
  const int64_t rows = p.rows();
  const size_t n = static_cast<size_t>(rows * k);
  ds::DeviceBuffer ind(n * 4), val(n * 4), sm(n * 4);
  ind.fill_u32(ds::kPoison);
  val.fill_u32(ds::kPoison);
  sm.fill_u32(ds::kPoison);
  using dsa_indexer::DType;
  using dsa_indexer::TensorDesc;
  dsa_indexer::TopkOptions t;
  t.k = k;
  t.sort_by_score = sorted;
  t.indices = global ? dsa_indexer::TopkIndices::global : dsa_indexer::TopkIndices::local;
  t.values = TensorDesc::contiguous(val.get(), DType::f32, {p.batch, p.s_q, k});
  t.softmax = TensorDesc::contiguous(sm.get(), DType::f32, {p.batch, p.s_q, k});
  dsa_indexer::IndexerOptions o = dp.opt;
  o.family = family;
  const TensorDesc ti = TensorDesc::contiguous(ind.get(), DType::i32, {p.batch, p.s_q, k});
  // A caller-owned workspace, poisoned: the fused path must not read what it did not write.
  const size_t bytes = dsa_indexer::indexer_topk_workspace_size(dp.tq, dp.tk, dp.tw, ti, o, t);
  ds::DeviceBuffer ws(bytes);
  ws.fill_u32(ds::kPoison);
  t.workspace = ws.get();
  t.workspace_bytes = bytes;
  dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, ti, o, t, nullptr);
  ds::sync_device();
  TopkOut r;
  r.indices.resize(n);
  r.values.resize(n);
  r.softmax.resize(n);
  ind.download(r.indices.data(), n * 4);
  val.download(r.values.data(), n * 4);
  sm.download(r.softmax.data(), n * 4);
  return r;
}

}  // namespace dsa_gpu_test
