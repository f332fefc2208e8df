#pragma once
// DeepSeek Sparse Attention lightning-indexer forward on Hopper (sm_90a).
//
//   scores[b,i,j] = sm_scale * sum_h relu(q[b,i,h,:] . k[b,j,:]) * w[b,i,h]   if j is visible
//                 = -inf                                                       otherwise
//   visible: ks(b,i) <= j < ke(b,i), ke = clamp(floor((offset[b] + i + 1) / ratio), 0, S_k_b)
//
// Every cell of `scores` (and of `lse`) is written; masked cells hold the bit pattern of -inf.
// The same inputs give bitwise-identical outputs run to run, and bf16 W gives the same bits as
// fp32 W holding the same values. The library allocates no device memory per call.
#include <cstdint>

#include "dsa_indexer/errors.hpp"
#include "dsa_indexer/export.hpp"
#include "dsa_indexer/tensor.hpp"

// The driver API's stream handle, declared exactly as cuda.h does so that callers need not
// include cuda.h; 0 is the legacy default stream of the device's primary context.
typedef struct CUstream_st* CUstream;

namespace dsa_indexer {

// THD output columns: `local` -> (T_q, max_seqlen_k), column = key index inside the segment;
// `global` -> (T_q, T_k), column = packed key row, finite only inside the row's own segment.
enum class ThdColumns : int32_t { local = 0, global = 1 };

// Output columns of explicit windows (IndexerOptions::ks / ke): `key` -> column j is key j (the
// layouts above); `window_start` -> column c of row (b, i) is key ks(b,i) + c: DeepGEMM's
// compressed logits, scores (B, S_q, N) for any N >= 1 (BSHD only), a window longer than N keeping
// its first N keys, every cell past a row's window -inf.
enum class WindowColumns : int32_t { key = 0, window_start = 1 };

// Which kernel family serves the call. `automatic` picks the fastest family whose gate the
// call passes (lean, else generic); naming a family forces it and raises UnsupportedConfig
// naming the failed gate when it cannot serve the call. `generic` serves the whole contract;
// `lean` is the per-shape fast path (H 64, contiguous 16-byte-aligned operands, no explicit
// windows, DSA_INDEXER_DISABLE_LEAN unset, LSE bitwise generic's except its split variant's
// (within 2e-7 x max(1, |lse|), bitwise run to run); BSHD: S_q a multiple of 8
// and q-tiles x B >= the device's SMs, compiled per (S_q, S_k); THD: ceil(T_q / 8) >= the
// device's SMs, compiled once whatever T_q, T_k and the segment boundaries; it
// also serves BSHD H 32 and 16 (q-tiles of 16 and 32 tokens) and BSHD calls with fewer q-tiles
// x B than SMs (its split variant; with LSE it takes B x S_q x chunks x 8 bytes from the
// driver's stream-ordered pool on `stream` for the call, capturable into a CUDA graph));
// `reference` is the plain-CUDA oracle (slow, for tests). Those serve indexer_forward;
// `topk_unfused` serves indexer_topk (dsa_indexer/topk.hpp). A family of another operation is
// refused with UnsupportedConfig.
enum class KernelFamily : int32_t {
  automatic = 0,
  generic = 1,
  reference = 2,
  lean = 3,
  topk_unfused = 4,
  topk_fused = 5,
  topk_fused_sweep = 6,  // internal: the fused top-k's score sweep (no public operation of its own)
};

struct IndexerOptions {
  int64_t ratio = 1;       // KV compression ratio, >= 1
  float sm_scale = 1.0f;   // finite; applied after the head sum

  // int32 (B,) for BSHD or (n_seg,) for THD: global uncompressed token index of each batch's /
  // segment's local q[0]. Not given: all zero. Read on the device in int64 arithmetic.
  TensorDesc q_causal_offsets;

  // THD (packed varlen) layout: both int32 (n_seg + 1,), starting at 0, non-decreasing, ending
  // at T_q / T_k; both max_seqlen values are required and must cover every segment.
  TensorDesc cu_seqlens_q;
  TensorDesc cu_seqlens_k;
  int64_t max_seqlen_q = -1;
  int64_t max_seqlen_k = -1;
  // Optional host copies of the two cu_seqlens arrays (n_seg + 1 values each). When given they
  // are trusted to equal the device arrays and the call does not synchronize; when absent the
  // library copies the device arrays to the host on `stream` (a synchronizing read) to check
  // them before launching anything.
  const int32_t* cu_seqlens_q_host = nullptr;
  const int32_t* cu_seqlens_k_host = nullptr;
  ThdColumns thd_columns = ThdColumns::local;

  // Explicit windows (context-parallel layouts, as DeepGEMM's mqa_logits): int32 per query row,
  // (B, S_q) or (T_q,), in the output's column space; they replace the ratio-causal window and
  // are intersected with the row's valid columns. Both or neither; exclusive with offsets.
  TensorDesc ks;
  TensorDesc ke;
  // Which key an output column holds (WindowColumns): `window_start` needs ks / ke and BSHD, and
  // takes the width N from scores (B, S_q, N); the generic and reference families serve it.
  WindowColumns window_columns = WindowColumns::key;

