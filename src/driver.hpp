#pragma once
// The CUDA driver, loaded lazily with dlopen("libcuda.so.1") so that the library, its unit
// tests and the warmup tool run on machines with no driver. Every CUresult is checked into a
// DriverError naming the call.
#include <cuda.h>

#include <cstdint>
#include <string>

#include "planner.hpp"

namespace dsa_indexer::detail {

#define DSA_CU_FUNCTIONS(X)                                                                           \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute)          \
  X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) X(cuCtxPushCurrent) X(cuCtxPopCurrent)                \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuStreamGetCtx) X(cuPointerGetAttributes)                  \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute)                  \
  X(cuFuncGetAttribute) X(cuLaunchKernelEx) X(cuTensorMapEncodeTiled) X(cuGetErrorName)               \
  X(cuGetErrorString) X(cuMemcpyDtoHAsync) X(cuMemcpyHtoDAsync) X(cuStreamSynchronize) X(cuMemAlloc) \
  X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD32) X(cuMemsetD8)          \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)     \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuMemGetInfo) X(cuMemAllocHost) X(cuMemFreeHost)

class Driver {
 public:
  // Loads libcuda and runs cuInit once; throws DriverError if either fails.
  static Driver& get();
  // Whether a driver with at least one device is usable here; never throws.
  static bool probe(std::string* why = nullptr);

#define DSA_CU_MEMBER(name) decltype(&::name) name = nullptr;
  DSA_CU_FUNCTIONS(DSA_CU_MEMBER)
#undef DSA_CU_MEMBER

  // Throws DriverError("<call> failed: CUDA_ERROR_X (description)") unless r == CUDA_SUCCESS.
  void check(CUresult r, const char* call) const;
  int version() const { return version_; }

 private:
  Driver() = default;
  void load();
  void* handle_ = nullptr;
  int version_ = 0;
};

#define DSA_CU(call) ::dsa_indexer::detail::Driver::get().check(::dsa_indexer::detail::Driver::get().call, #call)

// The device's primary context, retained once and kept for the life of the process.
CUcontext primary_context(int ordinal);

// Makes the device's primary context current for a scope (push / pop).
class ScopedContext {
 public:
  explicit ScopedContext(int ordinal);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
};

// SM count, compute capability and shared-memory limit of a device, cached per ordinal.
const DeviceInfo& device_info(int ordinal);
int device_count();

// 128-byte-swizzled bf16 tensor map, innermost dimension first; strides in bytes for
// dimensions 1..rank-1. Throws DriverError naming the dimensions on failure.
struct TmaDescBytes {
  alignas(64) unsigned char bytes[128];
};
void encode_tma_bf16(TmaDescBytes* out, const void* base, int rank, const uint64_t* dims,
                     const uint64_t* strides_bytes, const uint32_t* box);

}  // namespace dsa_indexer::detail
