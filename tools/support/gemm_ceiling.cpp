#include "gemm_ceiling.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "cublaslt_abi.hpp"
#include "cuda/driver.hpp"
#include "event_timing.hpp"
#include "fp8_inputs.hpp"
#include "gpu_runner.hpp"

namespace dsa_support {
namespace dd = dsa_indexer::detail;

namespace {

// The first of `names` that dlopen finds (its name in `*found`), or nullptr.
void* open_first(std::initializer_list<const char*> names, std::string* found) {
  for (const char* name : names)
    if (void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      *found = name;
      return lib;
    }
  return nullptr;
}

}  // namespace

GemmCeiling measure_gemm_ceiling(int n, int reps, int device) {
  GemmCeiling g;
  g.n = n;
  void* lib = open_first({"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so.12", "libcublas.so"}, &g.library);
  if (!lib) {
    g.why = "libcublas not found";
    return g;
  }
  using Create = int (*)(void**);
  using SetStream = int (*)(void*, CUstream);
  using Destroy = int (*)(void*);
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                         const void*, void*, int, int, int, int);
  auto create = reinterpret_cast<Create>(::dlsym(lib, "cublasCreate_v2"));
  auto set_stream = reinterpret_cast<SetStream>(::dlsym(lib, "cublasSetStream_v2"));
  auto destroy = reinterpret_cast<Destroy>(::dlsym(lib, "cublasDestroy_v2"));
  auto gemm = reinterpret_cast<GemmEx>(::dlsym(lib, "cublasGemmEx"));
  if (!create || !set_stream || !destroy || !gemm) {
    g.why = "cuBLAS symbols missing";
    return g;
  }
  try {
    dd::ScopedContext ctx(device);
    dd::Driver& d = dd::Driver::get();
    const size_t elems = static_cast<size_t>(n) * n;
    std::vector<uint16_t> host(elems);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (auto& h : host) h = float_to_bf16(nd(rng));
    DeviceBuffer a(elems * 2, device), b(elems * 2, device), c(elems * 2, device);
    a.upload(host.data(), elems * 2);
    for (auto& h : host) h = float_to_bf16(nd(rng));
    b.upload(host.data(), elems * 2);
    void* handle = nullptr;
    if (create(&handle) != 0) {
      g.why = "cublasCreate failed";
      return g;
    }
    CUstream stream = nullptr;
    d.check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    set_stream(handle, stream);
    const float alpha = 1.0f, beta = 0.0f;
    constexpr int kBf16 = 14, kCompute32F = 68, kAlgoDefault = -1;
    auto one = [&] {
      return gemm(handle, 0, 0, n, n, n, &alpha, a.get(), kBf16, n, b.get(), kBf16, n, &beta, c.get(), kBf16, n,
                  kCompute32F, kAlgoDefault);
    };
    for (int i = 0; i < 3; ++i)
      if (one() != 0) {
        g.why = "cublasGemmEx failed";
        destroy(handle);
        return g;
      }
    g.median_us = event_times(reps, stream, 1, [&](int) { one(); }).median_us;
    g.tflops = 2.0 * n * static_cast<double>(n) * n / (g.median_us * 1e-6) / 1e12;
    g.ok = true;
    destroy(handle);
    d.cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    g.why = e.what();
  }
  return g;
}


