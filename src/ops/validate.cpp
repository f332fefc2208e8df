#include "ops/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "dispatch/family.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The public entry being validated, for messages ("indexer_forward: q.shape[3] ...").
thread_local const char* g_where = "indexer_forward";

[[noreturn]] void bad(const std::string& param, const std::string& expected, const std::string& actual) {
  fail_param<InvalidArgument>(g_where, param, expected, actual);
}
[[noreturn]] void unsupported(const std::string& param, const std::string& expected, const std::string& actual) {
  fail_param<UnsupportedConfig>(g_where, param, expected, actual);
}

std::string shape_str(const TensorDesc& t) {
  std::string s = "[";
  for (int i = 0; i < t.rank && i < kMaxRank; ++i) s += fmt::format("{}{}", i ? "," : "", t.shape[i]);
  return s + "]";
}

void check_rank(const TensorDesc& t, const char* name, int rank, const char* what) {
  if (t.rank != rank) bad(fmt::format("{}.rank", name), fmt::format("{} ({})", rank, what), fmt::format("{} (shape {})", t.rank, t.rank >= 0 && t.rank <= kMaxRank ? shape_str(t) : "?"));
}

void check_dtype(const TensorDesc& t, const char* name, DType want) {
  if (t.dtype != want) bad(fmt::format("{}.dtype", name), dtype_name(want), dtype_name(t.dtype));
}

void check_dim(const TensorDesc& t, const char* name, int dim, int64_t want, const char* what) {
  if (t.shape[dim] != want)
    bad(fmt::format("{}.shape[{}] ({})", name, dim, what), std::to_string(want), fmt::format("{} (shape {})", t.shape[dim], shape_str(t)));
}

// Basic sanity of any present descriptor: known dtype, rank in range, non-negative extents,
// non-negative strides, a non-null pointer when it holds elements, and the call's device.
void check_common(const TensorDesc& t, const char* name, int32_t device) {
  if (t.rank < 1 || t.rank > kMaxRank) bad(fmt::format("{}.rank", name), fmt::format("1..{}", kMaxRank), std::to_string(t.rank));
  int dt = static_cast<int>(t.dtype);
  if (dt < 0 || dt > static_cast<int>(DType::e5m2)) bad(fmt::format("{}.dtype", name), "a valid DType code", std::to_string(dt));
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) bad(fmt::format("{}.shape[{}]", name, i), ">= 0", std::to_string(t.shape[i]));
    if (t.strides[i] < 0) bad(fmt::format("{}.strides[{}]", name, i), ">= 0", std::to_string(t.strides[i]));
    if (t.shape[i] > (int64_t(1) << 40)) bad(fmt::format("{}.shape[{}]", name, i), "<= 2^40", std::to_string(t.shape[i]));
    if (t.strides[i] > (int64_t(1) << 40)) bad(fmt::format("{}.strides[{}]", name, i), "<= 2^40", std::to_string(t.strides[i]));
  }
  // Not numel(): the product of four extents of up to 2^40 overflows int64.
  bool has_elements = true;
  for (int i = 0; i < t.rank; ++i) has_elements = has_elements && t.shape[i] > 0;
  if (has_elements && t.data == nullptr) bad(fmt::format("{}.data", name), "a device pointer", "null");
  if (t.device != device) bad(fmt::format("{}.device", name), fmt::format("{} (the device of q)", device), std::to_string(t.device));
  auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % static_cast<uintptr_t>(dtype_size(t.dtype)) != 0)
    bad(fmt::format("{}.data", name), fmt::format("aligned to {} bytes ({})", dtype_size(t.dtype), dtype_name(t.dtype)), fmt::format("{:#x}", addr));
}

