#include "gemm_ceiling.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cuda/driver.hpp"
#include "gpu_runner.hpp"

namespace dsa_support {
namespace dd = dsa_indexer::detail;

GemmCeiling measure_gemm_ceiling(int n, int reps, int device) {
  GemmCeiling g;
  g.n = n;
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      g.library = name;
      break;
    }
  }
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
    CUevent e0, e1;
    d.check(d.cuEventCreate(&e0, 0), "cuEventCreate");
    d.check(d.cuEventCreate(&e1, 0), "cuEventCreate");
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      d.check(d.cuEventRecord(e0, stream), "cuEventRecord");
      one();
      d.check(d.cuEventRecord(e1, stream), "cuEventRecord");
      d.check(d.cuEventSynchronize(e1), "cuEventSynchronize");
      float t = 0;
      d.check(d.cuEventElapsedTime(&t, e0, e1), "cuEventElapsedTime");
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    g.median_us = ms[ms.size() / 2] * 1e3;
    g.tflops = 2.0 * n * static_cast<double>(n) * n / (g.median_us * 1e-6) / 1e12;
    g.ok = true;
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
    destroy(handle);
    d.cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    g.why = e.what();
  }
  return g;
}

}  // namespace dsa_support