GemmCeiling measure_fp8_gemm_ceiling(int n, int reps, bool fast_accum, int device) {
  namespace lt = cublaslt;
  GemmCeiling g;
  g.n = n;
  void* lib = open_first({"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                         &g.library);
  if (!lib) {
    g.why = "libcublasLt not found";
    return g;
  }
  auto sym = [&](const char* name) { return ::dlsym(lib, name); };
  auto create = reinterpret_cast<lt::Create>(sym("cublasLtCreate"));
  auto destroy = reinterpret_cast<lt::Destroy>(sym("cublasLtDestroy"));
  auto desc_create = reinterpret_cast<lt::DescCreate>(sym("cublasLtMatmulDescCreate"));
  auto desc_destroy = reinterpret_cast<lt::DescDestroy>(sym("cublasLtMatmulDescDestroy"));
  auto desc_set = reinterpret_cast<lt::DescSetAttribute>(sym("cublasLtMatmulDescSetAttribute"));
  auto layout_create = reinterpret_cast<lt::LayoutCreate>(sym("cublasLtMatrixLayoutCreate"));
  auto layout_destroy = reinterpret_cast<lt::LayoutDestroy>(sym("cublasLtMatrixLayoutDestroy"));
  auto pref_create = reinterpret_cast<lt::PrefCreate>(sym("cublasLtMatmulPreferenceCreate"));
  auto pref_destroy = reinterpret_cast<lt::PrefDestroy>(sym("cublasLtMatmulPreferenceDestroy"));
  auto pref_set = reinterpret_cast<lt::PrefSetAttribute>(sym("cublasLtMatmulPreferenceSetAttribute"));
  auto heuristic = reinterpret_cast<lt::AlgoGetHeuristic>(sym("cublasLtMatmulAlgoGetHeuristic"));
  auto matmul = reinterpret_cast<lt::Matmul>(sym("cublasLtMatmul"));
  if (!create || !destroy || !desc_create || !desc_destroy || !desc_set || !layout_create || !layout_destroy || !pref_create ||
      !pref_destroy || !pref_set || !heuristic || !matmul) {
    g.why = "cuBLASLt symbols missing";
    return g;
  }
  void *handle = nullptr, *desc = nullptr, *pref = nullptr;
  void* layouts[3] = {nullptr, nullptr, nullptr};  // A, B (E4M3), D (bf16; also C)
  CUstream stream = nullptr;
  auto release = [&] {  // idempotent
    for (void*& l : layouts)
      if (l) layout_destroy(std::exchange(l, nullptr));
    if (pref) pref_destroy(std::exchange(pref, nullptr));
    if (desc) desc_destroy(std::exchange(desc, nullptr));
    if (handle) destroy(std::exchange(handle, nullptr));
    if (stream) dd::Driver::get().cuStreamDestroy(std::exchange(stream, nullptr));
  };
  try {
    dd::ScopedContext ctx(device);
    dd::Driver& d = dd::Driver::get();
    const size_t elems = static_cast<size_t>(n) * n;
    DeviceBuffer a(elems, device), b(elems, device), c(elems * 2, device), ws(size_t(32) << 20, device);
    {
      const std::vector<uint8_t> ha = fp8in::random_codes(elems, 11), hb = fp8in::random_codes(elems, 12);
      a.upload(ha.data(), elems);
      b.upload(hb.data(), elems);
    }
    auto fail = [&](const std::string& why) {
      g.why = why;
      release();
      return g;
    };
    if (create(&handle) != 0) return fail("cublasLtCreate failed");
    if (desc_create(&desc, lt::kCompute32F, lt::kR32F) != 0) return fail("cublasLtMatmulDescCreate failed");
    // Unit scales are cuBLASLt's default: with A and B scale pointers set (device fp32 1.0), cuBLASLt
    // 13.1 on the H200 returned an algorithm from the heuristic and then status 15 (not supported)
    // from every cublasLtMatmul, in both accumulation modes (session 10's probe); without them it runs.
    const int32_t ta = lt::kOpT, tb = lt::kOpN;
    const int8_t fast = fast_accum ? 1 : 0;
    if (desc_set(desc, lt::kDescTransA, &ta, sizeof(ta)) != 0 || desc_set(desc, lt::kDescTransB, &tb, sizeof(tb)) != 0 ||
        desc_set(desc, lt::kDescFastAccum, &fast, sizeof(fast)) != 0)
      return fail("cublasLtMatmulDescSetAttribute failed");
    // Column-major: A is k x m (op T), B is k x n, D is m x n.
    if (layout_create(&layouts[0], lt::kR8FE4M3, n, n, n) != 0 || layout_create(&layouts[1], lt::kR8FE4M3, n, n, n) != 0 ||
        layout_create(&layouts[2], lt::kR16BF, n, n, n) != 0)
      return fail("cublasLtMatrixLayoutCreate failed");
    const uint64_t ws_bytes = ws.bytes();
    if (pref_create(&pref) != 0 || pref_set(pref, lt::kPrefMaxWorkspaceBytes, &ws_bytes, sizeof(ws_bytes)) != 0)
      return fail("cublasLtMatmulPreference failed");
    lt::HeuristicResult best{};
    int found = 0;
    const int hs = heuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref, 1, &best, &found);
    if (hs != 0 || found < 1 || best.state != 0)
      return fail(fmt::format("no cuBLASLt algorithm for an E4M3 x E4M3 -> bf16 GEMM (heuristic status {}, {} found)", hs, found));
    d.check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    const float alpha = 1.0f, beta = 0.0f;
    int status = 0;
    auto one = [&] {
      status = matmul(handle, desc, &alpha, a.get(), layouts[0], b.get(), layouts[1], &beta, c.get(), layouts[2], c.get(), layouts[2],
                      best.algo, ws.get(), ws.bytes(), stream);
    };
    for (int i = 0; i < 3; ++i) {
      one();
      if (status != 0) return fail(fmt::format("cublasLtMatmul failed (status {})", status));
    }
    g.median_us = event_times(reps, stream, 1, [&](int) { one(); }).median_us;
    if (status != 0) return fail(fmt::format("cublasLtMatmul failed (status {})", status));
    g.tflops = 2.0 * n * static_cast<double>(n) * n / (g.median_us * 1e-6) / 1e12;
    g.ok = true;
    d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    release();
  } catch (const std::exception& e) {
    g.why = e.what();
    release();
  }
  return g;
}

}  // namespace dsa_support