// Strides of a tensor that the kernels address with nested extents (TMA for q and k, the
// non-overlapping output): innermost stride 1, each outer stride >= the inner extent times its
// stride. Extent-1 dimensions get the nested stride (their stride never matters).
void nested_strides(const TensorDesc& t, const char* name, int64_t* out, int64_t multiple) {
  int r = t.rank;
  if (t.shape[r - 1] > 1 && t.strides[r - 1] != 1)
    bad(fmt::format("{}.strides[{}]", name, r - 1), "1 (innermost dimension contiguous)", std::to_string(t.strides[r - 1]));
  int64_t inner = t.shape[r - 1] == 0 ? 1 : t.shape[r - 1];
  out[r - 1] = 1;
  for (int i = r - 2; i >= 0; --i) {
    int64_t s = t.strides[i];
    if (t.shape[i] <= 1) {
      s = inner;
    } else {
      if (s < inner)
        bad(fmt::format("{}.strides[{}]", name, i), fmt::format(">= {} (dimensions must not overlap)", inner), std::to_string(s));
      if (multiple > 1 && s % multiple != 0)
        bad(fmt::format("{}.strides[{}]", name, i), fmt::format("a multiple of {} elements (16 bytes, for TMA)", multiple), std::to_string(s));
    }
    out[i] = s;
    // Extents and strides are each <= 2^40 (check_common), their product may not fit int64.
    if (__builtin_mul_overflow(s, t.shape[i] == 0 ? 1 : t.shape[i], &inner))
      bad(fmt::format("{}.strides[{}] * {}.shape[{}]", name, i, name, i), "a span that fits in int64",
          fmt::format("{} * {}", s, t.shape[i]));
  }
}

std::vector<int32_t> read_seqlens(const TensorDesc& t, const int32_t* host, const char* name, const MetadataReader& read) {
  const auto n = static_cast<std::size_t>(t.shape[0]);
  if (host) return std::vector<int32_t>(host, host + n);  // the caller vouches for n values there
  if (!read) bad(name, "a host mirror or a device to read it from", "neither");
  // In chunks: the first read checks the pointer (device memory of the call's device) before the
  // caller's unverified extent, up to 2^40, decides how much host memory is allocated.
  constexpr std::size_t kChunk = std::size_t(1) << 16;
  std::vector<int32_t> v;
  for (std::size_t done = 0; done < n;) {
    const std::size_t c = std::min(kChunk, n - done);
    v.resize(done + c);
    read(static_cast<const int32_t*>(t.data) + done, v.data() + done, c);
    done += c;
  }
  return v;
}

void check_seqlens(const std::vector<int32_t>& cu, const char* name, int64_t total, int64_t max_len,
                   const char* total_name, const char* max_name) {
  if (cu[0] != 0) bad(fmt::format("{}[0]", name), "0", std::to_string(cu[0]));
  int64_t longest = 0;
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      bad(fmt::format("{}[{}]", name, i), fmt::format(">= {}[{}] = {} (non-decreasing)", name, i - 1, cu[i - 1]), std::to_string(cu[i]));
    longest = std::max<int64_t>(longest, int64_t(cu[i]) - cu[i - 1]);
  }
  if (cu.back() != total)
    bad(fmt::format("{}[{}] (last)", name, cu.size() - 1), fmt::format("{} ({})", total, total_name), std::to_string(cu.back()));
  if (max_len < longest)
    bad(max_name, fmt::format(">= {} (the longest segment in {})", longest, name), std::to_string(max_len));
}

void check_row_vector(const TensorDesc& t, const char* name, DType dt, bool thd, int64_t b, int64_t s, int64_t* stride_out, int32_t device) {
  check_common(t, name, device);
  check_dtype(t, name, dt);
  if (thd) {
    check_rank(t, name, 1, "(T_q,)");
    check_dim(t, name, 0, s, "T_q");
    stride_out[0] = 0;
    stride_out[1] = t.shape[0] > 1 ? t.strides[0] : 1;
  } else {
    check_rank(t, name, 2, "(B, S_q)");
    check_dim(t, name, 0, b, "B");
    check_dim(t, name, 1, s, "S_q");
    stride_out[0] = t.shape[0] > 1 ? t.strides[0] : 0;
    stride_out[1] = t.shape[1] > 1 ? t.strides[1] : 1;
  }
}

}  // namespace

