// libFuzzer target over the C API's argument validation (docs/RELIABILITY.md, item 5).
//
// The input decodes into a forward or top-k call that starts well formed (BSHD or THD, random
// extents, optional offsets / windows / LSE, host mirrors of cu_seqlens; top-k: k, values /
// softmax, index convention, workspace) and is then mutated field by field: ranks, dtypes, shapes,
// strides, pointers, devices, cu_seqlens contents, scalars (NaN, inf, boundaries), struct_size,
// NULL arguments. The top-k entries (dsa_indexer_topk and its workspace-size query) share the
// forward's invariants. Pointers are fake device addresses: only validation may look at them.
// Without a GPU a call that passes validation stops at the driver (DSA_STATUS_DRIVER_ERROR); with
// one, fake pointers are rejected as not device memory.
//
// Invariants (a violation aborts, which libFuzzer reports as a crash):
//  - the status is one of the typed codes and never DSA_STATUS_INTERNAL_ERROR;
//  - every failure leaves a non-empty dsa_last_error(); an argument error names what was
//    expected ("expected ... got ...");
//  - success leaves dsa_last_error() empty.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa_indexer/c_api.h"

namespace {

uint64_t g_status_count[8];
uint64_t g_topk_calls = 0;  // of which dsa_indexer_topk or its workspace-size query

void print_histogram() {
  std::fprintf(stderr, "fuzz_c_api: statuses:");
  for (int s = 0; s <= 6; ++s)
    std::fprintf(stderr, " %s=%llu", dsa_status_name(static_cast<dsa_status>(s)),
                 static_cast<unsigned long long>(g_status_count[s]));
  std::fprintf(stderr, " (top-k entries: %llu)\n", static_cast<unsigned long long>(g_topk_calls));
}

int64_t interesting64(FuzzedDataProvider& in) {
  static const int64_t picks[] = {0, 1, -1, 2, 7, 8, 15, 16, 17, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256,
                                  INT32_MAX, int64_t(INT32_MAX) + 1, INT32_MIN, int64_t(1) << 40,
                                  (int64_t(1) << 40) + 1, int64_t(1) << 62, INT64_MAX, INT64_MIN};
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: return picks[in.ConsumeIntegralInRange<std::size_t>(0, sizeof picks / sizeof picks[0] - 1)];
    case 1: return in.ConsumeIntegralInRange<int64_t>(-4, 600);
    default: return in.ConsumeIntegral<int64_t>();
  }
}

float interesting_float(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -std::numeric_limits<float>::infinity();
    case 3: return std::numeric_limits<float>::denorm_min();
    case 4: return std::numeric_limits<float>::max();
    case 5: return 0.0f;
    case 6: {
      uint32_t bits = in.ConsumeIntegral<uint32_t>();
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
  }
}

dsa_tensor contiguous(uintptr_t addr, int32_t dtype, std::initializer_list<int64_t> dims) {
  dsa_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void*>(addr);
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) t.shape[i++] = d;
  int64_t s = 1;
  for (int j = t.rank - 1; j >= 0; --j) {
    t.strides[j] = s;
    s *= t.shape[j] > 0 ? t.shape[j] : 1;
  }
  return t;
}

// n_seg + 1 non-decreasing offsets from 0 to total.
std::vector<int32_t> split(FuzzedDataProvider& in, int n_seg, int32_t total) {
  std::vector<int32_t> cu(static_cast<std::size_t>(n_seg) + 1, 0);
  for (int i = 1; i < n_seg; ++i) cu[i] = in.ConsumeIntegralInRange<int32_t>(cu[i - 1], total);
  cu[n_seg] = total;
  return cu;
}

