#pragma once
// The CUDA driver, loaded lazily with dlopen("libcuda.so.1") so that the library, its unit
// tests and the warmup tool run on machines with no driver. Every CUresult is checked into a
// DriverError naming the call.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "core/device_info.hpp"

namespace dsa_indexer::detail {

// Every entry point with the ABI version it is resolved at. cuGetProcAddress returns the
// newest ABI not newer than the version asked for, and some functions changed signature after
// the form our call sites use (cuCtxSynchronize took a CUcontext in 13.0, cuStreamGetCtx a green
// context out-pointer in 12.5): asking with CUDA_VERSION would hand back those, called with the
// old argument list. So each function names the version of the signature it is called with,
// and driver.cpp static_asserts that this version's type (cudaTypedefs.h) is the prototype.
#define DSA_CU_FUNCTIONS(X)                                                                         \
  X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuDeviceGetCount, 2000) X(cuDeviceGet, 2000)         \
  X(cuDeviceGetAttribute, 2000) X(cuDeviceGetName, 2000) X(cuDevicePrimaryCtxRetain, 7000)           \
  X(cuCtxPushCurrent, 4000) X(cuCtxPopCurrent, 4000) X(cuCtxGetCurrent, 4000)                       \
  X(cuCtxSynchronize, 2000) X(cuStreamGetCtx, 9020) X(cuPointerGetAttributes, 7000)                 \
  X(cuModuleLoadData, 2000) X(cuModuleUnload, 2000) X(cuModuleGetFunction, 2000)                     \
  X(cuFuncSetAttribute, 9000) X(cuFuncGetAttribute, 2020) X(cuLaunchKernelEx, 11060)                 \
  X(cuTensorMapEncodeTiled, 12000) X(cuGetErrorName, 6000) X(cuGetErrorString, 6000)                 \
  X(cuMemcpyDtoHAsync, 3020) X(cuMemcpyHtoDAsync, 3020) X(cuStreamSynchronize, 2000)                 \
  X(cuMemAlloc, 3020) X(cuMemFree, 3020) X(cuMemcpyHtoD, 3020) X(cuMemcpyDtoH, 3020)                 \
  X(cuMemcpyDtoD, 3020) X(cuMemsetD32, 3020) X(cuMemsetD8, 3020) X(cuEventCreate, 2000)              \
  X(cuEventRecord, 2000) X(cuEventSynchronize, 2000) X(cuEventElapsedTime, 2000)                     \
  X(cuEventDestroy, 4000) X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000) X(cuMemGetInfo, 3020)     \
  X(cuMemAllocHost, 3020) X(cuMemFreeHost, 2000) X(cuStreamBeginCapture, 10010)                     \
  X(cuStreamEndCapture, 10000) X(cuGraphInstantiateWithFlags, 11040) X(cuGraphLaunch, 10000)        \
  X(cuGraphExecDestroy, 10000) X(cuGraphDestroy, 10000)  \
  X(cuMemAllocAsync, 11020) X(cuMemFreeAsync, 11020)

class Driver {
 public:
  // Loads libcuda and runs cuInit once; throws DriverError if either fails.
  static Driver& get();
  // Whether a driver with at least one device is usable here; never throws.
  static bool probe(std::string* why = nullptr);

#define DSA_CU_MEMBER(name, ver) PFN_##name##_v##ver name = nullptr;
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

// Makes the device's primary context current for a scope (push / pop). When it already is
// the current context (the usual case: torch and the runtime API make it current), nothing is
// pushed or popped.
class ScopedContext {
 public:
  explicit ScopedContext(int ordinal);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  bool pushed_ = false;
};

// Device memory from the driver's stream-ordered pool for the work queued on `stream`:
// cuMemAllocAsync at construction (nothing when `bytes` is 0), cuMemFreeAsync on the same stream
// by free() (checked) or, when unwinding, by the destructor; so later work never finds it in use,
// and both are captured into a CUDA graph like any other stream work.
class StreamScratch {
 public:
  StreamScratch(uint64_t bytes, CUstream stream, const char* what);
  ~StreamScratch();
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  void free();

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
  const char* what_;
};

// SM count, compute capability and shared-memory limit of a device, cached per ordinal.
const DeviceInfo& device_info(int ordinal);
int device_count();

// 128-byte-swizzled bf16 tensor map, innermost dimension first; strides in bytes for
// dimensions 1..rank-1. Throws DriverError naming the dimensions on failure.
struct TmaDescBytes {
  alignas(64) unsigned char bytes[128];
};
void encode_tma(TmaDescBytes* out, const void* base, int rank, const uint64_t* dims, const uint64_t* strides_bytes,
                const uint32_t* box, int elem_bytes);

}  // namespace dsa_indexer::detail
