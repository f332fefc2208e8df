#include <pthread.h>
#include <sys/stat.h>

#include <fstream>
#include <mutex>

#include "jit/compile_isolation.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "jit/runtime.hpp"
#include "core/sha256.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {

LoadedKernel::~LoadedKernel() {
  if (!module) return;
  try {
    ScopedContext ctx(device);
    Driver::get().cuModuleUnload(module);
  } catch (...) {
    // unloading at shutdown after the driver went away: nothing left to release
  }
}

std::string compute_disk_key(const GeneratedSource& src, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& nvrtc_version, const TemplateSet& templates) {
  Sha256 h;
  h.field("dsa-indexer disk key");
  h.field(std::to_string(kCacheFormatVersion));
  h.field(arch);
  h.field(nvrtc_version);
  h.field(std::to_string(options.size()));
  for (const auto& o : options) h.field(o);
  h.field(src.text);
  for (const auto& k : src.kernels) h.field(k);
  for (const auto& name : templates.include_closure(src.text)) {
    h.field(name);
    h.field(templates.hash(name));
  }
  return h.hex_digest();
}

PreparedSource prepare(const KernelSpec& spec, const TemplateSet& templates) {
  PreparedSource p;
  p.source = render(spec);
  p.options = compile_options(spec.arch);
  p.disk_key = compute_disk_key(p.source, p.options, spec.arch, nvrtc_version(), templates);
  return p;
}

namespace {
Runtime* g_process_runtime = nullptr;
std::mutex g_process_config_mu;
bool g_process_runtime_made = false;                    // under g_process_config_mu
std::unique_ptr<EnvConfig> g_process_config_override;  // under g_process_config_mu
}  // namespace

bool Runtime::configure_process(const EnvConfig& cfg) {
  std::lock_guard<std::mutex> lk(g_process_config_mu);
  if (g_process_runtime_made) return false;
  g_process_config_override = std::make_unique<EnvConfig>(cfg);
  return true;
}

bool Runtime::process_runtime_made() {
  std::lock_guard<std::mutex> lk(g_process_config_mu);
  return g_process_runtime_made;
}

Runtime& Runtime::get() {
  // Never destroyed: at exit the driver may already be torn down (a Python interpreter
  // finalizing torch, say), and unloading modules then would crash. The driver releases
  // everything when the process ends.
  static Runtime* rt = [] {
    std::lock_guard<std::mutex> lk(g_process_config_mu);
    g_process_runtime_made = true;
    g_process_runtime = new Runtime(g_process_config_override ? *g_process_config_override : env());
    // A fork while another thread produces a module must leave the child a usable cache: the
    // lock is held across fork(), and the child forgets productions it has no thread for.
    ::pthread_atfork([] { g_process_runtime->lru_.fork_prepare(); }, [] { g_process_runtime->lru_.fork_parent(); },
                     [] { g_process_runtime->lru_.fork_child(); });
    return g_process_runtime;
  }();
  return *rt;
}

Runtime::Runtime(const EnvConfig& cfg)
    : cfg_(cfg), disk_(cfg.disk_cache ? cfg.cache_dir : std::string(), cfg.prebuilt_dir, nvrtc_version()),
      lru_(cfg.cache_capacity) {
  if (cfg.disk_cache && cfg.cache_dir.empty())
    log_warning("no kernel cache directory (set DSA_INDEXER_CACHE_DIR, XDG_CACHE_HOME or HOME): caching in memory only");
}

namespace {
void dump_compile(const std::string& dir, const PreparedSource& ps, const std::string& log, const std::string& cubin) {
  if (dir.empty()) return;
  ::mkdir(dir.c_str(), 0700);
  const std::string stem = fmt::format("{}/{}.{}", dir, ps.source.name, ps.disk_key.substr(0, 16));
  std::ofstream(stem + ".cu") << ps.source.text;
  std::string opts;
  for (const auto& o : ps.options) opts += o + " ";
  std::ofstream(stem + ".log") << "options: " << opts << "\n" << log << "\n";
  if (!cubin.empty()) std::ofstream(stem + ".cubin", std::ios::binary) << cubin;
}
}  // namespace