int32_t longest(const std::vector<int32_t>& cu) {
  int32_t m = 0;
  for (std::size_t i = 1; i < cu.size(); ++i) m = std::max(m, cu[i] - cu[i - 1]);
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::atexit(print_histogram);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool thd = in.ConsumeBool();
  static const int64_t heads[] = {16, 32, 64};
  const int64_t H = heads[in.ConsumeIntegralInRange<int>(0, 2)];
  const int64_t D = 128;
  const int64_t B = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int32_t T_q = in.ConsumeIntegralInRange<int32_t>(0, 300), T_k = in.ConsumeIntegralInRange<int32_t>(0, 300);
  const int64_t S_q = in.ConsumeIntegralInRange<int64_t>(1, 300), S_k = in.ConsumeIntegralInRange<int64_t>(1, 300);
  const int n_seg = in.ConsumeIntegralInRange<int>(1, 6);
  const int32_t w_dtype = in.ConsumeBool() ? DSA_F32 : DSA_BF16;
  const bool with_offsets = in.ConsumeBool(), with_windows = in.ConsumeBool() && !with_offsets, with_lse = in.ConsumeBool();

  // Fake, 256-byte-aligned device addresses, one region per tensor; never dereferenced.
  auto addr = [](int i) { return uintptr_t(0x7f0000000000ull) + uintptr_t(i) * 0x10000000ull; };
  dsa_tensor q, k, w, out;
  dsa_options o;
  dsa_options_init(&o);
  std::vector<int32_t> cu_q, cu_k;
  if (thd) {
    cu_q = split(in, n_seg, T_q);
    cu_k = split(in, n_seg, T_k);
    q = contiguous(addr(1), DSA_BF16, {T_q, H, D});
    k = contiguous(addr(2), DSA_BF16, {T_k, 1, D});
    w = contiguous(addr(3), w_dtype, {T_q, H});
    o.thd_columns = in.ConsumeBool() ? DSA_THD_GLOBAL : DSA_THD_LOCAL;
    o.max_seqlen_q = longest(cu_q);
    o.max_seqlen_k = longest(cu_k);
    out = contiguous(addr(4), DSA_F32, {T_q, o.thd_columns == DSA_THD_GLOBAL ? int64_t(T_k) : o.max_seqlen_k});
    o.cu_seqlens_q = contiguous(addr(5), DSA_I32, {n_seg + 1});
    o.cu_seqlens_k = contiguous(addr(6), DSA_I32, {n_seg + 1});
    if (with_offsets) o.q_causal_offsets = contiguous(addr(7), DSA_I32, {n_seg});
    if (with_windows) {
      o.ks = contiguous(addr(8), DSA_I32, {T_q});
      o.ke = contiguous(addr(9), DSA_I32, {T_q});
    }
    if (with_lse) o.lse = contiguous(addr(10), DSA_F32, {T_q});
  } else {
    q = contiguous(addr(1), DSA_BF16, {B, S_q, H, D});
    k = contiguous(addr(2), DSA_BF16, {B, S_k, 1, D});
    w = contiguous(addr(3), w_dtype, {B, S_q, H});
    out = contiguous(addr(4), DSA_F32, {B, S_q, S_k});
    if (with_offsets) o.q_causal_offsets = contiguous(addr(7), DSA_I32, {B});
    if (with_windows) {
      o.ks = contiguous(addr(8), DSA_I32, {B, S_q});
      o.ke = contiguous(addr(9), DSA_I32, {B, S_q});
    }
    if (with_lse) o.lse = contiguous(addr(10), DSA_F32, {B, S_q});
  }
  o.ratio = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 8) : interesting64(in);
  o.sm_scale = in.ConsumeBool() ? 0.125f : interesting_float(in);
  o.family = in.ConsumeIntegralInRange<int32_t>(0, 3);

  // Field mutations of any descriptor.
  auto mutate = [&in](dsa_tensor& t) {
    const int dim = in.ConsumeIntegralInRange<int>(0, 3);
    switch (in.ConsumeIntegralInRange<int>(0, 8)) {
      case 8: {  // every extent (or every stride) at once: products of large values
        const int64_t v = interesting64(in);
        int64_t* f = in.ConsumeBool() ? t.shape : t.strides;
        for (int i = 0; i < 4; ++i) f[i] = v;
        break;
      }
      case 0: t.rank = static_cast<int32_t>(in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 6) : interesting64(in)); break;
      case 1: t.dtype = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-1, 7) : in.ConsumeIntegral<int32_t>(); break;
      case 2: t.shape[dim] = interesting64(in); break;
      case 3: t.strides[dim] = interesting64(in); break;
      case 4: t.data = reinterpret_cast<void*>(in.ConsumeBool() ? uintptr_t(0) : reinterpret_cast<uintptr_t>(t.data) + in.ConsumeIntegralInRange<int>(1, 15)); break;
      case 5: t.device = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-2, 3) : in.ConsumeIntegral<int32_t>(); break;
      case 6: std::memset(&t, 0, sizeof t); break;  // "not given"
      default:  // off by a little, wrapping like the caller's own arithmetic would
        t.shape[dim] = static_cast<int64_t>(static_cast<uint64_t>(t.shape[dim]) + static_cast<uint64_t>(in.ConsumeIntegralInRange<int64_t>(-2, 2)));
        break;
    }
  };
  dsa_tensor* targets[] = {&q, &k, &w, &out, &o.q_causal_offsets, &o.cu_seqlens_q, &o.cu_seqlens_k, &o.ks, &o.ke, &o.lse};
  const int mutations = in.ConsumeIntegralInRange<int>(0, 6);
  for (int m = 0; m < mutations; ++m) mutate(*targets[in.ConsumeIntegralInRange<int>(0, 9)]);
  // Scalar mutations.
  if (in.ConsumeProbability<float>() < 0.2f) o.max_seqlen_q = interesting64(in);
  if (in.ConsumeProbability<float>() < 0.2f) o.max_seqlen_k = interesting64(in);
  if (in.ConsumeProbability<float>() < 0.05f) o.thd_columns = in.ConsumeIntegral<int32_t>();
  if (in.ConsumeProbability<float>() < 0.05f) o.family = in.ConsumeIntegral<int32_t>();
  if (in.ConsumeProbability<float>() < 0.02f) o.struct_size = in.ConsumeIntegral<uint32_t>();

  // Host mirrors: as many values as the (possibly mutated) descriptor promises, taken from the
  // valid offsets and then perturbed; a descriptor too long for a mirror goes without one, so
  // the library must take the driver path (a caller's mirror is trusted to be that long).
  std::vector<int32_t> mq, mk;
  const bool mirrors = in.ConsumeProbability<float>() < 0.8f;
  auto mirror = [&](const dsa_tensor& t, const std::vector<int32_t>& base, std::vector<int32_t>& m) -> const int32_t* {
    if (!mirrors || t.rank < 1 || t.shape[0] < 0 || t.shape[0] > 4096) return nullptr;
    m.assign(static_cast<std::size_t>(t.shape[0]), 0);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = i < base.size() ? base[i] : (base.empty() ? 0 : base.back());
    const int perturb = in.ConsumeIntegralInRange<int>(0, 2);
    for (int p = 0; p < perturb && !m.empty(); ++p)
      m[in.ConsumeIntegralInRange<std::size_t>(0, m.size() - 1)] =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-2, 310) : in.ConsumeIntegral<int32_t>();
    return m.data();
  };
  o.cu_seqlens_q_host = mirror(o.cu_seqlens_q, cu_q, mq);
  o.cu_seqlens_k_host = mirror(o.cu_seqlens_k, cu_k, mk);

  const int nulls = in.ConsumeProbability<float>() < 0.03f ? in.ConsumeIntegralInRange<int>(1, 31) : 0;

  // The top-k entry (decoded after everything above, so that the seeds' forward calls stay what
  // they were): the same call with `out` replaced by top-k indices of k_top columns, optional
  // values / softmax, a workspace, and mutations of those and of the top-k options.
  dsa_status s;
  if (in.ConsumeProbability<float>() < 0.5f) {
    s = dsa_indexer_forward(nulls & 1 ? nullptr : &q, nulls & 2 ? nullptr : &k, nulls & 4 ? nullptr : &w,
                            nulls & 8 ? nullptr : &out, nulls & 16 ? nullptr : &o, nullptr);
  } else {
    ++g_topk_calls;
    dsa_topk_options t;
    dsa_topk_options_init(&t);
    t.k = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(1, 300) : static_cast<int32_t>(interesting64(in));
    const int64_t kk = t.k;
    const int64_t rows0 = thd ? int64_t(T_q) : B, rows1 = thd ? kk : S_q;
    dsa_tensor indices = thd ? contiguous(addr(4), DSA_I32, {rows0, rows1}) : contiguous(addr(4), DSA_I32, {rows0, rows1, kk});
    if (in.ConsumeBool()) t.values = thd ? contiguous(addr(11), DSA_F32, {rows0, rows1}) : contiguous(addr(11), DSA_F32, {rows0, rows1, kk});
    if (in.ConsumeBool()) t.softmax = thd ? contiguous(addr(12), DSA_F32, {rows0, rows1}) : contiguous(addr(12), DSA_F32, {rows0, rows1, kk});
    t.sort_by_score = in.ConsumeBool() ? 1 : 0;
    t.indices = in.ConsumeProbability<float>() < 0.05f ? in.ConsumeIntegral<int32_t>() : (in.ConsumeBool() ? DSA_TOPK_INDICES_GLOBAL : DSA_TOPK_INDICES_LOCAL);
    if (in.ConsumeBool()) {  // a caller's workspace: aligned or not, large or too small, or over another buffer
      t.workspace = reinterpret_cast<void*>(in.ConsumeBool() ? addr(13) : addr(in.ConsumeIntegralInRange<int>(1, 13)) + in.ConsumeIntegralInRange<int>(0, 300));
      t.workspace_bytes = in.ConsumeBool() ? in.ConsumeIntegralInRange<size_t>(0, 1 << 20) : static_cast<size_t>(interesting64(in));
    } else if (in.ConsumeProbability<float>() < 0.05f) {
      t.workspace_bytes = in.ConsumeIntegralInRange<size_t>(1, 4096);  // bytes without a pointer
    }
    dsa_tensor* topk_targets[] = {&indices, &t.values, &t.softmax};
    const int topk_mutations = in.ConsumeIntegralInRange<int>(0, 4);
    for (int m = 0; m < topk_mutations; ++m) mutate(*topk_targets[in.ConsumeIntegralInRange<int>(0, 2)]);
    if (in.ConsumeProbability<float>() < 0.02f) t.struct_size = in.ConsumeIntegral<uint32_t>();
    const bool null_topk = in.ConsumeProbability<float>() < 0.03f;
    const dsa_tensor* args[] = {nulls & 1 ? nullptr : &q, nulls & 2 ? nullptr : &k, nulls & 4 ? nullptr : &w,
                                nulls & 8 ? nullptr : &indices};
    const dsa_options* opt = nulls & 16 ? nullptr : &o;
    if (in.ConsumeBool()) {
      s = dsa_indexer_topk(args[0], args[1], args[2], args[3], opt, null_topk ? nullptr : &t, nullptr);
    } else {
      size_t bytes = 0;
      s = dsa_indexer_topk_workspace_size(args[0], args[1], args[2], args[3], opt, null_topk ? nullptr : &t,
                                          in.ConsumeProbability<float>() < 0.03f ? nullptr : &bytes);
    }
  }

  const char* msg = dsa_last_error();
  const int code = static_cast<int>(s);
  if (code < 0 || code > 6) {
    std::fprintf(stderr, "fuzz_c_api: status %d is not a dsa_status\n", code);
    std::abort();
  }
  ++g_status_count[code];
  if (s == DSA_STATUS_INTERNAL_ERROR) {
    std::fprintf(stderr, "fuzz_c_api: INTERNAL_ERROR: %s\n", msg);
    std::abort();
  }
  if (s == DSA_STATUS_OK ? msg[0] != '\0' : msg[0] == '\0') {
    std::fprintf(stderr, "fuzz_c_api: status %s with last error '%s'\n", dsa_status_name(s), msg);
    std::abort();
  }
  if ((s == DSA_STATUS_INVALID_ARGUMENT || s == DSA_STATUS_UNSUPPORTED_CONFIG) && !std::strstr(msg, "expected")) {
    std::fprintf(stderr, "fuzz_c_api: %s without an expected value: %s\n", dsa_status_name(s), msg);
    std::abort();
  }
  return 0;
}
