// A stand-in CUDA driver for tests without a GPU (docs/RELIABILITY.md, round 3, class 7). Built
// as `libcuda.so.1` in a directory of its own; a test that puts that directory first on
// LD_LIBRARY_PATH drives the library's whole forward path on CPUs: validation, dispatch,
// planning, compile (NVRTC needs no GPU), disk cache, recording, the async worker and the launch
// arguments. Only what src/driver.cpp resolves is answered, through cuGetProcAddress_v2 as the
// real driver does it.
//
// The fake: DSA_STUB_DEVICES Hopper devices (default 1; sm_90, DSA_STUB_SMS SMs, default 132,
// 227 KiB opt-in shared memory). Device memory is host memory, so cuMemcpy* and the library's
// read of device cu_seqlens work. A module load accepts only a 64-bit CUDA ELF (EM_CUDA) and a
// function lookup only a name present in it. A launch runs nothing but checks what a real launch
// checks about its configuration (a loaded function, a grid and a block in range, dynamic shared
// memory within what cuFuncSetAttribute allowed, a parameter array) and is counted; the
// dsa_stub_* functions below let a test read those counts.
//
// getenv here is the test fixture's, not the library's (the library reads the environment only
// in src/env.cpp).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr int kMaxDevices = 8;
constexpr int kOptinSmem = 232448;
constexpr unsigned short kEmCuda = 190;

struct Ctx {
  int device;
};
Ctx g_ctx[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

struct Function {
  std::string name;
  int max_dynamic_smem = 48 << 10;
  bool live = true;
};
struct Module {
  std::string image;
  std::vector<std::unique_ptr<Function>> functions;
};
struct Alloc {
  std::size_t size;
  int device;
};
struct Stream {
  CUcontext ctx;
};

// Process lifetime (never destroyed): the library unloads modules at exit at the earliest.
struct State {
  std::mutex mu;
  std::map<uintptr_t, Alloc> allocs;  // base -> extent
  std::set<Module*> modules;
  std::set<Function*> functions;
  std::set<Stream*> streams;
};
State& st() {
  static State* s = new State();
  return *s;
}

std::atomic<unsigned long> g_launches{0}, g_module_loads{0}, g_tensor_maps{0};
std::atomic<int> g_last_grid_x{0}, g_last_block_x{0}, g_last_smem{0};
std::mutex g_name_mu;
std::string g_last_kernel;

int env_int(const char* name, int dflt, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  const int n = std::atoi(v);
  return n < lo ? lo : n > hi ? hi : n;
}
int device_count() { return env_int("DSA_STUB_DEVICES", 1, 0, kMaxDevices); }
int sm_count() { return env_int("DSA_STUB_SMS", 132, 1, 1024); }

thread_local std::vector<CUcontext> t_ctx_stack;

CUcontext current() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }
int current_device() {
  CUcontext c = current();
  return c ? static_cast<Ctx*>(static_cast<void*>(c))->device : 0;
}

// The allocation holding [p, p + n), or nullptr.
const Alloc* find_alloc(uintptr_t p, std::size_t n, uintptr_t* base = nullptr) {
  auto& m = st().allocs;
  auto it = m.upper_bound(p);
  if (it == m.begin()) return nullptr;
  --it;
  if (p - it->first > it->second.size || n > it->second.size - (p - it->first)) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool is_cuda_elf(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  if (!b || std::memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2 /* ELFCLASS64 */ || b[5] != 1 /* little-endian */)
    return false;
  unsigned short machine = 0;
  std::memcpy(&machine, b + 18, 2);
  return machine == kEmCuda;
}

// The size of an ELF image from its section header table (the end of the last header).
std::size_t elf_size(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0;
  std::memcpy(&shoff, b + 0x28, 8);
  std::memcpy(&shentsize, b + 0x3a, 2);
  std::memcpy(&shnum, b + 0x3c, 2);
  const uint64_t end = shoff + uint64_t(shentsize) * shnum;
  return end > (uint64_t(1) << 30) ? 0 : static_cast<std::size_t>(end);
}

const char* error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return nullptr;
  }
}

