#ifndef DSA_INDEXER_C_API_H
#define DSA_INDEXER_C_API_H
/* C API for FFI users (ctypes, Rust, Julia): the C++ API with status codes instead of
 * exceptions. The message of the last failure on the calling thread is kept until that
 * thread's next call. */
#include <stddef.h>
#include <stdint.h>

#include "dsa_indexer/export.hpp"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsa_status {
  DSA_STATUS_OK = 0,
  DSA_STATUS_INVALID_ARGUMENT = 1,
  DSA_STATUS_UNSUPPORTED_CONFIG = 2,
  DSA_STATUS_COMPILE_ERROR = 3,
  DSA_STATUS_DRIVER_ERROR = 4,
  DSA_STATUS_CACHE_ERROR = 5,
  DSA_STATUS_INTERNAL_ERROR = 6
} dsa_status;

/* dtype codes: same values as dsa_indexer::DType */
enum { DSA_BF16 = 0, DSA_F16 = 1, DSA_F32 = 2, DSA_I32 = 3, DSA_I64 = 4, DSA_F64 = 5, DSA_E4M3 = 6, DSA_E5M2 = 7 };
enum { DSA_THD_LOCAL = 0, DSA_THD_GLOBAL = 1 };
enum {
  DSA_FAMILY_AUTO = 0,
  DSA_FAMILY_GENERIC = 1,
  DSA_FAMILY_REFERENCE = 2,
  DSA_FAMILY_LEAN = 3,
  DSA_FAMILY_TOPK_UNFUSED = 4,
  DSA_FAMILY_TOPK_FUSED = 5
};

/* rank 0 and data NULL: "not given". shape/strides in elements, outermost first. */
typedef struct dsa_tensor {
  void* data;
  int32_t dtype;
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4];
  int32_t device;
} dsa_tensor;

typedef struct dsa_options {
  uint32_t struct_size; /* sizeof(dsa_options), set by dsa_options_init */
  int64_t ratio;
  float sm_scale;
  dsa_tensor q_causal_offsets;
  dsa_tensor cu_seqlens_q;
  dsa_tensor cu_seqlens_k;
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;
  const int32_t* cu_seqlens_q_host;
  const int32_t* cu_seqlens_k_host;
  int32_t thd_columns;
  dsa_tensor ks;
  dsa_tensor ke;
  dsa_tensor lse;
  int32_t family;
  /* Appended for FP8 inputs (e4m3 q and k): optional fp32 per-row scales, as the C++
   * IndexerOptions::q_scale / k_scale. A caller built against the older, smaller struct (its
   * struct_size ends before q_scale) gets them as not given. */
  dsa_tensor q_scale;
  dsa_tensor k_scale;
  /* Appended after the scales: DSA_WINDOW_COLUMNS_KEY (column j is key j) or DSA_WINDOW_COLUMNS_START
   * (with ks / ke, BSHD: column c of row (b, i) is key ks[b, i] + c; scores (B, S_q, N) for any
   * N >= 1: DeepGEMM's compressed logits), as the C++ IndexerOptions::window_columns. A caller
   * built against the header from before it (the struct ending at k_scale) gets
   * DSA_WINDOW_COLUMNS_KEY. */
  int32_t window_columns;
} dsa_options;
enum { DSA_WINDOW_COLUMNS_KEY = 0, DSA_WINDOW_COLUMNS_START = 1 };

/* The top-k operation (dsa_indexer/topk.hpp): per query row, the k best keys of the scores
 * dsa_indexer_forward would compute, without the score matrix. */
#define DSA_TOPK_MAX_K 2048
enum { DSA_TOPK_INDICES_LOCAL = 0, DSA_TOPK_INDICES_GLOBAL = 1 };

typedef struct dsa_topk_options {
  uint32_t struct_size;   /* sizeof(dsa_topk_options), set by dsa_topk_options_init */
  int32_t k;              /* 1 <= k <= DSA_TOPK_MAX_K; rows with fewer visible keys are padded */
  int32_t sort_by_score;  /* 0: indices ascending within a row; else by (score desc, index asc) */
  int32_t indices;        /* DSA_TOPK_INDICES_LOCAL (key index in its batch entry / THD segment)
                           * or DSA_TOPK_INDICES_GLOBAL (BSHD b * S_k + local; THD packed key row) */
  dsa_tensor values;      /* optional fp32, the shape of indices: the selected scores (-inf padding) */
  dsa_tensor softmax;     /* optional fp32, the shape of indices: softmax over the selected scores (0 padding) */
  void* workspace;        /* optional device workspace (256-byte aligned) of workspace_bytes bytes, at
                           * least dsa_indexer_topk_workspace_size; NULL: the call takes it from the
                           * driver's stream-ordered pool */
  size_t workspace_bytes;
} dsa_topk_options;