Problem validate_call(const char* where, const TensorDesc& q, const TensorDesc& k, const TensorDesc& w,
                      const TensorDesc& out, const char* out_name, const IndexerOptions& opt, const MetadataReader& read,
                      const std::function<void(Problem&)>& outputs) {
  struct Where {
    const char* saved = g_where;
    explicit Where(const char* w) { g_where = w; }
    ~Where() { g_where = saved; }
  } scope(where);
  Problem p;
  if (!q.present()) bad("q", "a tensor", "not given");
  if (!k.present()) bad("k", "a tensor", "not given");
  if (!w.present()) bad("w", "a tensor", "not given");
  if (!out.present()) bad(out_name, "a tensor", "not given");
  const int32_t dev = q.device;
  if (dev < 0) bad("q.device", ">= 0", std::to_string(dev));
  p.device = dev;
  check_common(q, "q", dev);
  check_common(k, "k", dev);
  check_common(w, "w", dev);
  check_common(out, out_name, dev);

  // ---- scalars ----
  if (opt.ratio < 1) bad("ratio", ">= 1", std::to_string(opt.ratio));
  if (opt.ratio > kInt32Max) bad("ratio", fmt::format("<= {}", kInt32Max), std::to_string(opt.ratio));
  if (!std::isfinite(opt.sm_scale)) bad("sm_scale", "a finite float", fmt::format("{}", opt.sm_scale));
  p.ratio = opt.ratio;
  p.sm_scale = opt.sm_scale;

  const bool has_cu_q = opt.cu_seqlens_q.present(), has_cu_k = opt.cu_seqlens_k.present();
  if (has_cu_q != has_cu_k)
    bad("cu_seqlens_q / cu_seqlens_k", "both given (THD) or neither (BSHD)",
        has_cu_q ? "only cu_seqlens_q" : "only cu_seqlens_k");
  const bool thd = has_cu_q;
  if (opt.thd_columns != ThdColumns::local && opt.thd_columns != ThdColumns::global)
    bad("thd_columns", "local (0) or global (1)", std::to_string(static_cast<int>(opt.thd_columns)));
  if (!thd && opt.thd_columns != ThdColumns::local)
    bad("thd_columns", "local (the default) for a BSHD call", "global");
  if (opt.window_columns != WindowColumns::key && opt.window_columns != WindowColumns::window_start)
    bad("window_columns", "key (0) or window_start (1)", std::to_string(static_cast<int>(opt.window_columns)));
  if (opt.window_columns == WindowColumns::window_start) {
    if (!opt.ks.present() || !opt.ke.present())
      bad("window_columns", "key (the default) unless explicit windows ks / ke are given", "window_start without them");
    if (thd)
      unsupported("window_columns", "key for THD (window_start columns, DeepGEMM's compressed logits, are BSHD's)",
                  "window_start");
    p.window_start = true;
  }
  if (opt.family != KernelFamily::automatic && !family_known(opt.family))
    bad("family", fmt::format("automatic (0), {}", family_options()), std::to_string(static_cast<int>(opt.family)));

  // ---- input precision: bf16, or FP8 E4M3 for both q and k ----
  if (q.dtype == DType::e5m2) unsupported("q.dtype", "bf16 or e4m3 (float8_e4m3fn)", "e5m2 (no family computes from FP8 E5M2)");
  if (q.dtype != DType::bf16 && q.dtype != DType::e4m3) bad("q.dtype", "bf16 or e4m3", dtype_name(q.dtype));
  if (k.dtype != q.dtype) bad("k.dtype", fmt::format("{}, as q", dtype_name(q.dtype)), dtype_name(k.dtype));
  p.qk_dtype = q.dtype;
  const bool fp8 = q.dtype == DType::e4m3;
  const int64_t tma_multiple = 16 / dtype_size(q.dtype);  // elements per 16 bytes

  // ---- q ----
  if (thd) {
    check_rank(q, "q", 3, "(T_q, H, D) for THD");
    check_rank(k, "k", 3, "(T_k, 1, D) for THD");
  } else {
    check_rank(q, "q", 4, "(B, S_q, H, D) for BSHD; THD needs cu_seqlens_q/k");
    check_rank(k, "k", 4, "(B, S_k, 1, D) for BSHD");
  }
  const int hd = thd ? 1 : 2;  // index of the head dimension in q
  const int64_t H = q.shape[hd], D = q.shape[hd + 1];
  if (D != 128) unsupported(fmt::format("q.shape[{}] (head dim D)", hd + 1), "128", std::to_string(D));
  if (H != 16 && H != 32 && H != 64) unsupported(fmt::format("q.shape[{}] (heads H)", hd), "16, 32 or 64", std::to_string(H));
  p.heads = static_cast<int32_t>(H);
  p.head_dim = static_cast<int32_t>(D);

  int64_t qs[4] = {0, 0, 0, 0}, ks_[4] = {0, 0, 0, 0};
  nested_strides(q, "q", qs, tma_multiple);
  nested_strides(k, "k", ks_, tma_multiple);
  if (reinterpret_cast<uintptr_t>(q.data) % 16) bad("q.data", "16-byte aligned (TMA)", fmt::format("{:#x}", reinterpret_cast<uintptr_t>(q.data)));
  if (reinterpret_cast<uintptr_t>(k.data) % 16) bad("k.data", "16-byte aligned (TMA)", fmt::format("{:#x}", reinterpret_cast<uintptr_t>(k.data)));
  if (k.shape[hd] != 1) unsupported(fmt::format("k.shape[{}] (KV heads)", hd), "1 (MQA: one KV head)", std::to_string(k.shape[hd]));
  check_dim(k, "k", hd + 1, D, "head dim D, as q");

  if (thd) {
    p.t_q = q.shape[0];
    p.t_k = k.shape[0];
    p.q_stride[0] = 0; p.q_stride[1] = qs[0]; p.q_stride[2] = qs[1];
    p.k_stride[0] = 0; p.k_stride[1] = ks_[0];
    if (p.t_q > kInt32Max) bad("q.shape[0] (T_q)", fmt::format("<= {}", kInt32Max), std::to_string(p.t_q));
    if (p.t_k > kInt32Max) bad("k.shape[0] (T_k)", fmt::format("<= {}", kInt32Max), std::to_string(p.t_k));
  } else {
    const int64_t B = q.shape[0];
    if (B < 1) bad("q.shape[0] (B)", ">= 1", std::to_string(B));
    check_dim(k, "k", 0, B, "B, as q");
    p.batch = B;
    p.s_q = q.shape[1];
    p.s_k = k.shape[1];
    if (p.s_q < 1) bad("q.shape[1] (S_q)", ">= 1", std::to_string(p.s_q));
    if (p.s_k < 1) bad("k.shape[1] (S_k)", ">= 1", std::to_string(p.s_k));
    if (p.s_q > kInt32Max) bad("q.shape[1] (S_q)", fmt::format("<= {}", kInt32Max), std::to_string(p.s_q));
    if (p.s_k > kInt32Max) bad("k.shape[1] (S_k)", fmt::format("<= {}", kInt32Max), std::to_string(p.s_k));
    p.t_q = p.s_q;
    p.t_k = p.s_k;
    p.rows = B * p.s_q;
    p.q_stride[0] = qs[0]; p.q_stride[1] = qs[1]; p.q_stride[2] = qs[2];
    p.k_stride[0] = ks_[0]; p.k_stride[1] = ks_[1];
    p.out_cols = p.s_k;
  }

  // ---- THD metadata ----
  if (thd) {
    const TensorDesc* cus[2] = {&opt.cu_seqlens_q, &opt.cu_seqlens_k};
    const char* names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    for (int i = 0; i < 2; ++i) {
      check_common(*cus[i], names[i], dev);
      check_dtype(*cus[i], names[i], DType::i32);
      check_rank(*cus[i], names[i], 1, "(n_seg + 1,)");
      if (cus[i]->shape[0] < 2) bad(fmt::format("{}.shape[0]", names[i]), ">= 2 (n_seg + 1 with n_seg >= 1)", std::to_string(cus[i]->shape[0]));
      if (cus[i]->shape[0] > 1 && cus[i]->strides[0] != 1) bad(fmt::format("{}.strides[0]", names[i]), "1 (contiguous)", std::to_string(cus[i]->strides[0]));
    }
    if (opt.cu_seqlens_k.shape[0] != opt.cu_seqlens_q.shape[0])
      bad("cu_seqlens_k.shape[0]", fmt::format("{} (the length of cu_seqlens_q)", opt.cu_seqlens_q.shape[0]), std::to_string(opt.cu_seqlens_k.shape[0]));
    if (opt.max_seqlen_q < 0) bad("max_seqlen_q", "given (>= 0) for THD", opt.max_seqlen_q == -1 ? std::string("not given") : std::to_string(opt.max_seqlen_q));
    if (opt.max_seqlen_k < 0) bad("max_seqlen_k", "given (>= 0) for THD", opt.max_seqlen_k == -1 ? std::string("not given") : std::to_string(opt.max_seqlen_k));
    if (opt.max_seqlen_q > kInt32Max) bad("max_seqlen_q", fmt::format("<= {}", kInt32Max), std::to_string(opt.max_seqlen_q));
    if (opt.max_seqlen_k > kInt32Max) bad("max_seqlen_k", fmt::format("<= {}", kInt32Max), std::to_string(opt.max_seqlen_k));
    p.batch = opt.cu_seqlens_q.shape[0] - 1;
    p.s_q = opt.max_seqlen_q;
    p.s_k = opt.max_seqlen_k;
    p.rows = p.t_q;
    p.layout = opt.thd_columns == ThdColumns::global ? Layout::thd_global : Layout::thd_local;
    p.out_cols = p.layout == Layout::thd_global ? p.t_k : p.s_k;
    p.cu_q = opt.cu_seqlens_q.data;
    p.cu_k = opt.cu_seqlens_k.data;
    p.cu_q_host = read_seqlens(opt.cu_seqlens_q, opt.cu_seqlens_q_host, "cu_seqlens_q", read);
    p.cu_k_host = read_seqlens(opt.cu_seqlens_k, opt.cu_seqlens_k_host, "cu_seqlens_k", read);
    check_seqlens(p.cu_q_host, "cu_seqlens_q", p.t_q, p.s_q, "q.shape[0], T_q", "max_seqlen_q");
    check_seqlens(p.cu_k_host, "cu_seqlens_k", p.t_k, p.s_k, "k.shape[0], T_k", "max_seqlen_k");
  } else {
    if (opt.max_seqlen_q != -1 || opt.max_seqlen_k != -1)
      bad("max_seqlen_q / max_seqlen_k", "not given (-1) for BSHD", fmt::format("{} / {}", opt.max_seqlen_q, opt.max_seqlen_k));
    if (opt.cu_seqlens_q_host || opt.cu_seqlens_k_host)
      bad("cu_seqlens_q_host / cu_seqlens_k_host", "null for BSHD", "a pointer");
  }

  // ---- w ----
  if (w.dtype != DType::bf16 && w.dtype != DType::f32) bad("w.dtype", "bf16 or f32", dtype_name(w.dtype));
  p.w_dtype = w.dtype;
  if (thd) {
    check_rank(w, "w", 2, "(T_q, H) for THD");
    check_dim(w, "w", 0, p.t_q, "T_q");
    check_dim(w, "w", 1, H, "H");
    p.w_stride[0] = 0; p.w_stride[1] = w.strides[0]; p.w_stride[2] = w.strides[1];
  } else {
    check_rank(w, "w", 3, "(B, S_q, H) for BSHD");
    check_dim(w, "w", 0, p.batch, "B");
    check_dim(w, "w", 1, p.s_q, "S_q");
    check_dim(w, "w", 2, H, "H");
    p.w_stride[0] = w.strides[0]; p.w_stride[1] = w.strides[1]; p.w_stride[2] = w.strides[2];
  }

  // ---- FP8 scales ----
  const bool has_qsc = opt.q_scale.present(), has_ksc = opt.k_scale.present();
  if (!fp8 && (has_qsc || has_ksc))
    bad(has_qsc ? "q_scale" : "k_scale", "not given for bf16 q/k (the scales apply to e4m3 inputs)", "given");
  if (has_qsc) {
    const TensorDesc& t = opt.q_scale;
    check_common(t, "q_scale", dev);
    check_dtype(t, "q_scale", DType::f32);
    if (thd) {
      check_rank(t, "q_scale", 2, "(T_q, H) for THD");
      check_dim(t, "q_scale", 0, p.t_q, "T_q");
      check_dim(t, "q_scale", 1, H, "H");
      p.q_scale_stride[0] = 0; p.q_scale_stride[1] = t.strides[0]; p.q_scale_stride[2] = t.strides[1];
    } else {
      check_rank(t, "q_scale", 3, "(B, S_q, H) for BSHD");
      check_dim(t, "q_scale", 0, p.batch, "B");
      check_dim(t, "q_scale", 1, p.s_q, "S_q");
      check_dim(t, "q_scale", 2, H, "H");
      p.q_scale_stride[0] = t.strides[0]; p.q_scale_stride[1] = t.strides[1]; p.q_scale_stride[2] = t.strides[2];
    }
    p.has_q_scale = true;
    p.q_scale = t.data;
  }
  if (has_ksc) {
    const TensorDesc& t = opt.k_scale;
    check_common(t, "k_scale", dev);
    check_dtype(t, "k_scale", DType::f32);
    if (thd) {
      if (t.rank != 1 && t.rank != 2) check_rank(t, "k_scale", 1, "(T_k,) or (T_k, 1) for THD");
      check_dim(t, "k_scale", 0, p.t_k, "T_k");
      if (t.rank == 2) check_dim(t, "k_scale", 1, 1, "1 (one KV head)");
      p.k_scale_stride[0] = 0; p.k_scale_stride[1] = t.strides[0];
    } else {
      if (t.rank != 2 && t.rank != 3) check_rank(t, "k_scale", 2, "(B, S_k) or (B, S_k, 1) for BSHD");
      check_dim(t, "k_scale", 0, p.batch, "B");
      check_dim(t, "k_scale", 1, p.s_k, "S_k");
      if (t.rank == 3) check_dim(t, "k_scale", 2, 1, "1 (one KV head)");
      p.k_scale_stride[0] = t.strides[0]; p.k_scale_stride[1] = t.strides[1];
    }
    p.has_k_scale = true;
    p.k_scale = t.data;
  }

  outputs(p);

  // ---- offsets / windows ----
  const bool has_ks = opt.ks.present(), has_ke = opt.ke.present();
  if (has_ks != has_ke) bad("ks / ke", "both given or neither", has_ks ? "only ks" : "only ke");
  p.has_windows = has_ks;
  p.has_offsets = opt.q_causal_offsets.present();
  if (p.has_windows && p.has_offsets)
    bad("q_causal_offsets", "not given together with explicit ks/ke windows (they replace the causal window)", "given");
  if (p.has_offsets) {
    const TensorDesc& o = opt.q_causal_offsets;
    check_common(o, "q_causal_offsets", dev);
    check_dtype(o, "q_causal_offsets", DType::i32);
    check_rank(o, "q_causal_offsets", 1, thd ? "(n_seg,)" : "(B,)");
    check_dim(o, "q_causal_offsets", 0, p.batch, thd ? "n_seg" : "B");
    p.offsets = o.data;
    p.offsets_stride = o.shape[0] > 1 ? o.strides[0] : 1;
  }
  if (p.has_windows) {
    int64_t st[2];
    check_row_vector(opt.ks, "ks", DType::i32, thd, p.batch, thd ? p.t_q : p.s_q, st, dev);
    int64_t st2[2];
    check_row_vector(opt.ke, "ke", DType::i32, thd, p.batch, thd ? p.t_q : p.s_q, st2, dev);
    if (st[0] != st2[0] || st[1] != st2[1])
      bad("ke.strides", fmt::format("the strides of ks ({}, {})", st[0], st[1]), fmt::format("({}, {})", st2[0], st2[1]));
    p.win_stride[0] = st[0];
    p.win_stride[1] = st[1];
    p.ks = opt.ks.data;
    p.ke = opt.ke.data;
  }
  p.has_lse = opt.lse.present();
  if (p.has_lse) {
    check_row_vector(opt.lse, "lse", DType::f32, thd, p.batch, thd ? p.t_q : p.s_q, p.lse_stride, dev);
    int64_t lse_rows = 0;  // S_q (< 2^31) times a stride (<= 2^40) can overflow int64
    if (!thd && p.batch > 1 && p.s_q > 1 && __builtin_mul_overflow(p.s_q, p.lse_stride[1], &lse_rows))
      bad("lse.strides[1] * S_q", "a span that fits in int64", fmt::format("{} * {}", p.lse_stride[1], p.s_q));
    if (!thd && p.batch > 1 && p.s_q > 1 && p.lse_stride[0] < lse_rows)
      bad("lse.strides[0]", fmt::format(">= {} (rows must not overlap)", lse_rows), std::to_string(p.lse_stride[0]));
    if ((thd ? p.t_q : p.s_q) > 1 && p.lse_stride[1] < 1)
      bad(thd ? "lse.strides[0]" : "lse.strides[1]", ">= 1 (rows must not overlap)", std::to_string(p.lse_stride[1]));
    p.lse = opt.lse.data;
  }

  p.q = q.data;
  p.k = k.data;
  p.w = w.data;
  return p;
}

