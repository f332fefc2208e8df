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
// A parameter whose first value (0) is omitted from sources and keys (see omit_zero): the
// variants from before it keep their keys.
inline ParamDesc omitted_when_zero(ParamDesc d) {
  d.omit_zero = true;
  return d;
}
// The input precision of q and k; bf16 (0) omitted.
inline ParamDesc input_param() {
  return omitted_when_zero({"kInput", ParamDesc::choice, "int", "in", kInputChoices, kInputLiterals, 2});
}
inline int64_t input_value(DType qk) { return qk == DType::e4m3 ? 1 : 0; }
// Lean's split variant (BSHD calls that cannot fill the grid); 0 omitted, as every one below.
inline ParamDesc split_param() { return omitted_when_zero({"kKvSplit", ParamDesc::boolean, "bool", "split"}); }
// Lean's heads (BSHD 32 and 16); 64, its first and THD's, is stored as 0.
inline ParamDesc lean_heads_param() { return omitted_when_zero({"kHeads", ParamDesc::integer, "int", "h"}); }
// Lean's consumer warpgroups (4); 2, the first, is stored as 0.
inline ParamDesc lean_consumers_param() { return omitted_when_zero({"kConsumers", ParamDesc::integer, "int", "c"}); }
// Lean's lse output.
inline ParamDesc lean_lse_param() { return omitted_when_zero(lse_param()); }
// Lean's consumers issuing their products without the ring of named barriers (session 12's
// experiment).
inline ParamDesc lean_free_param() { return omitted_when_zero({"kFreeConsumers", ParamDesc::boolean, "bool", "free"}); }
// Lean's phase stamps (measurements: set_lean_trace).
inline ParamDesc lean_trace_param() { return omitted_when_zero({"kTrace", ParamDesc::boolean, "bool", "trace"}); }
// Lean's THD kernel serving a B 1 BSHD call's explicit windows as one packed sequence.
inline ParamDesc lean_row_windows_param() { return omitted_when_zero({"kRowWindows", ParamDesc::boolean, "bool", "rw"}); }
// Explicit windows' output columns counted from the window's start (WindowColumns::window_start,
// DeepGEMM's compressed logits); 0 (column = key) omitted.
inline ParamDesc window_start_param() { return omitted_when_zero({"kWindowStart", ParamDesc::boolean, "bool", "ws"}); }
inline ParamDesc layout_param() { return {"kLayout", ParamDesc::choice, "int", "", kLayoutChoices, kLayoutLiterals, 3}; }

inline int64_t weights_value(DType w) { return w == DType::f32 ? 1 : 0; }
inline int64_t layout_value(Layout l) { return static_cast<int64_t>(l); }

}  // namespace dsa_indexer::detail
