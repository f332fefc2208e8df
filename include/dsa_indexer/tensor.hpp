#pragma once
// Non-owning tensor descriptors: the library never allocates, frees or copies the caller's
// device memory; a descriptor only says where a tensor lives and how it is laid out.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "dsa_indexer/export.hpp"

namespace dsa_indexer {

// e4m3: FP8 E4M3 (torch.float8_e4m3fn: no infinities, 0x7f / 0xff NaN); e5m2: FP8 E5M2, named so
// that it is refused as what it is (no family computes from it).
enum class DType : int32_t { bf16 = 0, f16 = 1, f32 = 2, i32 = 3, i64 = 4, f64 = 5, e4m3 = 6, e5m2 = 7 };

DSA_INDEXER_API const char* dtype_name(DType t);
DSA_INDEXER_API int64_t dtype_size(DType t);

inline constexpr int kMaxRank = 4;

// A strided view of device memory. Shapes and strides are in elements (not bytes), outermost
// dimension first. A descriptor with rank 0 and a null pointer means "not given" for optional
// arguments.
struct TensorDesc {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};
  int32_t device = 0;  // CUDA device ordinal the memory belongs to

  bool present() const { return data != nullptr || rank != 0; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }

  // Row-major contiguous descriptor.
  static TensorDesc contiguous(void* ptr, DType dt, std::initializer_list<int64_t> dims,
                               int32_t device_ordinal = 0) {
    TensorDesc t;
    t.data = ptr;
    t.dtype = dt;
    t.device = device_ordinal;
    t.rank = static_cast<int32_t>(dims.size() > kMaxRank ? kMaxRank + 1 : dims.size());
    int i = 0;
    for (int64_t d : dims) {
      if (i < kMaxRank) t.shape[i] = d;
      ++i;
    }
    int64_t s = 1;
    for (int j = (t.rank > kMaxRank ? kMaxRank : t.rank) - 1; j >= 0; --j) {
      t.strides[j] = s;
      s *= t.shape[j];
    }
    return t;
  }
};

DSA_INDEXER_API std::string describe(const TensorDesc& t);  // "bf16[2,128,64,128] strides [...]"

}  // namespace dsa_indexer
