#include "dsa_indexer/c_api.h"

#include <cstddef>
#include <cstring>
#include <string>

#include "dsa_indexer/indexer.hpp"
#include "dsa_indexer/topk.hpp"

namespace {

thread_local std::string g_last_error;

dsa_indexer::TensorDesc to_desc(const dsa_tensor& t) {
  dsa_indexer::TensorDesc d;
  d.data = t.data;
  d.dtype = static_cast<dsa_indexer::DType>(t.dtype);
  d.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    d.shape[i] = t.shape[i];
    d.strides[i] = t.strides[i];
  }
  d.device = t.device;
  return d;
}

template <class F>
dsa_status guarded(F f) {
  g_last_error.clear();
  try {
    f();
    return DSA_STATUS_OK;
  } catch (const dsa_indexer::InvalidArgument& e) {
    g_last_error = e.what();
    return DSA_STATUS_INVALID_ARGUMENT;
  } catch (const dsa_indexer::UnsupportedConfig& e) {
    g_last_error = e.what();
    return DSA_STATUS_UNSUPPORTED_CONFIG;
  } catch (const dsa_indexer::CompileError& e) {
    g_last_error = e.what();
    return DSA_STATUS_COMPILE_ERROR;
  } catch (const dsa_indexer::DriverError& e) {
    g_last_error = e.what();
    return DSA_STATUS_DRIVER_ERROR;
  } catch (const dsa_indexer::CacheError& e) {
    g_last_error = e.what();
    return DSA_STATUS_CACHE_ERROR;
  } catch (const std::exception& e) {
    g_last_error = std::string("internal error: ") + e.what();
    return DSA_STATUS_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "internal error: unknown exception";
    return DSA_STATUS_INTERNAL_ERROR;
  }
}

// The C++ options of a call's dsa_options, after the checks every entry point makes.
dsa_indexer::IndexerOptions to_options(const dsa_options* options, const char* where) {
  using dsa_indexer::InvalidArgument;
  if (!options) throw InvalidArgument(std::string(where) + ": options: expected a dsa_options (see dsa_options_init), got NULL");
  // The struct only grows: 0.1.0's first header ended before q_scale (its callers get no
  // scales), the FP8 one before window_columns (key columns).
  constexpr std::size_t kV1Size = offsetof(dsa_options, q_scale), kV2Size = offsetof(dsa_options, window_columns);
  const bool v1 = options->struct_size == kV1Size, v2 = options->struct_size == kV2Size;
  if (options->struct_size != sizeof(dsa_options) && !v1 && !v2)
    throw InvalidArgument(std::string(where) + ": options.struct_size: expected " + std::to_string(sizeof(dsa_options)) +
                          " (call dsa_options_init; " + std::to_string(kV1Size) + " from 0.1.0's first header, " +
                          std::to_string(kV2Size) + " from its FP8 one), got " + std::to_string(options->struct_size));
  dsa_indexer::IndexerOptions o;
  o.ratio = options->ratio;
  o.sm_scale = options->sm_scale;
  o.q_causal_offsets = to_desc(options->q_causal_offsets);
  o.cu_seqlens_q = to_desc(options->cu_seqlens_q);
  o.cu_seqlens_k = to_desc(options->cu_seqlens_k);
  o.max_seqlen_q = options->max_seqlen_q;
  o.max_seqlen_k = options->max_seqlen_k;
  o.cu_seqlens_q_host = options->cu_seqlens_q_host;
  o.cu_seqlens_k_host = options->cu_seqlens_k_host;
  o.thd_columns = static_cast<dsa_indexer::ThdColumns>(options->thd_columns);
  o.ks = to_desc(options->ks);
  o.ke = to_desc(options->ke);
  o.lse = to_desc(options->lse);
  o.family = static_cast<dsa_indexer::KernelFamily>(options->family);
  if (!v1) {
    o.q_scale = to_desc(options->q_scale);
    o.k_scale = to_desc(options->k_scale);
  }
  if (!v1 && !v2) o.window_columns = static_cast<dsa_indexer::WindowColumns>(options->window_columns);
  return o;
}

