#pragma once
// What the PyTorch operators of python/csrc share (torch_op.cpp: the scores operation,
// torch_topk_op.cpp: the top-k): tensor descriptors, the argument checks made before the library
// sees a call, and the translation of library errors. `where` names the operation in messages
// ("indexer_forward", "indexer_topk"), as the library's own messages do.
#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "dsa_indexer/indexer.hpp"

namespace dsa_torch {

namespace dsa = dsa_indexer;
using OptTensor = std::optional<at::Tensor>;

inline dsa::DType dtype_of(const at::Tensor& t, const char* name, const char* where = "indexer_forward") {
  switch (t.scalar_type()) {
    case at::kBFloat16: return dsa::DType::bf16;
    case at::kHalf: return dsa::DType::f16;
    case at::kFloat: return dsa::DType::f32;
    case at::kInt: return dsa::DType::i32;
    case at::kLong: return dsa::DType::i64;
    case at::kDouble: return dsa::DType::f64;
    case at::kFloat8_e4m3fn: return dsa::DType::e4m3;
    // Has a code so that the library refuses it by name (no family computes from E5M2).
    case at::kFloat8_e5m2: return dsa::DType::e5m2;
    default:
      TORCH_CHECK_VALUE(false, "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": ", name,
                        ".dtype: expected one of bfloat16, float16, float32, int32, int64, float64, float8_e4m3fn, "
                        "float8_e5m2, got ", t.scalar_type());
  }
}

// Ranks above kMaxRank are passed as kMaxRank + 1 so that the library reports the rank.
inline dsa::TensorDesc desc(const at::Tensor& t, const char* name, const char* where = "indexer_forward") {
  dsa::TensorDesc d;
  d.data = t.data_ptr();
  d.dtype = dtype_of(t, name, where);
  d.rank = static_cast<int32_t>(t.dim() > dsa::kMaxRank ? dsa::kMaxRank + 1 : t.dim());
  for (int i = 0; i < t.dim() && i < dsa::kMaxRank; ++i) {
    d.shape[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  d.device = t.is_cuda() ? t.get_device() : -1;
  return d;
}

inline dsa::TensorDesc desc(const OptTensor& t, const char* name, const char* where = "indexer_forward") {
  return t.has_value() ? desc(*t, name, where) : dsa::TensorDesc{};
}

inline void require_cuda(const at::Tensor& t, const char* name, const char* where = "indexer_forward") {
  TORCH_CHECK_VALUE(t.is_cuda(), "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": ", name,
                    ": expected a CUDA tensor, got a tensor on ", t.device());
}

// As cuDNN-frontend does, an operand whose innermost dimension is strided is made contiguous
// (one copy on the stream); other strides go to the library as they are.
inline at::Tensor inner_contiguous(const at::Tensor& t) {
  return t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1 ? t.contiguous() : t;
}

// The THD metadata of a call: both cu_seqlens or neither, and both max_seqlen with them.
inline bool is_thd(const OptTensor& cu_q, const OptTensor& cu_k, std::optional<int64_t> max_q,
                   std::optional<int64_t> max_k, const char* where = "indexer_forward") {
  const bool thd = cu_q.has_value() || cu_k.has_value();
  if (!thd) return false;
  TORCH_CHECK_VALUE(cu_q.has_value() && cu_k.has_value(),
                    "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": cu_seqlens_q / cu_seqlens_k: "
                    "expected both (THD) or neither (BSHD), got only ",
                    cu_q.has_value() ? "cu_seqlens_q" : "cu_seqlens_k");
  TORCH_CHECK_VALUE(max_q.has_value() && max_k.has_value(),
                    "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": max_seqlen_q and max_seqlen_k: "
                    "expected an int each for THD (cu_seqlens given), got ",
                    max_q.has_value() ? "" : "no max_seqlen_q ", max_k.has_value() ? "" : "no max_seqlen_k");
  return true;
}

// The names come from the library's registry (dsa::kernel_family_by_name), not from a list here.
inline dsa::KernelFamily family_of(const std::string& s, const char* where = "indexer_forward") {
  try {
    return dsa::kernel_family_by_name(s.c_str(), where);
  } catch (const dsa::InvalidArgument& e) {
    TORCH_CHECK_VALUE(false, "[DSA_STATUS_INVALID_ARGUMENT] ", e.what());
  }
}

// Result shapes without a heap allocation per call: at most 3 dimensions.
struct Shape {
  int64_t dims[3];
  size_t rank;
  at::IntArrayRef ref() const { return at::IntArrayRef(dims, rank); }
};

// A host mirror: a CPU int32 tensor of as many values as the device array (contiguous copy if
// needed; the copy lives in `keep` until the call returns).
inline const int32_t* host_mirror(const OptTensor& t, int64_t n, const char* name, at::Tensor& keep,
                                  const char* where = "indexer_forward") {
  if (!t.has_value()) return nullptr;
  TORCH_CHECK_VALUE(t->device().is_cpu() && t->scalar_type() == at::kInt,
                    "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": ", name,
                    ": expected a CPU int32 tensor, got ", t->scalar_type(), " on ", t->device());
  TORCH_CHECK_VALUE(t->numel() == n, "[DSA_STATUS_INVALID_ARGUMENT] ", where, ": ", name, ": expected ", n,
                    " values (as many as the device array), got ", t->numel());
  if (t->is_contiguous()) return t->const_data_ptr<int32_t>();
  keep = t->contiguous();
  return keep.const_data_ptr<int32_t>();
}

[[noreturn]] inline void rethrow(const dsa::Error& e, const char* status) {
  const std::string msg = std::string("[") + status + "] " + e.what();
  if (dynamic_cast<const dsa::InvalidArgument*>(&e)) TORCH_CHECK_VALUE(false, msg);
  if (dynamic_cast<const dsa::UnsupportedConfig*>(&e)) TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  TORCH_CHECK(false, msg);
}

inline const char* status_name(const dsa::Error& e) {
  if (dynamic_cast<const dsa::InvalidArgument*>(&e)) return "DSA_STATUS_INVALID_ARGUMENT";
  if (dynamic_cast<const dsa::UnsupportedConfig*>(&e)) return "DSA_STATUS_UNSUPPORTED_CONFIG";
  if (dynamic_cast<const dsa::CompileError*>(&e)) return "DSA_STATUS_COMPILE_ERROR";
  if (dynamic_cast<const dsa::DriverError*>(&e)) return "DSA_STATUS_DRIVER_ERROR";
  if (dynamic_cast<const dsa::CacheError*>(&e)) return "DSA_STATUS_CACHE_ERROR";
  return "DSA_STATUS_INTERNAL_ERROR";
}

}  // namespace dsa_torch
