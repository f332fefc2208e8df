#pragma once
// The top-k operation: for every query row, the k best keys of the indexer's scores without the
// (S_q, S_k) score matrix.
//
//   selected(row) = the k largest visible scores of the row, ranked by (score descending, key
//                   index ascending): a tie at the k-th place goes to the smaller index, so the
//                   set is unique. A score is bitwise the value indexer_forward returns for
//                   that cell (same inputs, same options).
//
// Outputs, per query row (BSHD (B, S_q, k), THD (T_q, k), contiguous in the last dimension):
//  - indices int32: the selected keys, ascending (default) or by (score desc, index asc); rows
//    with fewer than k visible keys are padded with -1 at the end.
//  - values fp32 (optional): the selected scores in the order of `indices`; -inf in padding.
//  - softmax fp32 (optional): exp(v - max) / sum over the selected values of the row; 0 in
//    padding and in rows with no selected key.
//  - lse fp32 (optional, IndexerOptions::lse): log sum_{visible j} exp(score) over the WHOLE row,
//    -inf for a row with no visible key.
// NaN scores (only from non-finite inputs) rank above +inf and equal to each other; +0.0 ranks
// above -0.0 (the order of their bit patterns). A visible -inf score is a visible key: it is
// selected before padding.
//
// Memory: the outputs, plus a workspace of indexer_topk_workspace_size() bytes that never grows
// with S_q x S_k (scores of a bounded block of rows at a time). The caller may pass it
// (TopkOptions::workspace, e.g. for CUDA-graph capture with buffers it owns); when absent the call
// takes it from the driver's stream-ordered pool (cuMemAllocAsync / cuMemFreeAsync on `stream`),
// which is also capturable. No host synchronization beyond indexer_forward's (THD without host
// cu_seqlens mirrors reads them once).
#include <cstddef>
#include <cstdint>

#include "dsa_indexer/indexer.hpp"

namespace dsa_indexer {

inline constexpr int32_t kTopkMaxK = 2048;

// Which index a selected key is reported as. `local`: the key's index inside its batch entry /
// THD segment. `global`: BSHD b * S_k + local (the flat key row of k viewed as (B * S_k, D)); THD
// the absolute packed key row (cuDNN-frontend's topk_indices_global).
enum class TopkIndices : int32_t { local = 0, global = 1 };

struct TopkOptions {
  int32_t k = 2048;                  // 1 <= k <= kTopkMaxK; k larger than a row pads it
  bool sort_by_score = false;        // false: indices ascending within a row
  TopkIndices indices = TopkIndices::local;
  TensorDesc values;                 // optional fp32, the shape of `indices`
  TensorDesc softmax;                // optional fp32, the shape of `indices`
  // Optional device workspace of at least indexer_topk_workspace_size() bytes, 256-byte aligned,
  // not overlapping any operand; its content on entry does not matter and on return is undefined.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Runs the top-k on `stream`. `options` is the score operation's (ratio, sm_scale, offsets, THD
// metadata, lse, family: automatic or a top-k family); thd_columns must stay local (the index
// convention is TopkOptions::indices) and explicit ks/ke windows are not supported (an
// UnsupportedConfig). Validation happens before anything is compiled or launched; on any error
// nothing is launched and the outputs are untouched.
// Throws InvalidArgument, UnsupportedConfig, CompileError, DriverError.
DSA_INDEXER_API void indexer_topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w,
                                  const TensorDesc& indices, const IndexerOptions& options,
                                  const TopkOptions& topk, CUstream stream);

// The workspace the same call needs, in bytes (validates the call the same way; reads THD host
// cu_seqlens like the call does, launches nothing). A pure function of the shapes, k and the
// device: a caller allocates it once per shape.
DSA_INDEXER_API std::size_t indexer_topk_workspace_size(const TensorDesc& q, const TensorDesc& k,
                                                        const TensorDesc& w, const TensorDesc& indices,
                                                        const IndexerOptions& options, const TopkOptions& topk);

}  // namespace dsa_indexer