// The C++ top-k options of a dsa_topk_options. The index convention is passed through as it is:
// the library's validation names an out-of-range value.
dsa_indexer::TopkOptions to_topk(const dsa_topk_options* topk, const char* where) {
  using dsa_indexer::InvalidArgument;
  if (!topk) throw InvalidArgument(std::string(where) + ": topk: expected a dsa_topk_options (see dsa_topk_options_init), got NULL");
  if (topk->struct_size != sizeof(dsa_topk_options))
    throw InvalidArgument(std::string(where) + ": topk.struct_size: expected " + std::to_string(sizeof(dsa_topk_options)) +
                          " (call dsa_topk_options_init), got " + std::to_string(topk->struct_size));
  dsa_indexer::TopkOptions t;
  t.k = topk->k;
  t.sort_by_score = topk->sort_by_score != 0;
  t.indices = static_cast<dsa_indexer::TopkIndices>(topk->indices);
  t.values = to_desc(topk->values);
  t.softmax = to_desc(topk->softmax);
  t.workspace = topk->workspace;
  t.workspace_bytes = topk->workspace_bytes;
  return t;
}

void require_operands(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w, const dsa_tensor* out,
                      const char* where, const char* out_name) {
  if (!q || !k || !w || !out)
    throw dsa_indexer::InvalidArgument(std::string(where) + ": q, k, w, " + out_name +
                                       ": expected non-null descriptors, got NULL");
}

static_assert(DSA_TOPK_MAX_K == dsa_indexer::kTopkMaxK, "c_api.h's DSA_TOPK_MAX_K is topk.hpp's kTopkMaxK");
static_assert(DSA_TOPK_INDICES_GLOBAL == static_cast<int>(dsa_indexer::TopkIndices::global), "index conventions");

static_assert(sizeof(dsa_cache_stats) == DSA_CACHE_STATS_V2_SIZE, "dsa_cache_stats grew: add a version and its size");
static_assert(offsetof(dsa_cache_stats, background_compiles) == DSA_CACHE_STATS_V1_SIZE, "version 2 fields follow version 1's");

// Writes the fields that lie wholly inside the caller's first `size` bytes, through a full copy
// on our side, and zeroes what lies past the fields this library knows.
void fill_stats(dsa_cache_stats* out, std::size_t size) {
  const auto s = dsa_indexer::kernel_cache_stats();
  dsa_cache_stats full;
  full.hits = s.hits;
  full.misses = s.misses;
  full.evictions = s.evictions;
  full.compiles = s.compiles;
  full.disk_hits = s.disk_hits;
  full.entries = s.entries;
  full.capacity = s.capacity;
  full.background_compiles = s.background_compiles;
  full.async_fallbacks = s.async_fallbacks;
  full.background_failures = s.background_failures;
  full.queue_rejections = s.queue_rejections;
  full.recorded_keys = s.recorded_keys;
  const std::size_t known = size < sizeof full ? size / sizeof(uint64_t) * sizeof(uint64_t) : sizeof full;
  std::memcpy(out, &full, known);
  if (size > sizeof full) std::memset(reinterpret_cast<unsigned char*>(out) + sizeof full, 0, size - sizeof full);
}

}  // namespace

