// The top-k selection kernel (templates/sm90_topk_select.cuh) against the CPU oracle
// (tests/support/topk_reference.hpp): fresh random rows, constructed ties, short and empty
// rows, -inf / NaN / signed-zero cells, every k of the contract's test list, three launch
// shapes (no row cache, a partial cache, the largest cache), poisoned outputs, the same bits
// run to run. The candidate-list kernel (templates/sm90_topk_candidates.cuh) against the
// select kernel on the same rows, bit for bit. Compiled with the library's NVRTC wrapper and
// launched with its driver wrapper.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/topk_reference.hpp"
#include "cuda/driver.hpp"
#include "gpu_runner.hpp"
#include "cuda/launch.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "sm90_topk_candidates_args.cuh"
#include "sm90_topk_select_args.cuh"

namespace dd = dsa_indexer::detail;
using dsa_support::DeviceBuffer;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// A launch shape: threads per CTA and bytes of row cache (kept per row in shared memory).
struct TopkShape {
  int threads;
  uint32_t cache_bytes;  // UINT32_MAX: the most the device allows
  bool short_rows = false;  // sm90_topk_select_short<threads, words> (rows of at most words x 1024 cells; no cache)
  uint32_t grid = 0;        // CTAs (rows are strided over them); 0: one per row
  int words = 4;            // the short-row kernel's words a thread (4 or 8)
  // the register rows: sm90_topk_select_short<threads> (the rows of at most 4 words a thread),
  // then sm90_topk_select<threads, true> (the others), no cache
  bool regs = false;
  // with regs at 512 threads: the narrow register rows, sm90_topk_select_short<256> first, then
  // sm90_topk_select_short<512> skipping the rows it took (TopkSelectArgs::skip_words)
  bool narrow = false;
};

class TopkModule {
 public:
  static TopkModule& get() {
    static TopkModule m;
    return m;
  }
  CUfunction function(int threads) const { return threads == 256 ? f_[0] : threads == 512 ? f_[1] : f_[2]; }
  CUfunction short_function(int words) const { return words == 4 ? f_[3] : f_[4]; }
  // the register rows' launches at `threads`: the short-row kernel, then the general one
  CUfunction regs_short(int threads) const { return threads == 256 ? f_[3] : f_[7]; }
  CUfunction regs_general(int threads) const { return threads == 256 ? f_[5] : f_[6]; }
  uint32_t max_dynamic_smem() const { return max_dyn_; }
  CUfunction fill() const { return fill_; }