CUresult memcpy_checked(uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev, std::size_t n) {
  std::lock_guard<std::mutex> lk(st().mu);
  if ((dst_dev && !find_alloc(dst, n)) || (src_dev && !find_alloc(src, n))) return CUDA_ERROR_INVALID_VALUE;
  if (n) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

// Each entry point as the ABI version the library resolves it at (src/driver.hpp): assigning
// the lambda to that PFN type checks the signature.
#define DSA_STUB(name, ver) const PFN_##name##_v##ver stub_##name = +[]

DSA_STUB(cuInit, 2000)(unsigned int) -> CUresult { return CUDA_SUCCESS; };
DSA_STUB(cuDriverGetVersion, 2020)(int* v) -> CUresult {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
};
DSA_STUB(cuDeviceGetCount, 2000)(int* n) -> CUresult {
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = device_count();
  return CUDA_SUCCESS;
};
DSA_STUB(cuDeviceGet, 2000)(CUdevice* d, int ordinal) -> CUresult {
  if (!d || ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
};
DSA_STUB(cuDeviceGetAttribute, 2000)(int* v, CUdevice_attribute a, CUdevice d) -> CUresult {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = sm_count(); return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = kOptinSmem; return CUDA_SUCCESS;
    default: *v = 0; return CUDA_SUCCESS;
  }
};
DSA_STUB(cuDeviceGetName, 2000)(char* name, int len, CUdevice d) -> CUresult {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "dsa-indexer stub H200 %d", d);
  return CUDA_SUCCESS;
};
DSA_STUB(cuDevicePrimaryCtxRetain, 7000)(CUcontext* c, CUdevice d) -> CUresult {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *c = reinterpret_cast<CUcontext>(&g_ctx[d]);
  return CUDA_SUCCESS;
};
DSA_STUB(cuCtxPushCurrent, 4000)(CUcontext c) -> CUresult {
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(c);
  return CUDA_SUCCESS;
};
DSA_STUB(cuCtxPopCurrent, 4000)(CUcontext* c) -> CUresult {
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (c) *c = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
};
DSA_STUB(cuCtxGetCurrent, 4000)(CUcontext* c) -> CUresult {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = current();
  return CUDA_SUCCESS;
};
DSA_STUB(cuCtxSynchronize, 2000)() -> CUresult { return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; };
DSA_STUB(cuStreamGetCtx, 9020)(CUstream s, CUcontext* c) -> CUresult {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (!s) {
    *c = current();
    return *c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  std::lock_guard<std::mutex> lk(st().mu);
  auto* p = reinterpret_cast<Stream*>(s);
  if (!st().streams.count(p)) return CUDA_ERROR_INVALID_HANDLE;
  *c = p->ctx;
  return CUDA_SUCCESS;
};
DSA_STUB(cuPointerGetAttributes, 7000)(unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) -> CUresult {
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(st().mu);
  const Alloc* a = find_alloc(static_cast<uintptr_t>(ptr), 0);
  for (unsigned i = 0; i < n; ++i) {
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data[i]) = a ? CU_MEMORYTYPE_DEVICE : 0; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = a ? a->device : -2; break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data[i]) = 0; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;  // as the driver does for a pointer it does not know: memory type 0
};
DSA_STUB(cuModuleLoadData, 2000)(CUmodule* m, const void* image) -> CUresult {
  if (!m) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!is_cuda_elf(image)) return CUDA_ERROR_INVALID_IMAGE;
  const std::size_t n = elf_size(image);
  if (n < 64) return CUDA_ERROR_INVALID_IMAGE;
  auto* mod = new Module();
  mod->image.assign(static_cast<const char*>(image), n);
  std::lock_guard<std::mutex> lk(st().mu);
  st().modules.insert(mod);
  *m = reinterpret_cast<CUmodule>(mod);
  g_module_loads.fetch_add(1);
  return CUDA_SUCCESS;
};
DSA_STUB(cuModuleUnload, 2000)(CUmodule m) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  auto* mod = reinterpret_cast<Module*>(m);
  if (!st().modules.erase(mod)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : mod->functions) {
    f->live = false;
    st().functions.erase(f.get());
  }
  // The Module stays allocated: a stale CUfunction must read as "not live", not as freed memory.
  return CUDA_SUCCESS;
};
DSA_STUB(cuModuleGetFunction, 2000)(CUfunction* f, CUmodule m, const char* name) -> CUresult {
  if (!f || !name || !*name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(st().mu);
  auto* mod = reinterpret_cast<Module*>(m);
  if (!st().modules.count(mod)) return CUDA_ERROR_INVALID_HANDLE;
  const std::string needle(name, std::strlen(name) + 1);  // a whole symbol name, NUL included
  if (mod->image.find(needle) == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  mod->functions.push_back(std::make_unique<Function>());
  Function* fn = mod->functions.back().get();
  fn->name = name;
  st().functions.insert(fn);
  *f = reinterpret_cast<CUfunction>(fn);
  return CUDA_SUCCESS;
};
DSA_STUB(cuFuncSetAttribute, 9000)(CUfunction f, CUfunction_attribute a, int v) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  auto* fn = reinterpret_cast<Function*>(f);
  if (!st().functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (v < 0 || v > kOptinSmem) return CUDA_ERROR_INVALID_VALUE;
    fn->max_dynamic_smem = v;
  }
  return CUDA_SUCCESS;
};
DSA_STUB(cuFuncGetAttribute, 2020)(int* v, CUfunction_attribute a, CUfunction f) -> CUresult {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(st().mu);
  auto* fn = reinterpret_cast<Function*>(f);
  if (!st().functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = fn->max_dynamic_smem; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 168; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
};
DSA_STUB(cuLaunchKernelEx, 11060)(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) -> CUresult {
  if (!c || !params || extra) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  std::string name;
  {
    std::lock_guard<std::mutex> lk(st().mu);
    auto* fn = reinterpret_cast<Function*>(f);
    if (!st().functions.count(fn) || !fn->live) return CUDA_ERROR_INVALID_HANDLE;
    if (c->gridDimX < 1 || c->gridDimY < 1 || c->gridDimZ < 1 || c->gridDimX > 0x7fffffffu || c->gridDimY > 65535 ||
        c->gridDimZ > 65535)
      return CUDA_ERROR_INVALID_VALUE;
    if (c->blockDimX < 1 || c->blockDimY < 1 || c->blockDimZ < 1 ||
        uint64_t(c->blockDimX) * c->blockDimY * c->blockDimZ > 1024)
      return CUDA_ERROR_INVALID_VALUE;
    if (c->sharedMemBytes > static_cast<unsigned>(fn->max_dynamic_smem)) return CUDA_ERROR_INVALID_VALUE;
    name = fn->name;
  }
  g_last_grid_x = static_cast<int>(c->gridDimX);
  g_last_block_x = static_cast<int>(c->blockDimX);
  g_last_smem = static_cast<int>(c->sharedMemBytes);
  {
    std::lock_guard<std::mutex> lk(g_name_mu);
    g_last_kernel = name;
  }
  g_launches.fetch_add(1);
  return CUDA_SUCCESS;
};
DSA_STUB(cuTensorMapEncodeTiled, 12000)(CUtensorMap* map, CUtensorMapDataType, cuuint32_t rank, void* base,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* estrides, CUtensorMapInterleave, CUtensorMapSwizzle,
                                        CUtensorMapL2promotion, CUtensorMapFloatOOBfill) -> CUresult {
  // The documented requirements the library's maps must meet (CUDA driver API reference).
  if (!map || !dims || !box || !estrides || rank < 1 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] < 1 || dims[i] > (uint64_t(1) << 32) || box[i] < 1 || box[i] > 256 || estrides[i] < 1 || estrides[i] > 8)
      return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (!strides || strides[i] % 16 != 0 || strides[i] >= (uint64_t(1) << 40)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &base, sizeof base);
  g_tensor_maps.fetch_add(1);
  return CUDA_SUCCESS;
};
DSA_STUB(cuGetErrorName, 6000)(CUresult r, const char** s) -> CUresult {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_name(r);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
};
DSA_STUB(cuGetErrorString, 6000)(CUresult r, const char** s) -> CUresult {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_name(r) ? "(the dsa-indexer test driver stub)" : nullptr;
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
};
DSA_STUB(cuMemcpyDtoHAsync, 3020)(void* dst, CUdeviceptr src, size_t n, CUstream) -> CUresult {
  return memcpy_checked(reinterpret_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), true, n);
};
DSA_STUB(cuMemcpyHtoDAsync, 3020)(CUdeviceptr dst, const void* src, size_t n, CUstream) -> CUresult {
  return memcpy_checked(static_cast<uintptr_t>(dst), true, reinterpret_cast<uintptr_t>(src), false, n);
};
DSA_STUB(cuStreamSynchronize, 2000)(CUstream) -> CUresult { return CUDA_SUCCESS; };
DSA_STUB(cuMemAlloc, 3020)(CUdeviceptr* p, size_t n) -> CUresult {
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  void* m = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(st().mu);
  st().allocs[reinterpret_cast<uintptr_t>(m)] = Alloc{n, current_device()};
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
};
DSA_STUB(cuMemFree, 3020)(CUdeviceptr p) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  if (!st().allocs.erase(static_cast<uintptr_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
};
// Stream-ordered allocation (the top-k workspace when the caller passes none): the stub's
// streams complete at once, so it is an ordinary allocation.
DSA_STUB(cuMemAllocAsync, 11020)(CUdeviceptr* p, size_t n, CUstream) -> CUresult { return stub_cuMemAlloc(p, n); };
DSA_STUB(cuMemFreeAsync, 11020)(CUdeviceptr p, CUstream) -> CUresult { return stub_cuMemFree(p); };
DSA_STUB(cuMemcpyHtoD, 3020)(CUdeviceptr dst, const void* src, size_t n) -> CUresult {
  return memcpy_checked(static_cast<uintptr_t>(dst), true, reinterpret_cast<uintptr_t>(src), false, n);
};
DSA_STUB(cuMemcpyDtoH, 3020)(void* dst, CUdeviceptr src, size_t n) -> CUresult {
  return memcpy_checked(reinterpret_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), true, n);
};
DSA_STUB(cuMemcpyDtoD, 3020)(CUdeviceptr dst, CUdeviceptr src, size_t n) -> CUresult {
  return memcpy_checked(static_cast<uintptr_t>(dst), true, static_cast<uintptr_t>(src), true, n);
};
DSA_STUB(cuMemsetD32, 3020)(CUdeviceptr p, unsigned int v, size_t n) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  if (n > (SIZE_MAX >> 2) || !find_alloc(static_cast<uintptr_t>(p), n * 4)) return CUDA_ERROR_INVALID_VALUE;
  auto* d = reinterpret_cast<unsigned int*>(p);
  for (size_t i = 0; i < n; ++i) d[i] = v;
  return CUDA_SUCCESS;
};
DSA_STUB(cuMemsetD8, 3020)(CUdeviceptr p, unsigned char v, size_t n) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  if (!find_alloc(static_cast<uintptr_t>(p), n)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(p), v, n);
  return CUDA_SUCCESS;
};
DSA_STUB(cuEventCreate, 2000)(CUevent* e, unsigned int) -> CUresult {
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
};
DSA_STUB(cuEventRecord, 2000)(CUevent e, CUstream) -> CUresult { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; };
DSA_STUB(cuEventSynchronize, 2000)(CUevent e) -> CUresult { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; };
DSA_STUB(cuEventElapsedTime, 2000)(float* ms, CUevent, CUevent) -> CUresult {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  *ms = 1.0f;
  return CUDA_SUCCESS;
};
DSA_STUB(cuEventDestroy, 4000)(CUevent e) -> CUresult {
  delete reinterpret_cast<int*>(e);
  return CUDA_SUCCESS;
};
DSA_STUB(cuStreamCreate, 2000)(CUstream* s, unsigned int) -> CUresult {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* p = new Stream{current()};
  std::lock_guard<std::mutex> lk(st().mu);
  st().streams.insert(p);
  *s = reinterpret_cast<CUstream>(p);
  return CUDA_SUCCESS;
};
DSA_STUB(cuStreamDestroy, 4000)(CUstream s) -> CUresult {
  std::lock_guard<std::mutex> lk(st().mu);
  auto* p = reinterpret_cast<Stream*>(s);
  if (!st().streams.erase(p)) return CUDA_ERROR_INVALID_HANDLE;
  delete p;
  return CUDA_SUCCESS;
};
DSA_STUB(cuMemGetInfo, 3020)(size_t* free_b, size_t* total) -> CUresult {
  if (free_b) *free_b = size_t(100) << 30;
  if (total) *total = size_t(141) << 30;
  return CUDA_SUCCESS;
};
DSA_STUB(cuMemAllocHost, 3020)(void** p, size_t n) -> CUresult {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = std::malloc(n ? n : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
};
DSA_STUB(cuMemFreeHost, 2000)(void* p) -> CUresult {
  std::free(p);
  return CUDA_SUCCESS;
};
DSA_STUB(cuStreamBeginCapture, 10010)(CUstream, CUstreamCaptureMode) -> CUresult { return CUDA_ERROR_NOT_SUPPORTED; };
DSA_STUB(cuStreamEndCapture, 10000)(CUstream, CUgraph*) -> CUresult { return CUDA_ERROR_NOT_SUPPORTED; };
DSA_STUB(cuGraphInstantiateWithFlags, 11040)(CUgraphExec*, CUgraph, unsigned long long) -> CUresult {
  return CUDA_ERROR_NOT_SUPPORTED;
};
DSA_STUB(cuGraphLaunch, 10000)(CUgraphExec, CUstream) -> CUresult { return CUDA_ERROR_NOT_SUPPORTED; };
DSA_STUB(cuGraphExecDestroy, 10000)(CUgraphExec) -> CUresult { return CUDA_ERROR_NOT_SUPPORTED; };
DSA_STUB(cuGraphDestroy, 10000)(CUgraph) -> CUresult { return CUDA_ERROR_NOT_SUPPORTED; };
#undef DSA_STUB

struct Entry {
  const char* name;
  void* fn;
};
#define DSA_STUB_ENTRY(name) {#name, reinterpret_cast<void*>(stub_##name)}
const Entry kEntries[] = {
    DSA_STUB_ENTRY(cuInit), DSA_STUB_ENTRY(cuDriverGetVersion), DSA_STUB_ENTRY(cuDeviceGetCount),
    DSA_STUB_ENTRY(cuDeviceGet), DSA_STUB_ENTRY(cuDeviceGetAttribute), DSA_STUB_ENTRY(cuDeviceGetName),
    DSA_STUB_ENTRY(cuDevicePrimaryCtxRetain), DSA_STUB_ENTRY(cuCtxPushCurrent), DSA_STUB_ENTRY(cuCtxPopCurrent),
    DSA_STUB_ENTRY(cuCtxGetCurrent), DSA_STUB_ENTRY(cuCtxSynchronize), DSA_STUB_ENTRY(cuStreamGetCtx),
    DSA_STUB_ENTRY(cuPointerGetAttributes), DSA_STUB_ENTRY(cuModuleLoadData), DSA_STUB_ENTRY(cuModuleUnload),
    DSA_STUB_ENTRY(cuModuleGetFunction), DSA_STUB_ENTRY(cuFuncSetAttribute), DSA_STUB_ENTRY(cuFuncGetAttribute),
    DSA_STUB_ENTRY(cuLaunchKernelEx), DSA_STUB_ENTRY(cuTensorMapEncodeTiled), DSA_STUB_ENTRY(cuGetErrorName),
    DSA_STUB_ENTRY(cuGetErrorString), DSA_STUB_ENTRY(cuMemcpyDtoHAsync), DSA_STUB_ENTRY(cuMemcpyHtoDAsync),
    DSA_STUB_ENTRY(cuStreamSynchronize), DSA_STUB_ENTRY(cuMemAlloc), DSA_STUB_ENTRY(cuMemFree),
    DSA_STUB_ENTRY(cuMemcpyHtoD), DSA_STUB_ENTRY(cuMemcpyDtoH), DSA_STUB_ENTRY(cuMemcpyDtoD),
    DSA_STUB_ENTRY(cuMemsetD32), DSA_STUB_ENTRY(cuMemsetD8), DSA_STUB_ENTRY(cuEventCreate),
    DSA_STUB_ENTRY(cuEventRecord), DSA_STUB_ENTRY(cuEventSynchronize), DSA_STUB_ENTRY(cuEventElapsedTime),
    DSA_STUB_ENTRY(cuEventDestroy), DSA_STUB_ENTRY(cuStreamCreate), DSA_STUB_ENTRY(cuStreamDestroy),
    DSA_STUB_ENTRY(cuMemGetInfo), DSA_STUB_ENTRY(cuMemAllocHost), DSA_STUB_ENTRY(cuMemFreeHost),
    DSA_STUB_ENTRY(cuStreamBeginCapture), DSA_STUB_ENTRY(cuStreamEndCapture),
    DSA_STUB_ENTRY(cuGraphInstantiateWithFlags), DSA_STUB_ENTRY(cuGraphLaunch), DSA_STUB_ENTRY(cuGraphExecDestroy),
    DSA_STUB_ENTRY(cuGraphDestroy), DSA_STUB_ENTRY(cuMemAllocAsync), DSA_STUB_ENTRY(cuMemFreeAsync)};
#undef DSA_STUB_ENTRY

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                                                   CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  for (const Entry& e : kEntries)
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = nullptr;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// What a test reads back (dlopen("libcuda.so.1", RTLD_NOLOAD) + dlsym).
__attribute__((visibility("default"))) unsigned long dsa_stub_launches() { return g_launches.load(); }
__attribute__((visibility("default"))) unsigned long dsa_stub_module_loads() { return g_module_loads.load(); }
__attribute__((visibility("default"))) unsigned long dsa_stub_tensor_maps() { return g_tensor_maps.load(); }
__attribute__((visibility("default"))) int dsa_stub_last_launch(char* kernel, int len, int* grid_x, int* block_x, int* smem) {
  if (grid_x) *grid_x = g_last_grid_x.load();
  if (block_x) *block_x = g_last_block_x.load();
  if (smem) *smem = g_last_smem.load();
  std::lock_guard<std::mutex> lk(g_name_mu);
  if (kernel && len > 0) std::snprintf(kernel, static_cast<std::size_t>(len), "%s", g_last_kernel.c_str());
  return static_cast<int>(g_last_kernel.size());
}

}  // extern "C"
