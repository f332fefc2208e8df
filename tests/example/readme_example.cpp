// The README's usage example: score a small DeepSeek-V4-like problem on the GPU.
// Built against the installed public API only; without a GPU it reports itself skipped (77).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <vector>

#include "dsa_indexer/indexer.hpp"

int main() {
  // The example opens the driver itself, as any driver-API user would.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    std::printf("no CUDA driver: skipped\n");
    return 77;
  }
  auto cuInit_ = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(cuda, "cuInit"));
  auto cuDeviceGet_ = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(cuda, "cuDeviceGet"));
  auto cuCtxRetain_ = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  auto cuCtxSetCurrent_ = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(cuda, "cuCtxSetCurrent"));
  auto cuMemAlloc_ = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(cuda, "cuMemAlloc_v2"));
  auto cuMemsetD16_ = reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned short, size_t)>(dlsym(cuda, "cuMemsetD16_v2"));
  auto cuMemcpyDtoH_ = reinterpret_cast<CUresult (*)(void*, CUdeviceptr, size_t)>(dlsym(cuda, "cuMemcpyDtoH_v2"));
  CUdevice dev;
  CUcontext ctx;
  if (cuInit_(0) != CUDA_SUCCESS || cuDeviceGet_(&dev, 0) != CUDA_SUCCESS) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  cuCtxRetain_(&ctx, dev);
  cuCtxSetCurrent_(ctx);

  // --- the example proper ---
  using namespace dsa_indexer;
  const int64_t S_q = 256, S_k = 128, H = 64, D = 128;
  CUdeviceptr q, k, w, scores;
  cuMemAlloc_(&q, S_q * H * D * 2);
  cuMemAlloc_(&k, S_k * D * 2);
  cuMemAlloc_(&w, S_q * H * 2);
  cuMemAlloc_(&scores, S_q * S_k * 4);
  cuMemsetD16_(q, 0x3c00, S_q * H * D);  // bf16 1/128 everywhere: every visible score is equal
  cuMemsetD16_(k, 0x3f80, S_k * D);      // bf16 1.0
  cuMemsetD16_(w, 0x3f80, S_q * H);      // bf16 1.0

  auto desc = [](CUdeviceptr p, DType t, std::initializer_list<int64_t> dims) {
    return TensorDesc::contiguous(reinterpret_cast<void*>(p), t, dims);
  };
  IndexerOptions opt;
  opt.ratio = 2;           // row i sees keys [0, (i + 1) / 2)
  opt.sm_scale = 0.125f;
  try {
    indexer_forward(desc(q, DType::bf16, {1, S_q, H, D}), desc(k, DType::bf16, {1, S_k, 1, D}),
                    desc(w, DType::bf16, {1, S_q, H}), desc(scores, DType::f32, {1, S_q, S_k}), opt,
                    /*stream=*/nullptr);
  } catch (const DriverError& e) {
    std::printf("driver unusable (%s): skipped\n", e.what());
    return 77;
  } catch (const Error& e) {
    std::printf("indexer_forward failed: %s\n", e.what());
    return 1;
  }
  std::vector<float> host(S_q * S_k);
  cuMemcpyDtoH_(host.data(), scores, host.size() * 4);
  // q.k = 128 * (1/128) = 1 per head, relu(1) * w(1) summed over 64 heads = 64, times 0.125 = 8
  const float row9_col4 = host[9 * S_k + 4], row9_col5 = host[9 * S_k + 5];
  std::printf("scores[9][4] = %g (expect 8), scores[9][5] = %g (expect -inf)\n", row9_col4, row9_col5);
  return (row9_col4 == 8.0f && row9_col5 < -1e30f) ? 0 : 1;
}
