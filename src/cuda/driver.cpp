#include "cuda/driver.hpp"

#include <dlfcn.h>
#include <link.h>

#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "core/util.hpp"

namespace dsa_indexer::detail {

// The versioned type each entry point is resolved as must be the prototype the call sites
// compile against; a mismatch here is an ABI bug (see DSA_CU_FUNCTIONS).
#define DSA_CU_ABI_CHECK(name, ver)                                                     \
  static_assert(std::is_same<PFN_##name##_v##ver, decltype(&::name)>::value,           \
                #name ": the resolved ABI version differs from the prototype in cuda.h");
DSA_CU_FUNCTIONS(DSA_CU_ABI_CHECK)
#undef DSA_CU_ABI_CHECK

namespace {

std::string result_text(const Driver* d, CUresult r) {
  const char* name = nullptr;
  const char* desc = nullptr;
  if (d && d->cuGetErrorName) d->cuGetErrorName(r, &name);
  if (d && d->cuGetErrorString) d->cuGetErrorString(r, &desc);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(r)), desc ? desc : "no description");
}

// Where the dynamic linker found libcuda.so.1, for messages.
std::string loaded_from(void* handle) {
  link_map* lm = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) return lm->l_name;
  return "libcuda.so.1";
}

// CUDA_ERROR_STUB_LIBRARY: the toolkit's link-time stub (lib64/stubs/libcuda.so) was found
// first, typically through LD_LIBRARY_PATH; every call into it returns 34.
[[noreturn]] void stub_library(void* handle, const char* call) {
  throw DriverError(fmt::format("the CUDA driver loaded from {} is the CUDA toolkit's stub library (CUDA_ERROR_STUB_LIBRARY, "
                                "CUresult 34 from {}), not a driver: install the NVIDIA driver, or remove the toolkit's "
                                "stubs directory from LD_LIBRARY_PATH",
                                loaded_from(handle), call),
                    call, static_cast<int>(CUDA_ERROR_STUB_LIBRARY));
}

}  // namespace