 private:
  TopkModule() {
    const std::vector<std::string> names = {"dsa::sm90_topk_select<256>", "dsa::sm90_topk_select<512>",
                                            "dsa::sm90_topk_select<1024>", "dsa::sm90_topk_select_short<256>",
                                            "dsa::sm90_topk_select_short<256, 8>", "dsa::sm90_topk_select<256, true>",
                                            "dsa::sm90_topk_select<512, true>", "dsa::sm90_topk_select_short<512>"};
    // A hash-based fill for the timing rows: 2 GiB of scores without a host upload.
    const std::string src =
        "#include \"sm90_topk_select.cuh\"\n"
        "extern \"C\" __global__ void topk_test_fill(float* p, long long n, unsigned seed) {\n"
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
        "    unsigned h = (unsigned)i * 0x9e3779b1u ^ seed ^ (unsigned)(i >> 32) * 0x85ebca6bu;\n"
        "    float acc = 0.0f;\n"
        "    for (int r = 0; r < 3; ++r) { h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;\n"
        "      acc += (float)(h >> 8) * (1.0f / 16777216.0f); }\n"
        "    p[i] = (acc - 1.5f) * 4.0f;\n"
        "  }\n"
        "}\n";
    std::vector<std::string> all = names;
    all.push_back("topk_test_fill");
    dd::CompileOutput out = dd::nvrtc_compile({"topk_select_test.cu", src, all, dd::compile_options("sm_90a"), nullptr});
    dd::ScopedContext ctx(0);
    auto& d = dd::Driver::get();
    DSA_CU(cuModuleLoadData(&mod_, out.cubin.data()));
    int static_smem = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      DSA_CU(cuModuleGetFunction(&f_[i], mod_, out.lowered_names[i].c_str()));
      int s = 0;
      d.check(d.cuFuncGetAttribute(&s, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f_[i]), "cuFuncGetAttribute");
      static_smem = std::max(static_smem, s);
    }
    DSA_CU(cuModuleGetFunction(&fill_, mod_, out.lowered_names[names.size()].c_str()));
    const int optin = dd::device_info(0).max_smem_optin;
    max_dyn_ = static_cast<uint32_t>(optin - static_smem) / 16u * 16u;
    for (int i : {0, 1, 2, 5, 6})  // the general kernels (a row cache past 48 KB)
      d.check(d.cuFuncSetAttribute(f_[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(max_dyn_)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  CUmodule mod_ = nullptr;
  CUfunction f_[8] = {};
  CUfunction fill_ = nullptr;
  uint32_t max_dyn_ = 0;
};

void launch_topk(const dsa::TopkSelectArgs& a, const TopkShape& sh, CUstream stream = nullptr) {
  const TopkModule& m = TopkModule::get();
  dd::KernelLaunch l;
  l.grid[0] = static_cast<uint32_t>(std::min<int64_t>(a.n_rows, sh.grid != 0 ? sh.grid : 1 << 30));
  l.block[0] = static_cast<uint32_t>(sh.threads);
  const uint32_t cache = sh.cache_bytes == UINT32_MAX ? m.max_dynamic_smem() - dsa::kTopkFixedSmemBytes : sh.cache_bytes;
  l.smem = sh.short_rows ? static_cast<uint32_t>(dsa::kTopkShortSmemBytes) : dsa::kTopkFixedSmemBytes + cache / 16u * 16u;
  dsa::TopkSelectArgs copy = a;
  void* params[] = {&copy};
  dd::ScopedContext ctx(0);
  if (a.n_rows > 0 && sh.regs) {
    dd::KernelLaunch s = l;
    s.smem = static_cast<uint32_t>(dsa::kTopkShortSmemBytes);
    if (sh.narrow) {
      dd::KernelLaunch n = s;
      n.block[0] = 256;
      n.grid[0] = static_cast<uint32_t>(std::min<int64_t>(a.n_rows, 1 << 30));
      dd::launch_one(m.regs_short(256), n, stream, params, "sm90_topk_select_short<256>");
      copy.skip_words = dsa::kTopkShortCells / 4;
    }
    dd::launch_one(m.regs_short(sh.threads), s, stream, params, "sm90_topk_select_short");
    copy.skip_words = 0;
    l.smem = static_cast<uint32_t>(dsa::kTopkFixedSmemBytes);
    dd::launch_one(m.regs_general(sh.threads), l, stream, params, "sm90_topk_select<T, true>");
  } else if (a.n_rows > 0)
    dd::launch_one(sh.short_rows ? m.short_function(sh.words) : m.function(sh.threads), l, stream, params, "sm90_topk_select");
}

struct HostCase {
  int k = 1;
  int64_t ld = 0;
  std::vector<dsa::TopkRow> rows;
  std::vector<float> scores;  // rows.size() x ld
};

struct GpuOut {
  std::vector<int32_t> indices;
  std::vector<float> values, softmax, lse;
};

// Uploads, poisons every output, runs, downloads.
struct DeviceCase {
  DeviceBuffer scores, rows, indices, values, softmax, lse;
  dsa::TopkSelectArgs args{};
  int64_t n_rows = 0;
  int k = 0;

  explicit DeviceCase(const HostCase& c) : n_rows(static_cast<int64_t>(c.rows.size())), k(c.k) {
    scores = DeviceBuffer(c.scores.size() * 4);
    scores.upload(c.scores.data(), c.scores.size() * 4);
    rows = DeviceBuffer(c.rows.size() * sizeof(dsa::TopkRow));
    rows.upload(c.rows.data(), c.rows.size() * sizeof(dsa::TopkRow));
    const size_t slots = static_cast<size_t>(n_rows) * static_cast<size_t>(k);
    indices = DeviceBuffer(slots * 4);
    values = DeviceBuffer(slots * 4);
    softmax = DeviceBuffer(slots * 4);
    lse = DeviceBuffer(static_cast<size_t>(n_rows) * 4);
    args.scores = static_cast<const float*>(scores.get());
    args.ld = c.ld;
    args.rows = static_cast<const dsa::TopkRow*>(rows.get());
    args.n_rows = n_rows;
    args.k = k;
    args.indices = static_cast<int32_t*>(indices.get());
    args.indices_ld = k;
    args.values = static_cast<float*>(values.get());
    args.values_ld = k;
    args.softmax = static_cast<float*>(softmax.get());
    args.softmax_ld = k;
    args.lse = static_cast<float*>(lse.get());
    args.lse_stride = 1;
  }

  GpuOut run(bool sort_by_score, const TopkShape& sh) {
    for (DeviceBuffer* b : {&indices, &values, &softmax, &lse}) b->fill_u32(dsa_support::kPoison);
    args.sort_by_score = sort_by_score ? 1 : 0;
    launch_topk(args, sh);
    dsa_support::sync_device();
    GpuOut o;
    const size_t slots = static_cast<size_t>(n_rows) * static_cast<size_t>(k);
    o.indices.resize(slots);
    o.values.resize(slots);
    o.softmax.resize(slots);
    o.lse.resize(static_cast<size_t>(n_rows));
    indices.download(o.indices.data(), slots * 4);
    values.download(o.values.data(), slots * 4);
    softmax.download(o.softmax.data(), slots * 4);
    lse.download(o.lse.data(), o.lse.size() * 4);
    return o;
  }
};

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// Every output of a bit for bit equal to b's.
void check_same_bits(const GpuOut& a, const GpuOut& b) {
  CHECK(a.indices == b.indices);
  CHECK(bits_equal(a.values, b.values));
  CHECK(bits_equal(a.softmax, b.softmax));
  CHECK(bits_equal(a.lse, b.lse));
}

// Every slot of every row against the oracle; returns the number of mismatching rows and
// describes the first one.
int64_t compare(const HostCase& c, const std::vector<dsa_test::TopkRefResult>& ref, const GpuOut& g, std::string* first) {
  int64_t bad_rows = 0;
  const size_t k = static_cast<size_t>(c.k);
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const auto& want = ref[r];
    std::string why;
    for (size_t i = 0; i < k && why.empty(); ++i) {
      const size_t at = r * k + i;
      if (g.indices[at] != want.indices[i])
        why = fmt::format("slot {}: index {} want {}", i, g.indices[at], want.indices[i]);
      else if (dsa_test::topk_bits(g.values[at]) != dsa_test::topk_bits(want.values[i]))
        why = fmt::format("slot {}: value {:#x} want {:#x}", i, dsa_test::topk_bits(g.values[at]), dsa_test::topk_bits(want.values[i]));
      else if (!dsa_test::topk_close(g.softmax[at], want.softmax[i], 1e-6))
        why = fmt::format("slot {}: softmax {:.9g} want {:.9g}", i, g.softmax[at], want.softmax[i]);
    }
    // lse: the fp32 log of a sum is held to 1e-6 of max(1, |lse|) (a row whose lse is near 0
    // cancels m against log(sum); the absolute error is what the arithmetic bounds).
    const float gl = g.lse[r], wl = want.lse;
    const bool lse_ok = std::isnan(wl) ? std::isnan(gl)
                        : std::isinf(wl) || std::isinf(gl)
                            ? gl == wl
                            : std::fabs(static_cast<double>(gl) - wl) <= 1e-6 * std::max(1.0, std::fabs(static_cast<double>(wl)));
    if (why.empty() && !lse_ok) why = fmt::format("lse {:.9g} want {:.9g}", gl, wl);
    if (!why.empty()) {
      if (bad_rows == 0 && first)
        *first = fmt::format("row {} [lo {}, hi {}) bias {}: {}", r, c.rows[r].lo, c.rows[r].hi, c.rows[r].bias, why);
      ++bad_rows;
    }
  }
  return bad_rows;
}

enum class RowKind { random, quantized, two_values, all_equal, neg_inf_sprinkled, nan_sprinkled, all_neg_inf, concentrated, signed_zeros, specials, count };

// A visible cell of a row of `kind`: x is a fresh normal draw, a and b the row's two values.
float kind_value(RowKind kind, float x, float a, float b, std::uniform_real_distribution<float>& ud, std::mt19937& rng) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  switch (kind) {
    case RowKind::random: break;
    case RowKind::quantized: x = std::round(x * 2.0f) * 0.5f; break;
    case RowKind::two_values: x = ud(rng) < 0.3f ? a : b; break;
    case RowKind::all_equal: x = a; break;
    case RowKind::neg_inf_sprinkled: if (ud(rng) < 0.4f) x = -kInf; break;
    case RowKind::nan_sprinkled: if (ud(rng) < 0.001f) x = ud(rng) < 0.5f ? qnan : -qnan; break;
    case RowKind::all_neg_inf: x = -kInf; break;
    case RowKind::concentrated: x = 12.0f + 1.99f * ud(rng); break;  // one top-level bin
    case RowKind::signed_zeros: x = ud(rng) < 0.5f ? (ud(rng) < 0.5f ? 0.0f : -0.0f) : x; break;
    case RowKind::specials: {  // few distinct keys: +-inf, +-0, +-1, a, now and then a NaN
      const float v[] = {kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f, a};
      x = ud(rng) < 0.002f ? (ud(rng) < 0.5f ? qnan : -qnan) : v[static_cast<int>(ud(rng) * 6.999f)];
      break;
    }
    default: break;
  }
  return x;
}

// c.rows and c.scores (c.ld set) for rows of the given lengths and kinds: lo unaligned (0..7)
// unless `lo0` (BSHD's causal windows), a random bias; cells outside a row's window are NaN or
// +inf so that a read outside [lo, hi) would be selected.
void fill_rows(HostCase& c, const std::vector<int32_t>& lens, const std::vector<RowKind>& kinds, std::mt19937& rng,
               bool lo0 = false) {
  const size_t n_rows = lens.size();
  c.scores.resize(n_rows * static_cast<size_t>(c.ld));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> lo_d(0, 7), bias_d(-1000, 1000000);
  for (size_t r = 0; r < n_rows; ++r) {
    dsa::TopkRow row{};
    row.lo = lo0 ? 0 : lo_d(rng);
    row.hi = row.lo + lens[r];
    row.bias = bias_d(rng);
    c.rows.push_back(row);
    float* p = c.scores.data() + r * static_cast<size_t>(c.ld);
    const float a = nd(rng), b = nd(rng);
    for (int64_t j = 0; j < c.ld; ++j) {
      if (j < row.lo || j >= row.hi) {
        p[j] = (j & 1) ? kInf : std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      p[j] = kind_value(kinds[r], nd(rng), a, b, ud, rng);
    }
  }
}

// Rows of every kind and of lengths 0..131072 (the k boundary, word and tile boundaries,
// log-uniform random).
HostCase make_case(int k, std::mt19937& rng) {
  HostCase c;
  c.k = k;
  constexpr int32_t kMaxLen = 131072;
  c.ld = kMaxLen + 8 + 3;  // odd: the alignment of column lo changes from row to row
  std::vector<int32_t> lens = {0, 1, 2, 3, 4, 5, 31, std::max(k - 1, 0), k, k + 1, 4095, 4096, 4097, 16384, 47000, 65536, 100003, kMaxLen};
  std::uniform_real_distribution<double> logu(0.0, std::log(static_cast<double>(kMaxLen)));
  for (int i = 0; i < 10; ++i) lens.push_back(static_cast<int32_t>(std::exp(logu(rng))));
  // every special kind at a long row (several radix passes, the candidate buffer overflows)
  // and at a medium one
  const int n_special = static_cast<int>(RowKind::count) - 1;
  std::vector<RowKind> kinds(lens.size(), RowKind::random);
  for (int s = 1; s <= n_special; ++s) {
    lens.push_back(kMaxLen - 5 * s);
    kinds.push_back(static_cast<RowKind>(s));
    lens.push_back(3000 + 977 * s);
    kinds.push_back(static_cast<RowKind>(s));
  }
  // random kinds for the random lengths
  std::uniform_int_distribution<int> kind_d(0, n_special);
  for (size_t i = 18; i < 28 && i < kinds.size(); ++i) kinds[i] = static_cast<RowKind>(kind_d(rng));

  fill_rows(c, lens, kinds, rng);
  return c;
}

const TopkShape kShapes[] = {{256, 0}, {512, 65536}, {1024, UINT32_MAX}};

// The oracle's selection of every row of c.
std::vector<dsa_test::TopkRefResult> reference_rows(const HostCase& c, int k, bool sort) {
  std::vector<dsa_test::TopkRefResult> ref;
  for (size_t r = 0; r < c.rows.size(); ++r)
    ref.push_back(dsa_test::topk_reference(c.scores.data() + r * static_cast<size_t>(c.ld), c.rows[r].lo, c.rows[r].hi,
                                           c.rows[r].bias, k, sort));
  return ref;
}

// f(c, dc, k, sort, ref) for make_case's rows (a fresh seed, printed as `what`) at every k, in
// both slot orders, with the oracle's selection ref.
template <class F>
void for_each_make_case(const char* what, F&& f) {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int k : {1, 7, 64, 512, 2048}) {
    const HostCase c = make_case(k, rng);
    DeviceCase dc(c);
    for (bool sort : {false, true}) f(c, dc, k, sort, reference_rows(c, k, sort));
  }
  std::printf("topk_select: %s passed (seed %u)\n", what, seed);
}

}  // namespace

