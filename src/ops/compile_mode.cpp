#include "ops/compile_mode.hpp"

#include <pthread.h>

#include <atomic>

#include "jit/background_compiler.hpp"
#include "core/env.hpp"
#include "core/util.hpp"
#include "jit/compile_isolation.hpp"
#include "dispatch/family.hpp"
#include "ops/manifest_recorder.hpp"
#include "jit/runtime.hpp"

namespace dsa_indexer::detail {
namespace {

std::atomic<uint64_t> g_fallbacks{0};
std::atomic<BackgroundCompiler*> g_worker{nullptr};
std::atomic<ManifestRecorder*> g_recorder{nullptr};

// The process's worker, built on the first async fallback and never destroyed (its exit
// handler joins its thread). That handler is registered when the thread starts, so it runs
// before the destructors of the statics constructed before then, and after those of statics
// constructed later: every static with a destructor that a job touches must exist before the
// first offer. The families do (the offering call dispatched through them); their parameter
// tables are touched here; the environment, the runtime, the driver, the embedded templates and
// the disk cache's warning set are never destroyed.
//
// NVRTC is the exception no ordering of ours can cover: it registers exit-time destructors
// during compiles, after our handler, so they run first and a compile still in flight then
// crashes or spins inside NVRTC (issue 24). So jobs compile in the helper process, which the
// exit path kills (the cancel token). Only where no helper is found do they compile in process;
// then NVRTC is initialised here, on the offering thread, before the worker's thread and its
// exit handler exist, and the handler is registered again after every in-process compile:
// that covers every NVRTC destructor registered before the compile in flight began, not one
// that compile registers for a code path first reached (docs/DESIGN.md, "Compile modes").
BackgroundCompiler& worker(const KernelSpec& first) {
  static BackgroundCompiler* w = [&first] {
    for (const Family* f : families()) (void)f->params();
    static CompileCancel* cancel = new CompileCancel();  // process lifetime, as the worker
    ::pthread_atfork([] { cancel->fork_prepare(); }, [] { cancel->fork_parent(); }, [] { cancel->fork_child(); });
    if (compile_helper_path(env().compile_helper).empty()) {
      log_warning("DSA_INDEXER_LEAN_COMPILE=async: the compile helper dsa-indexer-nvrtc-helper was not found (set "
                  "DSA_INDEXER_COMPILE_HELPER), so background compiles run NVRTC in this process, and an exit during "
                  "one is safe only for NVRTC code paths an earlier compile has used");
      try {
        CompileRequest warm;
        warm.source_name = "dsa_nvrtc_warmup.cu";
        warm.source = "extern \"C\" __global__ void dsa_nvrtc_warmup() {}\n";
        warm.options = compile_options(first.arch);
        (void)nvrtc_compile(warm);
      } catch (const std::exception& e) {
        log_warning(fmt::format("NVRTC warm-up before the background worker failed: {}", e.what()));
      }
    }
    auto* c = new BackgroundCompiler(
        [](const BackgroundJob& j) {
          ScopedContext ctx(j.device);  // the worker has no current context of its own
          BackgroundRoute route;
          route.cancel = cancel;
          bool produced = false;
          try {
            Runtime::get().kernel(j.spec, j.device, &produced, &route);
          } catch (...) {
            if (route.in_process) BackgroundCompiler::order_exit_handler_last();
            throw;
          }
          if (route.in_process) BackgroundCompiler::order_exit_handler_last();
          return produced;
        },
        BackgroundCompiler::kDefaultCapacity, nullptr, [] { cancel->cancel(); });
    g_worker = c;
    return c;
  }();
  return *w;
}

ManifestRecorder* recorder() {
  static ManifestRecorder* r = [] {
    ManifestRecorder* m = env().record_manifest.empty() ? nullptr : new ManifestRecorder(env().record_manifest, DeviceInfo::h200());
    g_recorder = m;
    return m;
  }();
  return r;
}

}  // namespace

std::shared_ptr<LoadedKernel> kernel_for_call(const Problem& p, const DeviceInfo& dev, KernelFamily requested, Plan& plan) {
  Runtime& rt = Runtime::get();
  ManifestRecorder* rec = recorder();
  if (env().lean_compile == LeanCompile::async && requested == KernelFamily::automatic && family_of(plan.spec).fast_path()) {
    // Both uses come before anything else on this thread looks up a variant (see the helper).
    const std::string key = memory_key_of_last(plan.spec, p.device);
    std::shared_ptr<LoadedKernel> k = rt.resident(key);
    // A fast path's inner kernels (the fused top-k's sweep of each block shape) are part of it:
    // the call takes it only when every one is resident too.
    bool ready = k != nullptr;
    for (const Problem& s : family_of(plan.spec).inner_problems(p, dev)) {
      const Family& f = choose_family(s, dev, KernelFamily::automatic, false);
      if (!f.fast_path()) continue;
      const KernelSpec inner = make_plan(s, dev, f, PlanPurpose::spec_only).spec;
      const std::string inner_key = memory_key(inner, p.device);
      if (rt.resident(inner_key)) continue;
      ready = false;
      worker(inner).offer(inner_key, inner, p.device);
    }
    if (ready) return k;
    if (!k) worker(plan.spec).offer(key, plan.spec, p.device);
    g_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (rec) rec->record(p, dev, plan.spec);
    plan = make_plan(p, dev, choose_family(p, dev, KernelFamily::automatic, /*fast_paths_disabled=*/true));
  }
  bool produced = false;
  std::shared_ptr<LoadedKernel> k = rt.kernel(plan.spec, p.device, &produced);
  if (produced && rec) rec->record(p, dev, plan.spec);
  return k;
}

void add_compile_mode_stats(CacheStats& s) {
  s.async_fallbacks = g_fallbacks.load(std::memory_order_relaxed);
  if (const BackgroundCompiler* w = g_worker.load()) {
    const BackgroundStats b = w->stats();
    s.background_compiles = b.completed;
    s.background_failures = b.failed;
    s.queue_rejections = b.rejected;
  }
  if (const ManifestRecorder* r = g_recorder.load()) s.recorded_keys = r->stats().recorded;
}

}  // namespace dsa_indexer::detail