CacheEntry Runtime::compile(const PreparedSource& ps, const KernelSpec& spec, BackgroundRoute* background) {
  CompileRequest req;
  req.source_name = ps.source.name;
  req.source = ps.source.text;
  req.name_expressions = ps.source.kernels;
  req.options = ps.options;
  CompileOutput out;
  try {
    // The runtime's own config names the helper (not the process environment), so a runtime
    // built from an explicit EnvConfig isolates with the helper that config asks for.
    CompileLimits lim;
    lim.timeout_s = cfg_.compile_timeout_s;
    if (background) {
      // NVRTC registers exit-time destructors of its own during compiles, so an in-process
      // compile still running when the process exits crashes or spins inside NVRTC; a helper
      // is a process that the worker's exit path can kill (docs/DESIGN.md, "Compile modes").
      const std::string helper = compile_helper_path(cfg_.compile_helper);
      lim.cancel = background->cancel;
      background->in_process = helper.empty();
      out = helper.empty() ? nvrtc_compile(req) : compile_in_subprocess(req, helper, lim);
    } else {
      // A child forked mid-compile cannot use NVRTC in process (nvrtc_usable_in_process): its
      // compiles go to the helper when there is one.
      const bool isolate = cfg_.isolation == CompileIsolation::process ||
                           (!nvrtc_usable_in_process() && !compile_helper_path(cfg_.compile_helper).empty());
      out = isolate ? compile_in_subprocess(req, compile_helper_path(cfg_.compile_helper), lim) : nvrtc_compile(req);
    }
  } catch (const CompileError& e) {
    dump_compile(cfg_.dump_dir, ps, e.log(), "");
    throw;
  }
  compiles_.fetch_add(1);
  dump_compile(cfg_.dump_dir, ps, out.log, out.cubin);
  CacheEntry e;
  e.key = ps.disk_key;
  e.nvrtc_version = nvrtc_version();
  e.arch = spec.arch;
  e.source_name = ps.source.name;
  e.kernels = out.lowered_names;
  e.cubin = std::move(out.cubin);
  disk_.store(e);
  return e;
}

CacheEntry Runtime::entry(const KernelSpec& spec, bool* from_disk) { return entry(spec, from_disk, nullptr); }

CacheEntry Runtime::entry(const KernelSpec& spec, bool* from_disk, BackgroundRoute* background) {
  PreparedSource ps = prepare(spec);
  if (auto e = disk_.load(ps.disk_key)) {
    if (e->kernels.size() == ps.source.kernels.size()) {
      disk_hits_.fetch_add(1);
      if (from_disk) *from_disk = true;
      return *e;
    }
  }
  if (from_disk) *from_disk = false;
  return compile(ps, spec, background);
}

std::shared_ptr<LoadedKernel> Runtime::load(const KernelSpec& spec, int device, BackgroundRoute* background) {
  bool from_disk = false;
  CacheEntry e = entry(spec, &from_disk, background);
  ScopedContext ctx(device);
  Driver& d = Driver::get();
  auto k = std::make_shared<LoadedKernel>();
  k->device = device;
  k->spec = spec;
  k->disk_key = e.key;
  CUresult r = d.cuModuleLoadData(&k->module, e.cubin.data());
  if (r != CUDA_SUCCESS && from_disk) {
    // A verified entry the driver still refuses (another driver's cubin): drop it, rebuild.
    log_warning(fmt::format("driver refused cached cubin {} ({}), recompiling", e.source_name, static_cast<int>(r)));
    disk_.remove(e.key);
    e = compile(prepare(spec), spec, background);
    r = d.cuModuleLoadData(&k->module, e.cubin.data());
  }
  if (r != CUDA_SUCCESS) k->module = nullptr;
  d.check(r, "cuModuleLoadData");
  for (const auto& name : e.kernels) {
    CUfunction f = nullptr;
    d.check(d.cuModuleGetFunction(&f, k->module, name.c_str()), "cuModuleGetFunction");
    k->functions.push_back(f);
  }
  // The variant's own shared-memory size (the family computed it once, in its spec).
  if (spec.dynamic_smem > 0)
    for (CUfunction f : k->functions)
      d.check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(spec.dynamic_smem)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  return k;
}

std::string memory_key(const KernelSpec& spec, int device) {
  // "dev{d}/{family}/{shape_key}/{arch}", built without fmt: this runs on every call.
  std::string k = "dev";
  k.reserve(80);
  k += std::to_string(device);
  k += '/';
  k += spec.family->name();
  k += '/';
  k += spec.shape_key();
  k += '/';
  k += spec.arch;
  return k;
}

const std::string& memory_key_of_last(const KernelSpec& spec, int device) {
  thread_local KernelSpec last_spec;
  thread_local int last_device = -1;
  thread_local std::string last_key;
  if (device != last_device || spec != last_spec) {
    last_key = memory_key(spec, device);
    last_spec = spec;
    last_device = device;
  }
  return last_key;
}

std::shared_ptr<LoadedKernel> Runtime::kernel(const KernelSpec& spec, int device, bool* produced, BackgroundRoute* background) {
  // A thread repeating its last variant looks it up without building the key again; a hit is
  // counted and promoted by find() exactly as get_or_create would.
  const std::string& key = memory_key_of_last(spec, device);
  if (std::shared_ptr<LoadedKernel> k = lru_.find(key)) {
    if (produced) *produced = false;
    return k;
  }
  // A copy: producing may run on this thread code that looks up another variant.
  return lru_.get_or_create(std::string(key), [&] { return load(spec, device, background); }, produced);
}

CacheStats Runtime::stats() const {
  LruStats s = lru_.stats();
  CacheStats c;
  c.hits = s.hits;
  c.misses = s.misses;
  c.evictions = s.evictions;
  c.entries = s.entries;
  c.capacity = s.capacity;
  c.compiles = compiles_.load();
  c.disk_hits = disk_hits_.load();
  return c;
}

}  // namespace dsa_indexer::detail