void Driver::load() {
  handle_ = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = ::dlerror();
    throw DriverError(fmt::format("cannot load the CUDA driver (libcuda.so.1): {}", e ? e : "not found"), "dlopen", -1);
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(::dlsym(handle_, "cuGetProcAddress_v2"));
  if (!get_proc)
    throw DriverError("the CUDA driver has no cuGetProcAddress_v2 (driver older than CUDA 12.0)", "dlsym", -1);
#define DSA_CU_RESOLVE(name, ver)                                                                         \
  {                                                                                                       \
    void* p = nullptr;                                                                                    \
    CUdriverProcAddressQueryResult st{};                                                                  \
    CUresult r = get_proc(#name, &p, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st);                               \
    if (r == CUDA_ERROR_STUB_LIBRARY) stub_library(handle_, "cuGetProcAddress_v2(" #name ")");              \
    if (r != CUDA_SUCCESS || !p)                                                                          \
      throw DriverError(fmt::format("the CUDA driver does not provide {} (CUresult {}, status {})", #name, \
                                    static_cast<int>(r), static_cast<int>(st)),                          \
                        "cuGetProcAddress", static_cast<int>(r));                                       \
    name = reinterpret_cast<decltype(name)>(p);                                                           \
  }
  DSA_CU_FUNCTIONS(DSA_CU_RESOLVE)
#undef DSA_CU_RESOLVE
  const CUresult init = cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY) stub_library(handle_, "cuInit");
  check(init, "cuInit");
  check(cuDriverGetVersion(&version_), "cuDriverGetVersion");
}

Driver& Driver::get() {
  // Process-lifetime objects, deliberately never destroyed: modules cached by the runtime are
  // unloaded (if ever) during static destruction, which must find the driver table intact.
  static std::once_flag once;
  static Driver* inst = nullptr;
  static std::exception_ptr* failure = new std::exception_ptr();
  std::call_once(once, [] {
    auto d = std::unique_ptr<Driver>(new Driver());
    try {
      d->load();
      inst = d.release();
    } catch (...) {
      *failure = std::current_exception();
    }
  });
  if (!inst) std::rethrow_exception(*failure);
  return *inst;
}

bool Driver::probe(std::string* why) {
  try {
    Driver& d = get();
    int n = 0;
    CUresult r = d.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n < 1) {
      if (why) *why = r != CUDA_SUCCESS ? "cuDeviceGetCount: " + result_text(&d, r) : "no CUDA device";
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

void Driver::check(CUresult r, const char* call) const {
  if (r == CUDA_SUCCESS) return;
  throw DriverError(fmt::format("{} failed: {}", call, result_text(this, r)), call, static_cast<int>(r));
}

int device_count() {
  int n = 0;
  DSA_CU(cuDeviceGetCount(&n));
  return n;
}

CUcontext primary_context(int ordinal) {
  static std::mutex* mu = new std::mutex();  // process lifetime, see Driver::get
  static auto* contexts = new std::map<int, CUcontext>();
  std::lock_guard<std::mutex> lk(*mu);
  auto it = contexts->find(ordinal);
  if (it != contexts->end()) return it->second;
  Driver& d = Driver::get();
  int n = 0;
  d.check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= n)
    fail_param<InvalidArgument>("indexer_forward", "device", fmt::format("an ordinal in [0, {})", n), ordinal);
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  CUcontext ctx = nullptr;
  d.check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  (*contexts)[ordinal] = ctx;
  return ctx;
}

StreamScratch::StreamScratch(uint64_t bytes, CUstream stream, const char* what) : stream_(stream), what_(what) {
  if (bytes == 0) return;
  Driver& d = Driver::get();
  d.check(d.cuMemAllocAsync(&ptr_, bytes, stream), fmt::format("cuMemAllocAsync({})", what).c_str());
}

void StreamScratch::free() {
  if (!ptr_) return;
  const CUdeviceptr p = ptr_;
  ptr_ = 0;
  Driver& d = Driver::get();
  d.check(d.cuMemFreeAsync(p, stream_), fmt::format("cuMemFreeAsync({})", what_).c_str());
}

StreamScratch::~StreamScratch() {
  if (ptr_) Driver::get().cuMemFreeAsync(ptr_, stream_);  // unwinding: the error in flight is the one to report
}

ScopedContext::ScopedContext(int ordinal) {
  CUcontext ctx = primary_context(ordinal);
  CUcontext current = nullptr;
  if (Driver::get().cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx) return;
  DSA_CU(cuCtxPushCurrent(ctx));
  pushed_ = true;
}

ScopedContext::~ScopedContext() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  Driver::get().cuCtxPopCurrent(&popped);
}

const DeviceInfo& device_info(int ordinal) {
  static std::mutex* mu = new std::mutex();  // process lifetime, see Driver::get
  static auto* infos = new std::map<int, DeviceInfo>();
  std::lock_guard<std::mutex> lk(*mu);
  auto it = infos->find(ordinal);
  if (it != infos->end()) return it->second;
  primary_context(ordinal);  // validates the ordinal
  Driver& d = Driver::get();
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  DeviceInfo info;
  info.ordinal = ordinal;
  d.check(d.cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  d.check(d.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  d.check(d.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  d.check(d.cuDeviceGetAttribute(&info.max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev), "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  char name[256] = {0};
  d.check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info.name = name;
  return infos->emplace(ordinal, info).first->second;
}

void encode_tma(TmaDescBytes* out, const void* base, int rank, const uint64_t* dims, const uint64_t* strides_bytes,
                const uint32_t* box, int elem_bytes) {
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t bdim[5], estride[5];
  for (int i = 0; i < rank; ++i) {
    gdim[i] = dims[i];
    bdim[i] = box[i];
    estride[i] = 1;
    if (i + 1 < rank) gstride[i] = strides_bytes[i];
  }
  Driver& d = Driver::get();
  const CUtensorMapDataType type = elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  CUresult r = d.cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(out->bytes), type,
                                        static_cast<cuuint32_t>(rank), const_cast<void*>(base), gdim, gstride, bdim, estride,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string desc;
    for (int i = 0; i < rank; ++i)
      desc += fmt::format("{}dim {} box {}{}", i ? ", " : "", dims[i], box[i],
                          i + 1 < rank ? fmt::format(" stride {}B", strides_bytes[i]) : std::string());
    d.check(r, fmt::format("cuTensorMapEncodeTiled(base {}, {})", base, desc).c_str());
  }
}

}  // namespace dsa_indexer::detail