TEST_CASE("topk select: exact against the CPU oracle, every k, both orders, three launch shapes", "[topk_select]") {
  for_each_make_case("oracle cases", [](const HostCase& c, DeviceCase& dc, int k, bool sort, const std::vector<dsa_test::TopkRefResult>& ref) {
    GpuOut first_shape;
    for (const TopkShape& sh : kShapes) {
      INFO(fmt::format("k {} sort_by_score {} threads {} cache {}", k, sort, sh.threads, sh.cache_bytes));
      const GpuOut g = dc.run(sort, sh);
      std::string why;
      const int64_t bad = compare(c, ref, g, &why);
      INFO(why);
      CHECK(bad == 0);
      check_same_bits(dc.run(sort, sh), g);
      // the launch shape changes only the order of the fp64 sums: the selection is the same
      if (first_shape.indices.empty()) {
        first_shape = g;
      } else {
        CHECK(g.indices == first_shape.indices);
        CHECK(bits_equal(g.values, first_shape.values));
      }
    }
  });
}

// The short-row kernels (rows of at most 4096 cells in registers, 4 words a thread; and of 8192,
// 8 words) against the oracle and bit for bit against sm90_topk_select<256> (indices, values,
// softmax, lse): rows of every kind and of lengths around k and the word and tile boundaries, in
// rows of words x 1024 floats (16-byte aligned; a row may span the whole width) and of 3 fewer
// (every alignment).
TEST_CASE("topk select: the short-row kernel, bitwise the general one", "[topk_select][topk_short]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const int n_special = static_cast<int>(RowKind::count) - 1;
  for (int words : {4, 8})
  for (int64_t ld : {int64_t(words) * 1024, int64_t(words) * 1024 - 3}) {
    for (int k : {1, 7, 64, 512, 2048}) {
      HostCase c;
      c.k = k;
      c.ld = ld;
      const int32_t top = static_cast<int32_t>(ld) - 7;  // lo is 0..7
      std::vector<int32_t> lens = {0, 1, 3, 4, 5, 31, 255, 256, 257, 1023, 1024, 1025, std::max(k - 1, 0), k, k + 1,
                                   std::min(4095, top), std::min(4096, top), std::min(4097, top), top};
      std::vector<RowKind> kinds(lens.size(), RowKind::random);
      std::uniform_int_distribution<int32_t> len_d(0, top);
      for (int s = 1; s <= n_special; ++s)
        for (int32_t len : {std::min(k + 1 + 37 * s, top), len_d(rng), top}) {
          lens.push_back(len);
          kinds.push_back(static_cast<RowKind>(s));
        }
      for (int i = 0; i < 24; ++i) {
        lens.push_back(len_d(rng));
        kinds.push_back(RowKind::random);
      }
      fill_rows(c, lens, kinds, rng);
      if (ld % 4 == 0) {  // rows from column 0 up to the whole width
        for (size_t r = 0; r < c.rows.size(); r += 3) {
          dsa::TopkRow& row = c.rows[r];
          const int32_t n = row.hi - row.lo;
          row.lo = 0;
          row.hi = r % 2 ? n : static_cast<int32_t>(ld);
          float* p = c.scores.data() + r * static_cast<size_t>(ld);
          std::normal_distribution<float> nd(0.0f, 3.0f);
          for (int32_t j = 0; j < row.hi; ++j) p[j] = nd(rng);
          for (int32_t j = row.hi; j < ld; ++j) p[j] = std::numeric_limits<float>::quiet_NaN();
        }
      }
      DeviceCase dc(c);
      for (bool sort : {false, true}) {
        INFO(fmt::format("words {} ld {} k {} sort_by_score {}", words, ld, k, sort));
        const std::vector<dsa_test::TopkRefResult> ref = reference_rows(c, k, sort);
        const GpuOut general = dc.run(sort, {256, 0});
        const GpuOut g = dc.run(sort, {256, 0, true, 0, words});
        std::string why;
        const int64_t bad = compare(c, ref, g, &why);
        INFO(why);
        CHECK(bad == 0);
        check_same_bits(g, general);
        // 7 CTAs: each strides over rows (the next row's window loaded ahead, the histograms
        // reused), the same bits
        check_same_bits(dc.run(sort, {256, 0, true, 7, words}), g);
      }
    }
  }
  std::printf("topk_select: short-row kernel passed (seed %u)\n", seed);
}

