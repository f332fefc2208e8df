// The dispatcher (docs/DESIGN.md, "Dispatch"): which family serves a validated call. A family
// asked for by name serves it or raises UnsupportedConfig naming its failed gate; automatic
// calls take the first family, by priority, whose gate holds. Gates are cheap and throw
// nothing, so validation errors have been raised (by validate) before any JIT; verdicts are
// kept in a bounded LRU keyed by exactly what decides them.
#include <memory>

#include "dispatch/family.hpp"
#include "core/lru_cache.hpp"
#include "core/util.hpp"
#include "cuda/driver.hpp"

namespace dsa_indexer::detail {
namespace {

constexpr std::size_t kVerdictCapacity = 1024;

LruCache<std::shared_ptr<const Gate>>& verdicts() {
  static auto* cache = new LruCache<std::shared_ptr<const Gate>>(kVerdictCapacity);  // process lifetime
  return *cache;
}

const Gate& verdict(const Family& f, const Problem& p, const DeviceInfo& dev) {
  static const Gate kPass;
  std::string key = f.gate_key(p, dev);
  if (key.empty()) return kPass;  // the family serves every validated problem
  key = std::to_string(dev.ordinal) + '/' + f.name() + '/' + key;
  // The cached pointer keeps the verdict alive for the caller even if it is evicted meanwhile.
  thread_local std::shared_ptr<const Gate> held;
  held = verdicts().get_or_create(key, [&] { return std::make_shared<const Gate>(f.check(p, dev)); });
  return *held;
}

// Whether the family implements the call's operation from the call's input precision: checked
// before any gate, so a family's gate only ever sees problems of its own operation and inputs.
bool serves_kind(const Family& f, const Problem& p) { return f.operation() == p.op && f.serves_input(p.qk_dtype); }

}  // namespace

const Family& choose_family(const Problem& p, const DeviceInfo& dev, KernelFamily requested, bool fast_paths_disabled) {
  const char* where = p.op == Operation::topk ? "indexer_topk" : "indexer_forward";
  if (requested != KernelFamily::automatic) {
    const Family& f = family_for(requested);
    if (f.operation() != p.op)
      fail_param<UnsupportedConfig>(where, fmt::format("family {}: operation", f.option()), operation_name(f.operation()),
                                    operation_name(p.op));
    if (!f.serves_input(p.qk_dtype))
      fail_param<UnsupportedConfig>(where, fmt::format("family {}: q/k dtype", f.option()), f.input_dtypes(),
                                    dtype_name(p.qk_dtype));
    if (f.fast_path() && fast_paths_disabled)
      fail_param<UnsupportedConfig>(where, fmt::format("family {}", f.option()),
                                    "DSA_INDEXER_DISABLE_LEAN unset or false", "it is true (fast paths are off)");
    const Gate& g = verdict(f, p, dev);
    if (!g.passed())
      fail_param<UnsupportedConfig>(where, fmt::format("family {}: {}", f.option(), g.failed), g.expected, g.actual);
    return f;
  }
  const Family* best = nullptr;
  for (const Family* f : families()) {
    if (f->auto_priority() <= 0 || !serves_kind(*f, p) || (f->fast_path() && fast_paths_disabled)) continue;
    if (best && f->auto_priority() <= best->auto_priority()) continue;
    if (!f->auto_applies(p, dev)) continue;
    if (verdict(*f, p, dev).passed()) best = f;
  }
  if (!best) {
    fail_param<UnsupportedConfig>(where, "family", fmt::format("a family of operation {} that serves the call", operation_name(p.op)),
                                  "none");
  }
  return *best;
}

void launch_forward(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) {
  if (plan.empty) return;
  const Family& f = family_of(plan.spec);
  if (p.op != Operation::scores || plan.workspace_bytes == 0 || p.workspace) {
    f.launch(p, plan, k, stream);  // (the top-k operation brings its own workspace: ops/topk.cpp)
    return;
  }
  // A scores plan's workspace (lean split's lse partial sums) comes from the stream-ordered
  // pool for the launch: the scores API takes none from the caller.
  StreamScratch ws(plan.workspace_bytes, stream, "scores workspace");
  Problem with_ws = p;
  with_ws.workspace = ws.get();
  f.launch(with_ws, plan, k, stream);
  ws.free();
}

DispatchStats dispatch_stats() {
  const LruStats s = verdicts().stats();
  return DispatchStats{s.hits, s.misses, s.entries};
}

}  // namespace dsa_indexer::detail