/* Counters of the kernel cache, the background compile worker and the shape recording (the
 * C++ CacheStats). The struct only grows, by fields appended at its end; version 1 was its first
 * seven fields (DSA_CACHE_STATS_V1_SIZE bytes). dsa_kernel_cache_stats fills those seven only, so
 * that a caller built against version 1 (a smaller struct) is never written past;
 * dsa_kernel_cache_stats_ex takes the caller's sizeof and fills every field that fits. */
typedef struct dsa_cache_stats {
  uint64_t hits, misses, evictions, compiles, disk_hits, entries, capacity;
  /* version 2 (DSA_CACHE_STATS_V2_SIZE): DSA_INDEXER_LEAN_COMPILE=async and DSA_INDEXER_RECORD_MANIFEST */
  uint64_t background_compiles, async_fallbacks, background_failures, queue_rejections, recorded_keys;
} dsa_cache_stats;
#define DSA_CACHE_STATS_V1_SIZE 56
#define DSA_CACHE_STATS_V2_SIZE 96

/* Fills defaults: ratio 1, sm_scale 1, nothing optional given, THD local columns, auto family. */
DSA_INDEXER_API void dsa_options_init(dsa_options* options);

/* stream: a CUstream (NULL = legacy default stream). */
DSA_INDEXER_API dsa_status dsa_indexer_forward(const dsa_tensor* q, const dsa_tensor* k,
                                               const dsa_tensor* w, const dsa_tensor* scores,
                                               const dsa_options* options, void* stream);

/* Fills defaults: k 2048, indices ascending, local indices, no values / softmax, no workspace. */
DSA_INDEXER_API void dsa_topk_options_init(dsa_topk_options* topk);

/* indices: int32 (B, S_q, k) or THD (T_q, k), contiguous. options: the score operation's
 * (ratio, sm_scale, offsets, THD metadata, lse of the whole row, family: auto or a "topk"
 * family); thd_columns must stay local and ks / ke are not supported. Both option structs are
 * required. On any error nothing is launched and the outputs are untouched. */
DSA_INDEXER_API dsa_status dsa_indexer_topk(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w,
                                            const dsa_tensor* indices, const dsa_options* options,
                                            const dsa_topk_options* topk, void* stream);
/* The workspace bytes the same call needs (*out), validating it the same way; launches nothing.
 * THD without host cu_seqlens mirrors reads the device arrays once (on the legacy stream). */
DSA_INDEXER_API dsa_status dsa_indexer_topk_workspace_size(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w,
                                                           const dsa_tensor* indices, const dsa_options* options,
                                                           const dsa_topk_options* topk, size_t* out);

/* The last failure's message on this thread ("" if the last call succeeded). */
DSA_INDEXER_API const char* dsa_last_error(void);
DSA_INDEXER_API const char* dsa_status_name(dsa_status s);
DSA_INDEXER_API dsa_status dsa_kernel_cache_stats(dsa_cache_stats* out);
/* struct_size: sizeof the caller's dsa_cache_stats, at least DSA_CACHE_STATS_V1_SIZE. Fills
 * every field that lies wholly inside it and zeroes any bytes past the fields this library
 * knows (a caller built against a newer header then reads 0 for counters it does not have). */
DSA_INDEXER_API dsa_status dsa_kernel_cache_stats_ex(dsa_cache_stats* out, size_t struct_size);
DSA_INDEXER_API const char* dsa_version(void);

/* The kernel families, from the library's one registry (index 0 .. count - 1): name (what
 * `family=` takes in Python and the CLI), id (a DSA_FAMILY_* value) and operation ("scores",
 * "topk"); the strings are static. DSA_STATUS_INVALID_ARGUMENT for an index out of range or a
 * NULL out-pointer. */
DSA_INDEXER_API int32_t dsa_kernel_family_count(void);
DSA_INDEXER_API dsa_status dsa_kernel_family_info(int32_t index, const char** name, int32_t* id,
                                                  const char** operation);

#ifdef __cplusplus
}
#endif
#endif
