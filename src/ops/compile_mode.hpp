#pragma once
// Which loaded kernel serves a planned call, under the two compile modes
// (DSA_INDEXER_LEAN_COMPILE) and the shape recording (DSA_INDEXER_RECORD_MANIFEST); see
// docs/DESIGN.md, "Compile modes".
//  - sync (the default): the plan's variant, produced on this thread if it is not loaded.
//  - async: an automatic call whose family is a fast path (Family::fast_path) and whose variant
//    is not resident runs the family the dispatcher picks with fast paths off (same bits), and
//    the variant goes to the process's background worker (background_compiler.hpp); `plan` is
//    then replaced by the fallback's plan. A family asked for by name is always sync.
//  - recording: the variant a call produced, and in async mode the fast-path variant it waits
//    for, go to the process's ManifestRecorder.
#include <memory>

#include "dsa_indexer/indexer.hpp"
#include "dispatch/planner.hpp"

namespace dsa_indexer::detail {

struct LoadedKernel;

std::shared_ptr<LoadedKernel> kernel_for_call(const Problem& p, const DeviceInfo& dev, KernelFamily requested, Plan& plan);

// Adds the counters of the worker, of the fallbacks and of the recorder to `s`.
void add_compile_mode_stats(CacheStats& s);

}  // namespace dsa_indexer::detail