// The register rows (two launches: sm90_topk_select_short<T> takes the rows of at most 4 words a
// thread, sm90_topk_select<T, true> the others) against the oracle and bit for bit against
// sm90_topk_select<T> alone, at 256 and 512 threads: make_case's rows (every kind, 0..131072
// cells, every alignment), one CTA per row and 7 striding CTAs; every row written (the outputs
// start poisoned).
TEST_CASE("topk select: the register rows, bitwise the general kernel", "[topk_select][topk_short][topk_regs]") {
  for_each_make_case("register rows", [](const HostCase& c, DeviceCase& dc, int k, bool sort, const std::vector<dsa_test::TopkRefResult>& ref) {
    for (int threads : {256, 512}) {
      INFO(fmt::format("k {} sort_by_score {} threads {}", k, sort, threads));
      const GpuOut general = dc.run(sort, {threads, 0});
      for (uint32_t grid : {0u, 7u}) {
        TopkShape sh{threads, 0};
        sh.regs = true;
        sh.grid = grid;
        const GpuOut g = dc.run(sort, sh);
        std::string why;
        const int64_t bad = compare(c, ref, g, &why);
        INFO(why);
        CHECK(bad == 0);
        check_same_bits(g, general);
        if (threads != 512) continue;
        // the narrow register rows: the rows of at most 1024 words (their alignment included) by
        // 256 threads, so their softmax and lse follow that block size (within the oracle's
        // tolerance); indices and values are bitwise the general kernel's
        sh.narrow = true;
        const GpuOut n = dc.run(sort, sh);
        std::string why_n;
        const int64_t bad_n = compare(c, ref, n, &why_n);
        INFO("narrow: " << why_n);
        CHECK(bad_n == 0);
        CHECK(n.indices == general.indices);
        CHECK(bits_equal(n.values, general.values));
      }
    }
  });
}

