#pragma once
// The process-wide JIT runtime: codegen -> disk cache -> NVRTC -> module load, behind the
// in-memory LRU. One instance per process, built from the environment on first use.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "dsa_indexer/indexer.hpp"
#include "jit/codegen.hpp"
#include "jit/compile_isolation.hpp"
#include "jit/disk_cache.hpp"
#include "cuda/driver.hpp"
#include "core/env.hpp"
#include "core/lru_cache.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "jit/templates.hpp"
#include "core/kernel_spec.hpp"

namespace dsa_indexer::detail {

struct LoadedKernel {
  int device = 0;
  KernelSpec spec;
  std::string disk_key;
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;  // same order as GeneratedSource::kernels
  LoadedKernel() = default;
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;
  ~LoadedKernel();
};

// What one variant compiles from, with its content-addressed disk key.
struct PreparedSource {
  GeneratedSource source;
  std::vector<std::string> options;
  std::string disk_key;
};
PreparedSource prepare(const KernelSpec& spec, const TemplateSet& templates = TemplateSet::embedded());

// sha256 over: cache format version, arch, NVRTC version, every option, the generated source,
// and (name, sha256) of every template it includes. No paths, no timestamps.
std::string compute_disk_key(const GeneratedSource& src, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& nvrtc_version, const TemplateSet& templates);

// The in-memory cache key: one loaded module per (device, family, variant, arch). Modules, TMA
// descriptors and shared-memory attributes are per device, so a module loaded on one device is
// never launched on another.
std::string memory_key(const KernelSpec& spec, int device);
// memory_key(spec, device) from this thread's last call when (spec, device) repeat (the steady
// state of a training step), built anew otherwise. The reference is valid until this thread's
// next call: copy it before anything that may look up another variant.
const std::string& memory_key_of_last(const KernelSpec& spec, int device);

// How a background production compiles (the async worker's jobs, src/compile_mode.cpp): in the
// compile helper when one is found, which `cancel` can kill at exit; NVRTC in this process only
// where there is no helper. `in_process` tells the caller that NVRTC ran in this process.
struct BackgroundRoute {
  CompileCancel* cancel = nullptr;
  bool in_process = false;
};

class Runtime {
 public:
  static Runtime& get();
  // The configuration the process-wide runtime (get()) is made with instead of env(): for tools
  // that must not touch the user's cache (`dsa-indexer jitcost`). Only before the first get();
  // returns false (and changes nothing) once it has been made.
  static bool configure_process(const EnvConfig& cfg);
  // Whether this process has made its runtime already (configure_process is then refused).
  static bool process_runtime_made();
  explicit Runtime(const EnvConfig& cfg);

  // The loaded kernel for (device, spec), produced at most once per key at a time. `produced`,
  // when given, tells whether this call produced it (an in-memory miss that succeeded).
  // `background`: a production by the async worker (see BackgroundRoute); null on callers' threads.
  std::shared_ptr<LoadedKernel> kernel(const KernelSpec& spec, int device, bool* produced = nullptr,
                                       BackgroundRoute* background = nullptr);
  // The loaded kernel under `memory_key` if it is resident now, else nullptr; never produces
  // and never waits for a production in flight (LruCache::find: a hit counts, an absence not).
  std::shared_ptr<LoadedKernel> resident(const std::string& memory_key) { return lru_.find(memory_key); }
  // The cubin for a spec from the disk cache or NVRTC (publishing it); needs no GPU.
  // `from_disk` tells which.
  CacheEntry entry(const KernelSpec& spec, bool* from_disk);

  CacheStats stats() const;
  DiskCache& disk() { return disk_; }
  const EnvConfig& config() const { return cfg_; }

 private:
  std::shared_ptr<LoadedKernel> load(const KernelSpec& spec, int device, BackgroundRoute* background);
  CacheEntry entry(const KernelSpec& spec, bool* from_disk, BackgroundRoute* background);
  CacheEntry compile(const PreparedSource& ps, const KernelSpec& spec, BackgroundRoute* background);

  EnvConfig cfg_;
  DiskCache disk_;
  LruCache<std::shared_ptr<LoadedKernel>> lru_;
  std::atomic<uint64_t> compiles_{0};
  std::atomic<uint64_t> disk_hits_{0};
};

}  // namespace dsa_indexer::detail
