// The GPU-free parts of `dsa-indexer bench --in e4m3` (tools/cli_fp8.cpp) and of the FP8 GEMM
// ceiling (tools/support): the E4M3 codec and per-row quantization of the bench's inputs, their
// per-row generator, the fp64 oracle on dequantized inputs, the shapes' windows, the sampled rows,
// and the hand-declared cuBLASLt ABI against the toolkit's headers.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cli_fp8.hpp"
#include "cublaslt_abi.hpp"
#include "fp8_inputs.hpp"
#include "host_problem.hpp"

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define DSA_HAVE_CUBLASLT_H 1
#endif

using namespace dsa_support;
namespace f8 = dsa_support::fp8in;

TEST_CASE("fp8 bench: E4M3 codec round trip, ties to even, saturation, never NaN", "[fp8_bench]") {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = f8::decode(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(v));
      continue;
    }
    ++finite;
    INFO(c);
    CHECK(f8::encode(v) == c);  // -0 included (0x80)
  }
  CHECK(finite == 254);
  CHECK(f8::decode(0x7e) == 448.0f);
  CHECK(f8::decode(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(f8::decode(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  // Every midpoint between neighbours of one sign rounds to the one with an even code.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8::decode(static_cast<uint8_t>(c)), hi = f8::decode(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    const int even = c % 2 == 0 ? c : c + 1;
    INFO(c);
    CHECK(f8::encode(mid) == even);
    CHECK(f8::encode(-mid) == (even | 0x80));
    CHECK(f8::encode(std::nextafter(mid, 0.0f)) == c);
    CHECK(f8::encode(std::nextafter(mid, 1000.0f)) == c + 1);
  }
  CHECK(f8::encode(448.0f) == 0x7e);
  CHECK(f8::encode(460.0f) == 0x7e);
  CHECK(f8::encode(1e30f) == 0x7e);
  CHECK(f8::encode(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK((f8::encode(std::numeric_limits<float>::quiet_NaN()) & 0x7f) == 0x7e);
  CHECK(f8::encode(std::ldexp(1.0f, -11)) == 0x00);  // below half the smallest subnormal
}

TEST_CASE("fp8 bench: per-row quantization of bf16 rows", "[fp8_bench]") {
  HostProblem p;
  p.layout = Layout::bshd;
  p.heads = 4;
  p.s_q = 16;
  p.s_k = 24;
  p.ratio = 2;
  f8::fill_random_rows(p, 3);
  const f8::Fp8Inputs f = f8::quantize(p);
  REQUIRE(f.q8.size() == p.q.size());
  REQUIRE(f.q_scale.size() == static_cast<size_t>(16 * 4));
  REQUIRE(f.k_scale.size() == 24u);
  for (size_t r = 0; r < f.q_scale.size(); ++r) {
    float amax = 0, top = 0;
    for (int d = 0; d < 128; ++d) {
      const float x = bf16_to_float(p.q[r * 128 + d]), deq = f8::decode(f.q8[r * 128 + d]) * f.q_scale[r];
      amax = std::max(amax, std::fabs(x));
      top = std::max(top, std::fabs(f8::decode(f.q8[r * 128 + d])));
      // within half an E4M3 step: 2^-4 relative for normals, 2^-10 * scale absolute near zero
      CHECK(std::fabs(deq - x) <= std::max(std::fabs(x) * 0.0625f, std::ldexp(f.q_scale[r], -10)) * 1.0001f);
    }
    CHECK(f.q_scale[r] == std::max(amax, 1e-4f) / 448.0f);
    CHECK(top == 448.0f);
  }
}

TEST_CASE("fp8 bench: the per-row generator keeps fill_random's contract and depends on (seed, row) only", "[fp8_bench]") {
  HostProblem a;
  a.layout = Layout::bshd;
  a.heads = 8;
  a.s_q = 40;
  a.s_k = 20;
  HostProblem b = a, c = a;
  f8::fill_random_rows(a, 7);
  f8::fill_random_rows(b, 7);
  f8::fill_random_rows(c, 8);
  CHECK(a.q == b.q);
  CHECK(a.k == b.k);
  CHECK(a.w_bf16 == b.w_bf16);
  CHECK(a.q != c.q);
  REQUIRE(a.q.size() == static_cast<size_t>(40 * 8 * 128));
  REQUIRE(a.k.size() == static_cast<size_t>(20 * 128));
  for (uint16_t h : a.q) CHECK((h & 0x7fff) != 0);
  for (size_t i = 0; i < a.w_bf16.size(); ++i) CHECK(a.w_f32v[i] == bf16_to_float(a.w_bf16[i]));
  double sum = 0, sq = 0;
  for (uint16_t h : a.q) {
    sum += bf16_to_float(h);
    sq += double(bf16_to_float(h)) * bf16_to_float(h);
  }
  const double n = static_cast<double>(a.q.size()), mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::fabs(mean) < 0.02);
  CHECK(std::fabs(var - 1.0) < 0.03);
  const std::vector<uint8_t> codes = f8::random_codes(1000, 5);
  for (uint8_t x : codes) CHECK((x & 0x7f) != 0x7f);
}

TEST_CASE("fp8 bench: the oracle on dequantized inputs is the contract with the scales inside the ReLU", "[fp8_bench]") {
  HostProblem p = dsa_cli::fp8_bshd(24, 40, 1, true);  // rows end at S_k: offset S_k - S_q - 1
  p.heads = 4;
  p.sm_scale = 0.25f;
  f8::fill_random_rows(p, 11);
  const f8::Fp8Inputs f = f8::quantize(p);
  const std::vector<int64_t> rows = {0, 5, 23};
  const std::vector<double> got = f8::oracle_rows(p, f, rows);
  REQUIRE(got.size() == rows.size() * 40);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    const int64_t end = r + 40 - 24;  // DeepGEMM's ke = i + S_k - S_q
    for (int64_t j = 0; j < 40; ++j) {
      const double g = got[i * 40 + static_cast<size_t>(j)];
      if (j >= end) {
        CHECK((std::isinf(g) && g < 0));
        continue;
      }
      double want = 0;
      for (int h = 0; h < 4; ++h) {
        double dot = 0;
        for (int d = 0; d < 128; ++d)
          dot += double(f8::decode(f.q8[static_cast<size_t>((r * 4 + h) * 128 + d)])) * f8::decode(f.k8[static_cast<size_t>(j * 128 + d)]);
        const double s = double(f.q_scale[static_cast<size_t>(r * 4 + h)]) * f.k_scale[static_cast<size_t>(j)];
        want += bf16_to_float(p.w_bf16[static_cast<size_t>(r * 4 + h)]) * std::max(s * dot, 0.0);
      }
      CHECK(g == Approx(0.25 * want).epsilon(1e-12).margin(1e-12));
    }
  }
}

TEST_CASE("fp8 bench: the shapes, their windows and the sampled rows", "[fp8_bench]") {
  const auto cases = dsa_cli::fp8_bench_cases();
  REQUIRE(cases.size() == 4);
  CHECK(cases[0].name == "fp8 H64 r2 S_q 8192 S_k 4096");  // the headline shape first
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(c.p.heads == 64);
    CHECK(c.p.batch == 1);
    CHECK(c.p.sm_scale == 0.125f);
    CHECK(c.name.find(fmt::format("S_q {} S_k {}", c.p.s_q, c.p.s_k)) != std::string::npos);
    CHECK(c.name.find(fmt::format(" r{} ", c.p.ratio)) != std::string::npos);
    const bool end = c.name.size() > 4 && c.name.compare(c.name.size() - 4, 4, " end") == 0;
    CHECK(end == !c.p.offsets.empty());
    int64_t lo = 0, hi = 0;
    row_window(c.p, 0, &lo, &hi);
    CHECK(lo == 0);
    CHECK(hi == (end ? c.p.s_k - c.p.s_q : 1 / c.p.ratio));
    row_window(c.p, c.p.s_q - 1, &lo, &hi);
    CHECK(hi == (end ? c.p.s_k - 1 : c.p.s_q / c.p.ratio));
  }
  const auto rows = dsa_cli::fp8_check_rows(2048);
  REQUIRE(rows.size() >= 16);
  CHECK(rows.front() == 0);
  CHECK(rows.back() == 2047);
  CHECK(std::is_sorted(rows.begin(), rows.end()));
  CHECK(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  for (int64_t r : {int64_t(63), int64_t(64), int64_t(1983), int64_t(1984)}) CHECK(std::count(rows.begin(), rows.end(), r) == 1);
  for (int64_t r : dsa_cli::fp8_check_rows(10)) CHECK((r >= 0 && r < 10));
}

TEST_CASE("fp8 bench: the hand-declared cuBLASLt ABI matches the toolkit's headers", "[fp8_bench]") {
#ifdef DSA_HAVE_CUBLASLT_H
  namespace lt = dsa_support::cublaslt;
  STATIC_REQUIRE(lt::kR32F == CUDA_R_32F);
  STATIC_REQUIRE(lt::kR16BF == CUDA_R_16BF);
  STATIC_REQUIRE(lt::kR8FE4M3 == CUDA_R_8F_E4M3);
  STATIC_REQUIRE(lt::kCompute32F == CUBLAS_COMPUTE_32F);
  STATIC_REQUIRE(lt::kOpN == CUBLAS_OP_N);
  STATIC_REQUIRE(lt::kOpT == CUBLAS_OP_T);
  STATIC_REQUIRE(lt::kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
  STATIC_REQUIRE(lt::kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
  STATIC_REQUIRE(lt::kDescFastAccum == CUBLASLT_MATMUL_DESC_FAST_ACCUM);
  STATIC_REQUIRE(lt::kPrefMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
  STATIC_REQUIRE(sizeof(lt::HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
  STATIC_REQUIRE(offsetof(lt::HeuristicResult, waves_count) == offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));
  STATIC_REQUIRE(sizeof(cublasLtMatmulAlgo_t) == sizeof(lt::HeuristicResult::algo));
  STATIC_REQUIRE(std::is_same_v<decltype(&cublasLtMatmulDescCreate), cublasStatus_t (*)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t)>);
  STATIC_REQUIRE(std::is_same_v<decltype(&cublasLtMatrixLayoutCreate), cublasStatus_t (*)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t)>);
#else
  WARN("SKIPPED: the CUDA toolkit here has no cublasLt.h");
#endif
}