TEST_CASE("topk select: optional outputs absent, strided outputs", "[topk_select]") {
  std::mt19937 rng(std::random_device{}());
  HostCase c = make_case(64, rng);
  DeviceCase dc(c);
  // indices only, into a strided buffer: the untouched gap keeps its poison
  const int64_t ld = 64 + 5;
  DeviceBuffer idx(static_cast<size_t>(dc.n_rows * ld) * 4);
  idx.fill_u32(dsa_support::kPoison);
  dsa::TopkSelectArgs a = dc.args;
  a.indices = static_cast<int32_t*>(idx.get());
  a.indices_ld = ld;
  a.values = nullptr;
  a.softmax = nullptr;
  a.lse = nullptr;
  a.sort_by_score = 0;
  launch_topk(a, kShapes[1]);
  dsa_support::sync_device();
  std::vector<int32_t> got(static_cast<size_t>(dc.n_rows * ld));
  idx.download(got.data(), got.size() * 4);
  int64_t bad = 0;
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const auto ref = dsa_test::topk_reference(c.scores.data() + r * c.ld, c.rows[r].lo, c.rows[r].hi, c.rows[r].bias, 64, false);
    for (int64_t i = 0; i < ld; ++i) {
      const int32_t g = got[r * ld + i];
      if (i < 64 ? g != ref.indices[static_cast<size_t>(i)] : static_cast<uint32_t>(g) != dsa_support::kPoison) ++bad;
    }
  }
  CHECK(bad == 0);
}

