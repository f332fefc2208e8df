#pragma once
// Launch arguments of the families that serve the whole contract (the problem as the kernel
// sees it); passed by value.
// Host and device see the same layout because every member is a fixed-width scalar.
#include "dsa_types.cuh"

namespace dsa {

enum LayoutMode : i32 { kLayoutBshd = 0, kLayoutThdLocal = 1, kLayoutThdGlobal = 2 };

struct DsaArgs {
  // device addresses (0 = not given)
  u64 q, k, w, out, lse, offsets, cu_q, cu_k, ks, ke;
  // strides in elements (see Problem in src/core/problem.hpp)
  i64 q_stride[3];      // batch, token, head
  i64 k_stride[2];      // batch, token
  i64 w_stride[3];      // batch, token, head
  i64 out_stride[2];    // batch, row
  i64 lse_stride[2];    // batch, row
  i64 win_stride[2];    // batch, row
  i64 offsets_stride;
  // extents
  i64 batch;            // B or n_seg
  i64 s_q, s_k;         // BSHD S_q, S_k (THD: max_seqlen_q, max_seqlen_k)
  i64 t_q, t_k;         // THD packed extents (BSHD: S_q, S_k)
  i64 out_cols;
  i64 ratio;
  float sm_scale;
  i32 has_offsets;
  i32 has_windows;
  i32 pad_;
};

// FP8 inputs: the fp32 per-row scales (0 = not given: 1). A launch parameter of its own, after
// the others, so that the bf16 variants' parameters keep their offsets (and their code its bits).
struct DsaScales {
  u64 q_scale, k_scale;
  i64 q_scale_stride[3];  // batch, token, head
  i64 k_scale_stride[2];  // batch, token
};

// NAME<Cfg>::value: the config member MEMBER of TYPE where the variant renders it, else DEFAULT.
// For members rendered only when they differ from their first value, so that the variants from
// before the member keep their sources.
#define DSA_CONFIG_OR(NAME, MEMBER, TYPE, DEFAULT)               \
  template <class Cfg, class = void>                              \
  struct NAME {                                                   \
    static constexpr TYPE value = DEFAULT;                        \
  };                                                              \
  template <class Cfg>                                            \
  struct NAME<Cfg, decltype(void(Cfg::MEMBER))> {                 \
    static constexpr TYPE value = Cfg::MEMBER;                    \
  };

// The input precision of q and k: the variant's kInput, rendered only when not bf16.
enum InputPrecision : i32 { kInputBf16 = 0, kInputE4m3 = 1 };
DSA_CONFIG_OR(InputOf, kInput, i32, kInputBf16)

// Persistent families: the extent of the static schedule (work items = q-tiles x batch).
struct TileGrid {
  i64 num_tiles;
  i64 tiles_per_batch;
};

}  // namespace dsa
