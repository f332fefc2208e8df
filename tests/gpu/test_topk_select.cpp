// The top-k selection kernel (templates/sm90_topk_select.cuh) against the CPU oracle
// (tests/support/topk_reference.hpp): fresh random rows, constructed ties, short and empty
// rows, -inf / NaN / signed-zero cells, every k of the contract's test list, three launch
// shapes (no row cache, a partial cache, the largest cache), poisoned outputs, the same bits
// run to run. Compiled with the library's NVRTC wrapper and launched with its driver wrapper.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/topk_reference.hpp"
#include "cuda/driver.hpp"
#include "gpu_runner.hpp"
#include "cuda/launch.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "sm90_topk_select_args.cuh"

namespace dd = dsa_indexer::detail;
using dsa_support::DeviceBuffer;

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// A launch shape: threads per CTA and bytes of row cache (kept per row in shared memory).
struct TopkShape {
  int threads;
  uint32_t cache_bytes;  // UINT32_MAX: the most the device allows
};

class TopkModule {
 public:
  static TopkModule& get() {
    static TopkModule m;
    return m;
  }
  CUfunction function(int threads) const { return threads == 256 ? f_[0] : threads == 512 ? f_[1] : f_[2]; }
  uint32_t max_dynamic_smem() const { return max_dyn_; }
  CUfunction fill() const { return fill_; }

 private:
  TopkModule() {
    const std::vector<std::string> names = {"dsa::sm90_topk_select<256>", "dsa::sm90_topk_select<512>",
                                            "dsa::sm90_topk_select<1024>"};
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
    for (int i = 0; i < 3; ++i) {
      DSA_CU(cuModuleGetFunction(&f_[i], mod_, out.lowered_names[static_cast<size_t>(i)].c_str()));
      int s = 0;
      d.check(d.cuFuncGetAttribute(&s, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f_[i]), "cuFuncGetAttribute");
      static_smem = std::max(static_smem, s);
    }
    DSA_CU(cuModuleGetFunction(&fill_, mod_, out.lowered_names[3].c_str()));
    const int optin = dd::device_info(0).max_smem_optin;
    max_dyn_ = static_cast<uint32_t>(optin - static_smem) / 16u * 16u;
    for (int i = 0; i < 3; ++i)
      d.check(d.cuFuncSetAttribute(f_[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(max_dyn_)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  CUmodule mod_ = nullptr;
  CUfunction f_[3] = {};
  CUfunction fill_ = nullptr;
  uint32_t max_dyn_ = 0;
};

void launch_topk(const dsa::TopkSelectArgs& a, const TopkShape& sh, CUstream stream = nullptr) {
  const TopkModule& m = TopkModule::get();
  dd::KernelLaunch l;
  l.grid[0] = static_cast<uint32_t>(std::min<int64_t>(a.n_rows, 1 << 30));
  l.block[0] = static_cast<uint32_t>(sh.threads);
  const uint32_t cache = sh.cache_bytes == UINT32_MAX ? m.max_dynamic_smem() - dsa::kTopkFixedSmemBytes : sh.cache_bytes;
  l.smem = dsa::kTopkFixedSmemBytes + cache / 16u * 16u;
  dsa::TopkSelectArgs copy = a;
  void* params[] = {&copy};
  dd::ScopedContext ctx(0);
  if (a.n_rows > 0) dd::launch_one(m.function(sh.threads), l, stream, params, "sm90_topk_select");
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

enum class RowKind { random, quantized, two_values, all_equal, neg_inf_sprinkled, nan_sprinkled, all_neg_inf, concentrated, signed_zeros, count };

// Rows of every kind and of lengths 0..131072 (the k boundary, word and tile boundaries,
// log-uniform random), lo unaligned; cells outside a row's window are NaN or +inf so that a
// read outside [lo, hi) would be selected.
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

  const size_t n_rows = lens.size();
  c.scores.resize(n_rows * static_cast<size_t>(c.ld));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> lo_d(0, 7), bias_d(-1000, 1000000);
  for (size_t r = 0; r < n_rows; ++r) {
    dsa::TopkRow row{};
    row.lo = lo_d(rng);
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
      float x = nd(rng);
      switch (kinds[r]) {
        case RowKind::random: break;
        case RowKind::quantized: x = std::round(x * 2.0f) * 0.5f; break;
        case RowKind::two_values: x = ud(rng) < 0.3f ? a : b; break;
        case RowKind::all_equal: x = a; break;
        case RowKind::neg_inf_sprinkled: if (ud(rng) < 0.4f) x = -kInf; break;
        case RowKind::nan_sprinkled: if (ud(rng) < 0.001f) x = ud(rng) < 0.5f ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::quiet_NaN(); break;
        case RowKind::all_neg_inf: x = -kInf; break;
        case RowKind::concentrated: x = 12.0f + 1.99f * ud(rng); break;  // one top-level bin
        case RowKind::signed_zeros: x = ud(rng) < 0.5f ? (ud(rng) < 0.5f ? 0.0f : -0.0f) : x; break;
        default: break;
      }
      p[j] = x;
    }
  }
  return c;
}

const TopkShape kShapes[] = {{256, 0}, {512, 65536}, {1024, UINT32_MAX}};

}  // namespace

TEST_CASE("topk select: exact against the CPU oracle, every k, both orders, three launch shapes", "[topk_select]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int k : {1, 7, 64, 512, 2048}) {
    const HostCase c = make_case(k, rng);
    DeviceCase dc(c);
    for (bool sort : {false, true}) {
      std::vector<dsa_test::TopkRefResult> ref;
      for (const auto& row : c.rows)
        ref.push_back(dsa_test::topk_reference(c.scores.data() + (&row - c.rows.data()) * c.ld, row.lo, row.hi, row.bias, k, sort));
      GpuOut first_shape;
      for (const TopkShape& sh : kShapes) {
        INFO(fmt::format("k {} sort_by_score {} threads {} cache {}", k, sort, sh.threads, sh.cache_bytes));
        const GpuOut g = dc.run(sort, sh);
        std::string why;
        const int64_t bad = compare(c, ref, g, &why);
        INFO(why);
        CHECK(bad == 0);
        const GpuOut again = dc.run(sort, sh);
        CHECK(again.indices == g.indices);
        CHECK(bits_equal(again.values, g.values));
        CHECK(bits_equal(again.softmax, g.softmax));
        CHECK(bits_equal(again.lse, g.lse));
        // the launch shape changes only the order of the fp64 sums: the selection is the same
        if (first_shape.indices.empty()) {
          first_shape = g;
        } else {
          CHECK(g.indices == first_shape.indices);
          CHECK(bits_equal(g.values, first_shape.values));
        }
      }
    }
  }
  std::printf("topk_select: oracle cases passed (seed %u)\n", seed);
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