// Timing on the shapes of the table (scores from a hash fill; k = 2048): median of 20
// calls per launch shape, plus a spot check of a few rows against the oracle.
TEST_CASE("topk select: timing", "[topk_bench]") {
  struct BenchShape {
    const char* name;
    int64_t rows, cols;
    int k;
    int32_t (*hi)(int64_t i, int64_t cols);
  };
  const BenchShape shapes[] = {
      {"8192 x 65536, row i sees [0, 57344 + i)", 8192, 65536, 2048, [](int64_t i, int64_t) { return static_cast<int32_t>(57344 + i); }},
      {"4096 x 131072, row i sees [0, 126976 + i)", 4096, 131072, 2048, [](int64_t i, int64_t) { return static_cast<int32_t>(126976 + i); }},
      {"16384 x 4096 (ratio 4), row i sees [0, i / 4 + 1)", 16384, 4096, 2048, [](int64_t i, int64_t) { return static_cast<int32_t>(i / 4 + 1); }},
      {"16384 x 4096, full rows, k 512", 16384, 4096, 512, [](int64_t, int64_t c) { return static_cast<int32_t>(c); }},
  };
  const TopkShape bench_shapes[] = {{1024, 0}, {512, 0}, {256, 0}, {1024, UINT32_MAX}};
  TopkModule& m = TopkModule::get();
  dd::ScopedContext ctx(0);
  auto& d = dd::Driver::get();
  for (const auto& s : shapes) {
    const size_t cells = static_cast<size_t>(s.rows * s.cols);
    DeviceBuffer scores(cells * 4);
    {
      dd::KernelLaunch l;
      l.grid[0] = 132 * 8;
      l.block[0] = 256;
      void* p = scores.get();
      long long n = static_cast<long long>(cells);
      unsigned seed = 12345u;
      void* params[] = {&p, &n, &seed};
      dd::launch_one(m.fill(), l, nullptr, params, "topk_test_fill");
    }
    std::vector<dsa::TopkRow> rows(static_cast<size_t>(s.rows));
    for (int64_t i = 0; i < s.rows; ++i) rows[static_cast<size_t>(i)] = {0, std::min<int32_t>(s.hi(i, s.cols), static_cast<int32_t>(s.cols)), 0, 0};
    DeviceBuffer drows(rows.size() * sizeof(dsa::TopkRow));
    drows.upload(rows.data(), rows.size() * sizeof(dsa::TopkRow));
    DeviceBuffer idx(static_cast<size_t>(s.rows) * static_cast<size_t>(s.k) * 4);
    DeviceBuffer val(static_cast<size_t>(s.rows) * static_cast<size_t>(s.k) * 4);
    dsa::TopkSelectArgs a{};
    a.scores = static_cast<const float*>(scores.get());
    a.ld = s.cols;
    a.rows = static_cast<const dsa::TopkRow*>(drows.get());
    a.n_rows = s.rows;
    a.k = s.k;
    a.indices = static_cast<int32_t*>(idx.get());
    a.indices_ld = s.k;
    a.values = static_cast<float*>(val.get());
    a.values_ld = s.k;
    CUevent e0, e1;
    DSA_CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    DSA_CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (const TopkShape& sh : bench_shapes) {
      std::vector<float> ms;
      launch_topk(a, sh);  // warm
      for (int it = 0; it < 20; ++it) {
        DSA_CU(cuEventRecord(e0, nullptr));
        launch_topk(a, sh);
        DSA_CU(cuEventRecord(e1, nullptr));
        DSA_CU(cuEventSynchronize(e1));
        float t = 0.0f;
        DSA_CU(cuEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      std::printf("topk_bench %-52s k %4d threads %4d cache %6u B: median %.3f ms (min %.3f, max %.3f)\n", s.name, s.k,
                  sh.threads, sh.cache_bytes == UINT32_MAX ? m.max_dynamic_smem() - dsa::kTopkFixedSmemBytes : sh.cache_bytes,
                  ms[10], ms.front(), ms.back());
      // spot check: the first, a middle and the last row against the oracle
      std::vector<int32_t> got(static_cast<size_t>(s.rows * s.k));
      idx.download(got.data(), got.size() * 4);
      for (int64_t r : {int64_t{0}, s.rows / 2 + 1, s.rows - 1}) {
        std::vector<float> host(static_cast<size_t>(s.cols));
        d.check(d.cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(scores.get()) + static_cast<size_t>(r * s.cols) * 4, host.size() * 4),
                "cuMemcpyDtoH");
        const auto ref = dsa_test::topk_reference(host.data(), rows[static_cast<size_t>(r)].lo, rows[static_cast<size_t>(r)].hi, 0, s.k, false);
        INFO(s.name << " row " << r);
        CHECK(std::equal(ref.indices.begin(), ref.indices.end(), got.begin() + r * s.k));
      }
    }
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
  }
}

namespace {

// The candidate-list kernel in a module of its own: both block sizes, dynamic shared memory up
// to the size that stages every list.
class TopkCandModule {
 public:
  static TopkCandModule& get() {
    static TopkCandModule m;
    return m;
  }
  CUfunction function(int threads) const { return threads == 256 ? f_[0] : f_[1]; }

 private:
  TopkCandModule() {
    const std::vector<std::string> names = {"dsa::sm90_topk_candidates<256>", "dsa::sm90_topk_candidates<512>"};
    dd::CompileOutput out = dd::nvrtc_compile(
        {"topk_candidates_test.cu", "#include \"sm90_topk_candidates.cuh\"\n", names, dd::compile_options("sm_90a"), nullptr});
    dd::ScopedContext ctx(0);
    auto& d = dd::Driver::get();
    DSA_CU(cuModuleLoadData(&mod_, out.cubin.data()));
    for (int i = 0; i < 2; ++i) {
      DSA_CU(cuModuleGetFunction(&f_[i], mod_, out.lowered_names[static_cast<size_t>(i)].c_str()));
      d.check(d.cuFuncSetAttribute(f_[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dsa::kTopkCandSmemBytes),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
  }
  CUmodule mod_ = nullptr;
  CUfunction f_[2] = {};
};

// stage_bytes: dynamic shared memory past the fixed part (a list longer than stage_bytes / 8 is
// read from global memory); grid 0: one CTA per row, else rows strided over `grid` CTAs.
void launch_topk_candidates(const dsa::TopkCandArgs& a, int threads, uint32_t stage_bytes, uint32_t grid) {
  const TopkCandModule& m = TopkCandModule::get();
  dd::KernelLaunch l;
  l.grid[0] = grid != 0 ? grid : static_cast<uint32_t>(std::min<int64_t>(a.n_rows, 1 << 30));
  l.block[0] = static_cast<uint32_t>(threads);
  l.smem = static_cast<uint32_t>(dsa::kTopkCandFixedSmemBytes) + stage_bytes;
  dsa::TopkCandArgs copy = a;
  void* params[] = {&copy};
  dd::ScopedContext ctx(0);
  if (a.n_rows > 0) dd::launch_one(m.function(threads), l, nullptr, params, "sm90_topk_candidates");
}

// Rows for the candidate lists: every kind at a short row (fewer than k cells where k > 1), a
// medium one and one of exactly kTopkCandMaxLd cells, the k and list-size boundaries, a few
// rows longer than a list.
HostCase make_cand_case(int k, std::mt19937& rng) {
  HostCase c;
  c.k = k;
  constexpr int32_t kMaxLen = 40000;
  constexpr int32_t kCap = dsa::kTopkCandMaxLd;
  c.ld = kMaxLen + 8 + 3;
  std::vector<int32_t> lens = {0, 1, 2, 3, 5, 31, std::max(k - 1, 0), k, k + 1, 2 * k + 3, 2047, 2048, 2049, 4096,
                               kCap - 1, kCap, kCap + 1, 20000, kMaxLen};
  std::vector<RowKind> kinds(lens.size(), RowKind::random);
  std::uniform_int_distribution<int32_t> short_d(1, std::max(k - 1, 1)), medium_d(k, kCap);
  for (int s = 0; s < static_cast<int>(RowKind::count); ++s) {
    for (int32_t len : {short_d(rng), medium_d(rng), kCap}) {
      lens.push_back(len);
      kinds.push_back(static_cast<RowKind>(s));
    }
  }
  for (size_t i = 17; i < 19; ++i) kinds[i] = RowKind::quantized;  // long rows with ties
  fill_rows(c, lens, kinds, rng);
  return c;
}

// What the producer's list of a row holds, besides the row's top-k.
enum class ListMode { every_cell, top_k_and_some, top_k_only };

struct CandLists {
  int64_t ld = dsa::kTopkCandMaxLd;
  std::vector<uint64_t> cand;  // rows x ld
  std::vector<int32_t> count;
};

uint64_t topk_composite(float x, int32_t col) {
  return (static_cast<uint64_t>(dsa_test::topk_key(x)) << 32) | (0xffffffffu - static_cast<uint32_t>(col));
}

// The lists of c's rows, shuffled: every cell (a row longer than a list: its top-k and as many
// other cells as fit), the top-k and a random subset of the others, or the top-k alone. Entries
// past a list hold the largest composite (a NaN at column 0), so a read past count would be
// selected; a full list's count may exceed ld (the producer counted more than it kept).
CandLists make_lists(const HostCase& c, ListMode mode, std::mt19937& rng) {
  CandLists l;
  const size_t ld = static_cast<size_t>(l.ld);
  l.cand.assign(c.rows.size() * ld, ~uint64_t{0});
  l.count.assign(c.rows.size(), 0);
  std::uniform_int_distribution<int32_t> extra_d(0, 1000);
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const dsa::TopkRow& row = c.rows[r];
    const float* p = c.scores.data() + r * static_cast<size_t>(c.ld);
    std::vector<uint64_t> cells;
    for (int32_t col = row.lo; col < row.hi; ++col) cells.push_back(topk_composite(p[col], col));
    std::sort(cells.begin(), cells.end(), std::greater<uint64_t>());
    const size_t n_top = std::min(cells.size(), static_cast<size_t>(c.k));
    std::vector<uint64_t> list(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(n_top));
    if (mode != ListMode::top_k_only) {
      std::vector<uint64_t> rest(cells.begin() + static_cast<std::ptrdiff_t>(n_top), cells.end());
      std::shuffle(rest.begin(), rest.end(), rng);
      const size_t room = std::min(rest.size(), ld - n_top);
      const size_t m = mode == ListMode::every_cell ? room : std::uniform_int_distribution<size_t>(0, room)(rng);
      list.insert(list.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(m));
    }
    std::shuffle(list.begin(), list.end(), rng);
    std::copy(list.begin(), list.end(), l.cand.begin() + static_cast<std::ptrdiff_t>(r * ld));
    l.count[r] = static_cast<int32_t>(list.size());
    if (list.size() == ld) l.count[r] += extra_d(rng);
  }
  return l;
}

// Uploads the lists (the rows' biases come from the select case's device rows), poisons every
// output (0xAB bytes), runs, downloads.
struct DeviceCandCase {
  DeviceBuffer cand, count, indices, values, softmax;
  dsa::TopkCandArgs args{};
  size_t slots = 0;

  DeviceCandCase(const CandLists& l, const DeviceCase& dc) : slots(static_cast<size_t>(dc.n_rows) * static_cast<size_t>(dc.k)) {
    cand = DeviceBuffer(l.cand.size() * 8);
    cand.upload(l.cand.data(), l.cand.size() * 8);
    count = DeviceBuffer(l.count.size() * 4);
    count.upload(l.count.data(), l.count.size() * 4);
    indices = DeviceBuffer(slots * 4);
    values = DeviceBuffer(slots * 4);
    softmax = DeviceBuffer(slots * 4);
    args.cand = static_cast<const uint64_t*>(cand.get());
    args.cand_ld = l.ld;
    args.count = static_cast<const int32_t*>(count.get());
    args.rows = static_cast<const dsa::TopkRow*>(dc.rows.get());
    args.n_rows = dc.n_rows;
    args.k = dc.k;
    args.indices = static_cast<int32_t*>(indices.get());
    args.indices_ld = dc.k;
    args.values = static_cast<float*>(values.get());
    args.values_ld = dc.k;
    args.softmax = static_cast<float*>(softmax.get());
    args.softmax_ld = dc.k;
  }

  // optional_outputs false: values and softmax are not asked for (their buffers keep the poison).
  // width: TopkCandArgs::width (0: column order by the sort).
  GpuOut run(bool sort_by_score, int threads, uint32_t stage_bytes, uint32_t grid, bool optional_outputs = true,
             int64_t width = 0) {
    for (DeviceBuffer* b : {&indices, &values, &softmax}) b->fill_u32(0xababababu);
    dsa::TopkCandArgs a = args;
    a.sort_by_score = sort_by_score ? 1 : 0;
    a.width = width;
    if (!optional_outputs) {
      a.values = nullptr;
      a.softmax = nullptr;
    }
    launch_topk_candidates(a, threads, stage_bytes, grid);
    dsa_support::sync_device();
    GpuOut o;
    o.indices.resize(slots);
    o.values.resize(slots);
    o.softmax.resize(slots);
    indices.download(o.indices.data(), slots * 4);
    values.download(o.values.data(), slots * 4);
    softmax.download(o.softmax.data(), slots * 4);
    return o;
  }
};

// The first slot where `got` differs from `want` in any bit (empty: none).
std::string first_difference(const GpuOut& want, const GpuOut& got, int k, bool optional_outputs) {
  const size_t ku = static_cast<size_t>(k);
  for (size_t at = 0; at < want.indices.size(); ++at) {
    const uint32_t v = optional_outputs ? dsa_test::topk_bits(want.values[at]) : 0xababababu;
    const uint32_t sm = optional_outputs ? dsa_test::topk_bits(want.softmax[at]) : 0xababababu;
    if (got.indices[at] != want.indices[at] || dsa_test::topk_bits(got.values[at]) != v ||
        dsa_test::topk_bits(got.softmax[at]) != sm)
      return fmt::format("row {} slot {}: index {} value {:#x} softmax {:#x}, want index {} value {:#x} softmax {:#x}",
                         at / ku, at % ku, got.indices[at], dsa_test::topk_bits(got.values[at]),
                         dsa_test::topk_bits(got.softmax[at]), want.indices[at], v, sm);
  }
  return {};
}

}  // namespace

TEST_CASE("topk candidates: bitwise the select kernel's outputs from candidate lists of the same rows", "[topk_select]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  // Every list staged in shared memory; lists of more than 3000 composites read from global
  // memory, with rows strided over 5 CTAs (the per-row reuse of shared memory).
  // Column order by the bitonic sort (width 0) and by the bitmap of columns (width: the rows'
  // ld bounds every column; 1251 bitmap words = 10,008 bytes, which the two launches above
  // hold and a third with 9,000 bytes of staging does not, so it sorts although asked to rank).
  struct CandLaunch {
    uint32_t stage_bytes, grid;
    bool bitmap;
  };
  const CandLaunch launches[] = {{static_cast<uint32_t>(dsa::kTopkCandMaxLd) * 8u, 0u, false},
                                 {static_cast<uint32_t>(dsa::kTopkCandMaxLd) * 8u, 0u, true},
                                 {3000u * 8u, 5u, false},
                                 {3000u * 8u, 5u, true},
                                 {9000u, 3u, true}};
  for (int k : {1, 7, 64, 512, 2048}) {
    const HostCase c = make_cand_case(k, rng);
    DeviceCase dc(c);
    // The select kernel's outputs per (order, T), held to the oracle first.
    GpuOut want[2][2];
    for (int sort = 0; sort < 2; ++sort) {
      const std::vector<dsa_test::TopkRefResult> ref = reference_rows(c, k, sort != 0);
      for (int t = 0; t < 2; ++t) {
        want[sort][t] = dc.run(sort != 0, TopkShape{t == 0 ? 256 : 512, 0});
        std::string why;
        INFO(fmt::format("select: k {} sort_by_score {} threads {}", k, sort, t == 0 ? 256 : 512));
        const int64_t bad = compare(c, ref, want[sort][t], &why);
        INFO(why);
        REQUIRE(bad == 0);
      }
    }
    for (ListMode mode : {ListMode::every_cell, ListMode::top_k_and_some, ListMode::top_k_only}) {
      const CandLists lists = make_lists(c, mode, rng);
      DeviceCandCase dcc(lists, dc);
      for (int sort = 0; sort < 2; ++sort) {
        for (int t = 0; t < 2; ++t) {
          const int threads = t == 0 ? 256 : 512;
          for (const CandLaunch& l : launches) {
            INFO(fmt::format("k {} list mode {} sort_by_score {} threads {} staging {} B grid {} width {}", k,
                             static_cast<int>(mode), sort, threads, l.stage_bytes, l.grid, l.bitmap ? c.ld : 0));
            const GpuOut got = dcc.run(sort != 0, threads, l.stage_bytes, l.grid, true, l.bitmap ? c.ld : 0);
            const std::string why = first_difference(want[sort][t], got, k, true);
            INFO(why);
            REQUIRE(why.empty());
          }
          // indices only: the same indices, values and softmax untouched
          INFO(fmt::format("k {} list mode {} sort_by_score {} threads {}, indices only", k, static_cast<int>(mode), sort, threads));
          const GpuOut got = dcc.run(sort != 0, threads, launches[0].stage_bytes, 0u, false);
          const std::string why = first_difference(want[sort][t], got, k, false);
          INFO(why);
          REQUIRE(why.empty());
        }
      }
    }
  }
  std::printf("topk_candidates: bitwise equal to topk_select (seed %u)\n", seed);
}

// The lane-order lse of BSHD blocks (sm90_topk_lse, templates/sm90_topk_lse.cuh; the unfused
// path's with topk_lse_lanes): rows of every kind, special cells included (NaN: NaN; +inf: +inf;
// -inf cells add nothing; all -inf or empty: -inf), against the CPU oracle's fp64 lse within
// 1e-6 of max(1, |lse|), and the same bits run to run. Rows come in q-tiles of 8 whose windows
// [0, hi) grow, as causal ones do (the replay walks its q-tile's KV tiles, sized by the last row),
// at sample strides 16 and 128; cells past a row's window are NaN or +inf.
TEST_CASE("topk lse: the lane-order replay against the CPU oracle, special cells", "[topk_select][topk_lse]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  HostCase c;
  c.k = 1;
  c.ld = 9000 + 3;
  std::vector<int32_t> lens;
  std::vector<RowKind> kinds;
  std::uniform_int_distribution<int32_t> len_d(0, 9000);
  const int n_kinds = static_cast<int>(RowKind::count);
  for (int tile = 0; tile < 3 * n_kinds; ++tile) {
    std::vector<int32_t> l(8);
    for (int32_t& x : l) x = tile < n_kinds ? len_d(rng) % 700 : len_d(rng);  // short and long rows
    if (tile % 5 == 0) l[0] = 0;                                             // an empty row
    std::sort(l.begin(), l.end());
    for (int i = 0; i < 8; ++i) {
      lens.push_back(l[static_cast<size_t>(i)]);
      kinds.push_back(static_cast<RowKind>((tile + i) % n_kinds));
    }
  }
  fill_rows(c, lens, kinds, rng, /*lo0=*/true);
  const std::string src = "#include \"sm90_topk_lse.cuh\"\n";
  dd::CompileOutput out = dd::nvrtc_compile({"topk_lse_test.cu", src, {"dsa::sm90_topk_lse<8>"}, dd::compile_options("sm_90a"), nullptr});
  dd::ScopedContext ctx(0);
  CUmodule mod = nullptr;
  CUfunction f = nullptr;
  DSA_CU(cuModuleLoadData(&mod, out.cubin.data()));
  DSA_CU(cuModuleGetFunction(&f, mod, out.lowered_names[0].c_str()));
  DeviceCase dc(c);
  for (const int stride : {16, 128}) {
    INFO("sample stride " << stride);
    std::vector<float> runs[2];
    for (std::vector<float>& got : runs) {
      dc.lse.fill_u32(dsa_support::kPoison);
      dsa::TopkLseArgs a{};
      a.scores = dc.args.scores;
      a.ld = c.ld;
      a.rows = dc.args.rows;
      a.n_rows = dc.n_rows;
      a.sample_stride = stride;
      a.lse = static_cast<float*>(dc.lse.get());
      a.lse_stride = 1;
      dd::KernelLaunch l;
      l.grid[0] = static_cast<uint32_t>((dc.n_rows + 7) / 8);
      l.block[0] = 256;
      void* params[] = {&a};
      dd::launch_one(f, l, nullptr, params, "sm90_topk_lse");
      dsa_support::sync_device();
      got.resize(static_cast<size_t>(dc.n_rows));
      dc.lse.download(got.data(), got.size() * 4);
    }
    CHECK(bits_equal(runs[0], runs[1]));
    int64_t bad = 0;
    std::string first;
    for (size_t r = 0; r < c.rows.size(); ++r) {
      const float wl = dsa_test::topk_reference(c.scores.data() + r * static_cast<size_t>(c.ld), c.rows[r].lo, c.rows[r].hi, 0, 1, false).lse;
      const float gl = runs[0][r];
      const bool ok = std::isnan(wl) ? dsa_test::topk_bits(gl) == 0x7fffffffu
                      : std::isinf(wl) || std::isinf(gl)
                          ? gl == wl
                          : std::fabs(static_cast<double>(gl) - wl) <= 1e-6 * std::max(1.0, std::fabs(static_cast<double>(wl)));
      if (!ok && bad++ == 0)
        first = fmt::format("row {} (kind {}, hi {}): lse {:.9g} want {:.9g}", r, static_cast<int>(kinds[r]), c.rows[r].hi, gl, wl);
    }
    INFO(first);
    CHECK(bad == 0);
  }
  DSA_CU(cuModuleUnload(mod));
}