void check_output(const TensorDesc& t, const char* name, DType dt, const Problem& p, int64_t last_dim, const char* last_what,
                  int64_t* strides_out) {
  check_common(t, name, p.device);
  check_dtype(t, name, dt);
  if (p.is_thd()) {
    check_rank(t, name, 2, fmt::format("(T_q, {})", last_what).c_str());
    check_dim(t, name, 0, p.t_q, "T_q");
    check_dim(t, name, 1, last_dim, last_what);
  } else {
    check_rank(t, name, 3, fmt::format("(B, S_q, {})", last_what).c_str());
    check_dim(t, name, 0, p.batch, "B");
    check_dim(t, name, 1, p.s_q, "S_q");
    check_dim(t, name, 2, last_dim, last_what);
  }
  nested_strides(t, name, strides_out, 1);
}

Problem validate(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& scores,
                 const IndexerOptions& opt, const MetadataReader& read) {
  Problem res = validate_call("indexer_forward", q, k, w, scores, "scores", opt, read, [&](Problem& p) {
    check_dtype(scores, "scores", DType::f32);
    int64_t os[4] = {0, 0, 0, 0};
    if (p.is_thd()) {
      check_rank(scores, "scores", 2, p.layout == Layout::thd_global ? "(T_q, T_k) for THD global columns" : "(T_q, max_seqlen_k) for THD local columns");
      check_dim(scores, "scores", 0, p.t_q, "T_q");
      check_dim(scores, "scores", 1, p.out_cols, p.layout == Layout::thd_global ? "T_k" : "max_seqlen_k");
      nested_strides(scores, "scores", os, 1);
      p.out_stride[0] = 0; p.out_stride[1] = os[0];
    } else {
      check_rank(scores, "scores", 3, p.window_start ? "(B, S_q, N) for window_start columns" : "(B, S_q, S_k)");
      check_dim(scores, "scores", 0, p.batch, "B");
      check_dim(scores, "scores", 1, p.s_q, "S_q");
      if (p.window_start) {  // any width: a row's window keeps its first N keys
        if (scores.shape[2] < 1) bad("scores.shape[2] (N)", ">= 1", std::to_string(scores.shape[2]));
        if (scores.shape[2] > kInt32Max) bad("scores.shape[2] (N)", fmt::format("<= {}", kInt32Max), std::to_string(scores.shape[2]));
        p.out_cols = scores.shape[2];
      } else {
        check_dim(scores, "scores", 2, p.s_k, "S_k");
      }
      nested_strides(scores, "scores", os, 1);
      p.out_stride[0] = os[0]; p.out_stride[1] = os[1];
    }
  });
  res.out = scores.data;
  return res;
}

}  // namespace dsa_indexer::detail
