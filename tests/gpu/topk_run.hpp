#pragma once
// One indexer_topk call on the GPU with poisoned outputs (and, when asked for, a poisoned
// caller-owned workspace: the fused path must not read what it did not write): indices, values,
// softmax and, when asked for, lse back on the host. BSHD outputs are (B, S_q, k), THD (T_q, k).
#include <vector>

#include "dsa_indexer/topk.hpp"
#include "gpu_cases.hpp"
#include "gpu_runner.hpp"

namespace dsa_gpu_test {

struct TopkRunOptions {
  KernelFamily family = KernelFamily::automatic;
  bool sorted = false;     // slots by score (else by index)
  bool global = false;     // global indices (TopkIndices::global)
  bool workspace = true;   // a caller-owned, poisoned workspace (else the library's pool)
  bool lse = false;        // also the lse output (the fused path serves calls without one)
  bool softmax = true;     // the softmax output (its buffer stays poisoned without)
};

struct TopkOut {
  std::vector<int32_t> indices;
  std::vector<float> values, softmax, lse;  // lse: empty unless asked for
};

inline TopkOut run_topk(const HostProblem& p, dsa_support::DeviceProblem& dp, int k, const TopkRunOptions& ro) {
  namespace ds = dsa_support;
  using dsa_indexer::DType;
  using dsa_indexer::TensorDesc;
  const int64_t rows = p.rows();
  const size_t n = static_cast<size_t>(rows * k);
  ds::DeviceBuffer ind(n * 4 + 4), val(n * 4 + 4), sm(n * 4 + 4), lse(static_cast<size_t>(rows) * 4 + 4);
  ind.fill_u32(ds::kPoison);
  val.fill_u32(ds::kPoison);
  sm.fill_u32(ds::kPoison);
  lse.fill_u32(ds::kPoison);
  auto shaped = [&](void* ptr, DType dt) {
    return p.thd() ? TensorDesc::contiguous(ptr, dt, {rows, k}) : TensorDesc::contiguous(ptr, dt, {p.batch, p.s_q, k});
  };
  dsa_indexer::TopkOptions t;
  t.k = k;
  t.sort_by_score = ro.sorted;
  t.indices = ro.global ? dsa_indexer::TopkIndices::global : dsa_indexer::TopkIndices::local;
  t.values = shaped(val.get(), DType::f32);
  if (ro.softmax) t.softmax = shaped(sm.get(), DType::f32);
  dsa_indexer::IndexerOptions o = dp.opt;
  o.family = ro.family;
  o.thd_columns = dsa_indexer::ThdColumns::local;
  if (ro.lse)
    o.lse = p.thd() ? TensorDesc::contiguous(lse.get(), DType::f32, {rows}) : TensorDesc::contiguous(lse.get(), DType::f32, {p.batch, p.s_q});
  const TensorDesc ti = shaped(ind.get(), DType::i32);
  ds::DeviceBuffer ws;
  if (ro.workspace) {
    const size_t bytes = dsa_indexer::indexer_topk_workspace_size(dp.tq, dp.tk, dp.tw, ti, o, t);
    REQUIRE(bytes > 0);
    ws = ds::DeviceBuffer(bytes);
    ws.fill_u32(ds::kPoison);
    t.workspace = ws.get();
    t.workspace_bytes = bytes;
  }
  dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, ti, o, t, nullptr);
  ds::sync_device();
  TopkOut r;
  r.indices.resize(n);
  r.values.resize(n);
  r.softmax.resize(n);
  ind.download(r.indices.data(), n * 4);
  val.download(r.values.data(), n * 4);
  sm.download(r.softmax.data(), n * 4);
  if (ro.lse) {
    r.lse.resize(static_cast<size_t>(rows));
    lse.download(r.lse.data(), r.lse.size() * 4);
  }
  return r;
}

}  // namespace dsa_gpu_test