extern "C" {

void dsa_options_init(dsa_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof(dsa_options);
  o->ratio = 1;
  o->sm_scale = 1.0f;
  o->max_seqlen_q = -1;
  o->max_seqlen_k = -1;
  o->thd_columns = DSA_THD_LOCAL;
  o->family = DSA_FAMILY_AUTO;
}

void dsa_topk_options_init(dsa_topk_options* t) {
  if (!t) return;
  std::memset(t, 0, sizeof *t);
  const dsa_indexer::TopkOptions defaults;
  t->struct_size = sizeof(dsa_topk_options);
  t->k = defaults.k;
  t->sort_by_score = defaults.sort_by_score ? 1 : 0;
  t->indices = static_cast<int32_t>(defaults.indices);
}

dsa_status dsa_indexer_forward(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w, const dsa_tensor* scores,
                               const dsa_options* options, void* stream) {
  return guarded([&] {
    require_operands(q, k, w, scores, "dsa_indexer_forward", "scores");
    const dsa_indexer::IndexerOptions o = to_options(options, "dsa_indexer_forward");
    dsa_indexer::indexer_forward(to_desc(*q), to_desc(*k), to_desc(*w), to_desc(*scores), o, static_cast<CUstream>(stream));
  });
}

dsa_status dsa_indexer_topk(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w, const dsa_tensor* indices,
                            const dsa_options* options, const dsa_topk_options* topk, void* stream) {
  return guarded([&] {
    require_operands(q, k, w, indices, "dsa_indexer_topk", "indices");
    const dsa_indexer::IndexerOptions o = to_options(options, "dsa_indexer_topk");
    const dsa_indexer::TopkOptions t = to_topk(topk, "dsa_indexer_topk");
    dsa_indexer::indexer_topk(to_desc(*q), to_desc(*k), to_desc(*w), to_desc(*indices), o, t, static_cast<CUstream>(stream));
  });
}

dsa_status dsa_indexer_topk_workspace_size(const dsa_tensor* q, const dsa_tensor* k, const dsa_tensor* w,
                                           const dsa_tensor* indices, const dsa_options* options,
                                           const dsa_topk_options* topk, size_t* out) {
  return guarded([&] {
    require_operands(q, k, w, indices, "dsa_indexer_topk_workspace_size", "indices");
    if (!out) throw dsa_indexer::InvalidArgument("dsa_indexer_topk_workspace_size: out: expected non-null, got NULL");
    const dsa_indexer::IndexerOptions o = to_options(options, "dsa_indexer_topk_workspace_size");
    const dsa_indexer::TopkOptions t = to_topk(topk, "dsa_indexer_topk_workspace_size");
    *out = dsa_indexer::indexer_topk_workspace_size(to_desc(*q), to_desc(*k), to_desc(*w), to_desc(*indices), o, t);
  });
}

const char* dsa_last_error(void) { return g_last_error.c_str(); }

const char* dsa_status_name(dsa_status s) {
  switch (s) {
    case DSA_STATUS_OK: return "DSA_STATUS_OK";
    case DSA_STATUS_INVALID_ARGUMENT: return "DSA_STATUS_INVALID_ARGUMENT";
    case DSA_STATUS_UNSUPPORTED_CONFIG: return "DSA_STATUS_UNSUPPORTED_CONFIG";
    case DSA_STATUS_COMPILE_ERROR: return "DSA_STATUS_COMPILE_ERROR";
    case DSA_STATUS_DRIVER_ERROR: return "DSA_STATUS_DRIVER_ERROR";
    case DSA_STATUS_CACHE_ERROR: return "DSA_STATUS_CACHE_ERROR";
    case DSA_STATUS_INTERNAL_ERROR: return "DSA_STATUS_INTERNAL_ERROR";
  }
  return "DSA_STATUS_UNKNOWN";
}

dsa_status dsa_kernel_cache_stats(dsa_cache_stats* out) {
  return guarded([&] {
    if (!out) throw dsa_indexer::InvalidArgument("dsa_kernel_cache_stats: out: expected non-null, got NULL");
    fill_stats(out, DSA_CACHE_STATS_V1_SIZE);
  });
}

dsa_status dsa_kernel_cache_stats_ex(dsa_cache_stats* out, size_t struct_size) {
  return guarded([&] {
    if (!out) throw dsa_indexer::InvalidArgument("dsa_kernel_cache_stats_ex: out: expected non-null, got NULL");
    if (struct_size < DSA_CACHE_STATS_V1_SIZE)
      throw dsa_indexer::InvalidArgument("dsa_kernel_cache_stats_ex: struct_size: expected at least " +
                                         std::to_string(DSA_CACHE_STATS_V1_SIZE) + " (sizeof(dsa_cache_stats)), got " +
                                         std::to_string(struct_size));
    fill_stats(out, struct_size);
  });
}

const char* dsa_version(void) { return dsa_indexer::version(); }

int32_t dsa_kernel_family_count(void) { return static_cast<int32_t>(dsa_indexer::kernel_family_count()); }

dsa_status dsa_kernel_family_info(int32_t index, const char** name, int32_t* id, const char** operation) {
  return guarded([&] {
    if (!name || !id || !operation)
      throw dsa_indexer::InvalidArgument("dsa_kernel_family_info: name, id, operation: expected non-null, got NULL");
    const dsa_indexer::KernelFamilyInfo info = dsa_indexer::kernel_family_info(index);
    *name = info.name;
    *id = static_cast<int32_t>(info.id);
    *operation = info.operation;
  });
}

}  // extern "C"
