#pragma once
// A validated call, normalized: what the planner, the launcher and the tests work from.
#include <cstdint>
#include <vector>

#include "core/operation.hpp"
#include "dsa_indexer/indexer.hpp"

namespace dsa_indexer::detail {

enum class Layout : int32_t { bshd = 0, thd_local = 1, thd_global = 2 };
const char* layout_name(Layout l);

// The top-k operation's outputs and choices (include/dsa_indexer/topk.hpp); the Problem's `lse`
// is the row's log-sum-exp for both operations.
struct TopkOutputs {
  int32_t k = 0;
  bool sort_by_score = false;
  bool global_indices = false;
  void* indices = nullptr;           // int32 rows x k, row-major, contiguous
  void* values = nullptr;            // fp32, same layout (optional)
  void* softmax = nullptr;           // fp32, same layout (optional)
  void* workspace = nullptr;         // the caller's, or nullptr (the call allocates it)
  uint64_t workspace_bytes = 0;
};

// The fused top-k path's score sweep (Operation::topk_sweep): each row's candidates, as
// composites (score key << 32 | ~column), into a bounded buffer per row.
struct TopkSweepOutputs {
  void* cand = nullptr;    // u64 rows x ld
  void* count = nullptr;   // int32 rows
  void* fail = nullptr;    // uint8 rows: the sampled launch's failed rows, which its redo reads
  int64_t ld = 0;          // entries per row
  int32_t k = 0;
  int32_t refresh = 0;     // appends between threshold refreshes
  int32_t mode = 0;        // dsa::kLeanTopkExact, kLeanTopkSampled or kLeanTopkRedo
  float margin = 0.0f;     // sampled: the cut's margin (standard deviations)
  bool part = false;       // sampled: warp-private partitions past the sample (the sweep's kTopkPart)
  bool has_lse = false;    // the call has an lse output (the sweep's kTopkLse)
  float* lse = nullptr;    // it, at the block's first row (null when planning)
  int64_t lse_stride = 0;  // between rows
  int32_t sample_stride = 0;  // the sampled order's stride: the call's (lean_topk_sample_stride of
                              // its S_k, THD max_seqlen_k), which a THD variant cannot derive
  // redo launches of a block with the split redo (dsa::LeanTopkArgs' fields of the same names)
  int32_t* slot_of = nullptr;
  int32_t* tile_of = nullptr;  // the split launch by slots (topk_fused_redo_slot_items), else null
  int32_t slots = 0;
  uint64_t* part_cand = nullptr;
  int32_t* part_count = nullptr;
  int64_t part_ld = 0;
  int32_t parts = 1;
  int32_t chunk = 0;
  void* pool_rows = nullptr;   // the redo pool (topk_fused_redo_pool): dsa::LeanTopkPoolRow [rows], else null
  bool pool = false;           // the redo pool (its kernel; planning has no pool_rows)
};

struct Problem {
  Operation op = Operation::scores;
  Layout layout = Layout::bshd;
  int64_t batch = 0;      // B (BSHD) or n_seg (THD)
  int64_t rows = 0;       // output rows: B * S_q (BSHD) or T_q (THD)
  int64_t s_q = 0;        // BSHD S_q; THD max_seqlen_q
  int64_t s_k = 0;        // BSHD S_k; THD max_seqlen_k
  int64_t t_q = 0;        // THD packed rows (BSHD: S_q)
  int64_t t_k = 0;        // THD packed key rows (BSHD: S_k)
  int64_t out_cols = 0;   // S_k | max_seqlen_k | T_k | window_start: scores' N
  int32_t heads = 0;
  int32_t head_dim = 0;
  DType qk_dtype = DType::bf16;   // the input precision of q and k (a family gates on it)
  DType w_dtype = DType::bf16;
  int64_t ratio = 1;
  float sm_scale = 1.0f;
  bool has_offsets = false;
  bool has_windows = false;
  bool window_start = false;  // explicit windows, column c = key ks + c (WindowColumns::window_start)
  bool has_lse = false;
  bool has_q_scale = false;  // FP8: q_scale given (else 1)
  bool has_k_scale = false;  // FP8: k_scale given (else 1)
  int32_t device = 0;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* w = nullptr;
  void* out = nullptr;
  void* lse = nullptr;
  const void* offsets = nullptr;
  const void* cu_q = nullptr;
  const void* cu_k = nullptr;
  const void* ks = nullptr;
  const void* ke = nullptr;
  const void* q_scale = nullptr;      // fp32
  const void* k_scale = nullptr;      // fp32
  // The scores operation's plan workspace (Plan::workspace_bytes: lean split's lse partial sums),
  // set by launch_forward from the stream-ordered pool for the launch.
  void* workspace = nullptr;

  // Strides in elements. Dimensions of extent 1 carry the nested (contiguous) stride so that
  // TMA descriptors built from them satisfy the driver's nesting rule.
  int64_t q_stride[3] = {0, 0, 0};    // batch, token, head (THD: batch stride 0)
  int64_t k_stride[2] = {0, 0};       // batch, token
  int64_t w_stride[3] = {0, 0, 0};    // batch, token, head
  int64_t out_stride[2] = {0, 0};     // batch, row
  int64_t lse_stride[2] = {0, 0};     // batch, row
  int64_t win_stride[2] = {0, 0};     // batch, row (ks and ke share strides)
  int64_t offsets_stride = 1;
  int64_t q_scale_stride[3] = {0, 0, 0};  // batch, token, head (THD: batch stride 0)
  int64_t k_scale_stride[2] = {0, 0};     // batch, token

  TopkOutputs topk;                   // Operation::topk only
  TopkSweepOutputs sweep;             // Operation::topk_sweep only
  const Problem* call = nullptr;      // Operation::topk_sweep: the top-k call whose block it is
  dsa_indexer::KernelFamily call_family = dsa_indexer::KernelFamily::automatic;  // and the family serving that call

  std::vector<int32_t> cu_q_host;     // THD: the validated cu_seqlens
  std::vector<int32_t> cu_k_host;

  bool is_thd() const { return layout != Layout::bshd; }
  // Number of (row, column) pairs inside the windows: 2*H*D*visible_pairs() is useful FLOPs.
  int64_t visible_pairs() const;
  // Host-side window of one output row in its column space [lo, hi); offsets_host is
  // q_causal_offsets as host values (empty = zeros). Used by tests and by FLOP counting.
  static int64_t causal_limit(int64_t offset, int64_t i, int64_t ratio, int64_t s_k_b);
};

}  // namespace dsa_indexer::detail