  // Optional fp32 (B, S_q) or (T_q,): lse = log sum_{visible j} exp(scores), -inf if empty.
  TensorDesc lse;

  // FP8 inputs (q and k both e4m3): optional fp32 per-row scales, q_scale (B, S_q, H) / THD
  // (T_q, H) and k_scale (B, S_k, 1) or (B, S_k) / THD (T_k, 1) or (T_k,); not given: 1. Then
  //   scores = sm_scale * sum_h w[h] * relu(q_scale[h] * k_scale[j] * (q8[h,:] . k8[j,:]))
  // with the fp8 products accumulated in fp32. The library computes it, in this fixed order, as
  //   sm_scale * (k_scale[j] * sum_h (w[h] * q_scale[h]) * relu(q8[h,:] . k8[j,:]))
  // which is equal when every scale is finite and > 0: the caller's duty (not checked on the
  // device: a scale <= 0 or not finite gives unspecified scores, never a fault). Given with bf16
  // q/k they are an InvalidArgument.
  TensorDesc q_scale;
  TensorDesc k_scale;

  KernelFamily family = KernelFamily::automatic;

  // Every operand's data pointer is checked with the driver (one cuPointerGetAttributes each:
  // device or managed memory of the descriptors' device), so that a host or foreign pointer is an
  // InvalidArgument instead of a fault inside the kernel. A caller whose tensors guarantee that
  // already may turn the check off, as the PyTorch operator does (CUDA tensors, whose device the
  // library checks against q's). The descriptors' other checks always run.
  bool check_pointers = true;
};

// Runs the forward on `stream`. Validation happens before anything is compiled or launched;
// on any error nothing is launched and `scores` / `lse` are left untouched.
// Throws InvalidArgument, UnsupportedConfig, CompileError, DriverError.
DSA_INDEXER_API void indexer_forward(const TensorDesc& q, const TensorDesc& k,
                                     const TensorDesc& w, const TensorDesc& scores,
                                     const IndexerOptions& options, CUstream stream);

// Counters of the in-memory kernel cache (all devices together), of the background compile worker
// and of the shape recording. A resident-check of async mode that finds the module is a hit; one
// that does not counts neither a hit nor a miss (it is an async fallback instead). The struct
// grew (the last five fields) after 0.1.0's first builds: C++ callers compile against the header
// of the library they load; C callers have dsa_cache_stats' versions (c_api.h).
struct CacheStats {
  uint64_t hits = 0;        // lookups served by a loaded module (including waits on an in-flight compile)
  uint64_t misses = 0;      // lookups that had to produce a module
  uint64_t evictions = 0;   // entries dropped by the LRU bound
  uint64_t compiles = 0;    // NVRTC compilations (misses not served by the disk cache)
  uint64_t disk_hits = 0;   // misses served by a verified disk-cache entry
  uint64_t entries = 0;     // entries resident now
  uint64_t capacity = 0;    // the LRU bound (DSA_INDEXER_CACHE_CAPACITY, default 256)
  // DSA_INDEXER_LEAN_COMPILE=async (zero in sync mode):
  uint64_t background_compiles = 0;  // fast-path variants the background worker produced (disk load or NVRTC, then module load)
  uint64_t async_fallbacks = 0;      // automatic calls that ran the fallback family because their fast-path variant was not loaded
  uint64_t background_failures = 0;  // background productions that failed (each key once; it then stays on the fallback)
  uint64_t queue_rejections = 0;     // offers refused because the worker's queue was full (a later call offers the key again)
  // DSA_INDEXER_RECORD_MANIFEST:
  uint64_t recorded_keys = 0;        // manifest lines this process appended (one per new variant)
};
DSA_INDEXER_API CacheStats kernel_cache_stats();

// The kernel families of this library, from its one registry: the names the CLI, manifests,
// Python and the PyTorch operator accept, and the operation each one implements.
struct KernelFamilyInfo {
  const char* name;       // "generic": what `family=` takes (static storage)
  KernelFamily id;
  const char* operation;  // "scores" or "topk"
};
DSA_INDEXER_API int kernel_family_count();
// index in [0, kernel_family_count()); throws InvalidArgument otherwise.
DSA_INDEXER_API KernelFamilyInfo kernel_family_info(int index);
// "auto" -> KernelFamily::automatic, else the registered family of that name; throws
// InvalidArgument naming `where`'s parameter `family` and listing the accepted names otherwise.
DSA_INDEXER_API KernelFamily kernel_family_by_name(const char* name, const char* where = "indexer_forward");

// Library version string, e.g. "0.1.0".
DSA_INDEXER_API const char* version();

}  // namespace dsa_indexer
