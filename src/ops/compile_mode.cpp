#include "ops/compile_mode.hpp"

#include <atomic>

#include "jit/background_compiler.hpp"
#include "core/env.hpp"
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
BackgroundCompiler& worker() {
  static BackgroundCompiler* w = [] {
    for (const Family* f : families()) (void)f->params();
    auto* c = new BackgroundCompiler([](const BackgroundJob& j) {
      ScopedContext ctx(j.device);  // the worker has no current context of its own
      bool produced = false;
      Runtime::get().kernel(j.spec, j.device, &produced);
      return produced;
    });
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
    const std::string& key = memory_key_of_last(plan.spec, p.device);
    if (std::shared_ptr<LoadedKernel> k = rt.resident(key)) return k;
    worker().offer(key, plan.spec, p.device);
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
