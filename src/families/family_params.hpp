#pragma once
// Parameter descriptions more than one family uses, so that their members and key tokens are
// spelled once (the generated config and the shape keys of every family agree).
#include "core/kernel_spec.hpp"
#include "core/problem.hpp"

namespace dsa_indexer::detail {

inline constexpr const char* kWeightChoices[] = {"bf16", "f32"};
inline constexpr const char* kWeightLiterals[] = {"false", "true"};
inline constexpr const char* kLayoutChoices[] = {"bshd", "thd_local", "thd_global"};
inline constexpr const char* kLayoutLiterals[] = {"dsa::kLayoutBshd", "dsa::kLayoutThdLocal", "dsa::kLayoutThdGlobal"};

inline ParamDesc heads_param() { return {"kHeads", ParamDesc::integer, "int", "h"}; }
inline ParamDesc weights_param() { return {"kWeightsF32", ParamDesc::choice, "bool", "w", kWeightChoices, kWeightLiterals, 2}; }
inline ParamDesc lse_param() { return {"kWithLse", ParamDesc::boolean, "bool", "lse"}; }
inline constexpr const char* kInputChoices[] = {"bf16", "e4m3"};
inline constexpr const char* kInputLiterals[] = {"dsa::kInputBf16", "dsa::kInputE4m3"};
// The input precision of q and k; bf16 (0) is omitted from sources and keys (see omit_zero).
inline ParamDesc input_param() {
  ParamDesc d{"kInput", ParamDesc::choice, "int", "in", kInputChoices, kInputLiterals, 2};
  d.omit_zero = true;
  return d;
}
inline int64_t input_value(DType qk) { return qk == DType::e4m3 ? 1 : 0; }
// Lean's split variant (BSHD calls that cannot fill the grid); 0 omitted, as kInput.
inline ParamDesc split_param() {
  ParamDesc d{"kKvSplit", ParamDesc::boolean, "bool", "split"};
  d.omit_zero = true;
  return d;
}
// Lean's heads (BSHD 32 and 16); 64, its first and THD's, is stored as 0 and omitted, as kInput.
inline ParamDesc lean_heads_param() {
  ParamDesc d{"kHeads", ParamDesc::integer, "int", "h"};
  d.omit_zero = true;
  return d;
}
// Lean's consumer warpgroups (4); 2, the first, is stored as 0 and omitted, as kInput.
inline ParamDesc lean_consumers_param() {
  ParamDesc d{"kConsumers", ParamDesc::integer, "int", "c"};
  d.omit_zero = true;
  return d;
}
// Lean's lse output (the variants from before it omit it, as kInput).
inline ParamDesc lean_lse_param() {
  ParamDesc d = lse_param();
  d.omit_zero = true;
  return d;
}
// Lean's consumers issuing their products without the ring of named barriers (session 12's
// experiment); off (0) omitted, as kInput.
inline ParamDesc lean_free_param() {
  ParamDesc d{"kFreeConsumers", ParamDesc::boolean, "bool", "free"};
  d.omit_zero = true;
  return d;
}
inline ParamDesc layout_param() { return {"kLayout", ParamDesc::choice, "int", "", kLayoutChoices, kLayoutLiterals, 3}; }

inline int64_t weights_value(DType w) { return w == DType::f32 ? 1 : 0; }
inline int64_t layout_value(Layout l) { return static_cast<int64_t>(l); }

}  // namespace dsa_indexer::detail
