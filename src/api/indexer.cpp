// The public C++ entry points (include/dsa_indexer/indexer.hpp, topk.hpp) over the operations
// in src/ops/ (docs/DESIGN.md, "The pipeline").
#include "dsa_indexer/indexer.hpp"
#include "dsa_indexer/topk.hpp"

#include "dispatch/family.hpp"
#include "jit/runtime.hpp"
#include "core/util.hpp"
#include "ops/compile_mode.hpp"
#include "ops/forward.hpp"
#include "ops/topk.hpp"

namespace dsa_indexer {

void indexer_forward(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& scores,
                     const IndexerOptions& options, CUstream stream) {
  detail::forward(q, k, w, scores, options, stream);
}

void indexer_topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                  const IndexerOptions& options, const TopkOptions& topk, CUstream stream) {
  detail::topk(q, k, w, indices, options, topk, stream);
}

std::size_t indexer_topk_workspace_size(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                                        const IndexerOptions& options, const TopkOptions& topk) {
  return detail::topk_workspace_size(q, k, w, indices, options, topk);
}

CacheStats kernel_cache_stats() {
  CacheStats s = detail::Runtime::get().stats();
  detail::add_compile_mode_stats(s);
  return s;
}

int kernel_family_count() { return static_cast<int>(detail::families().size()); }

KernelFamilyInfo kernel_family_info(int index) {
  const auto& all = detail::families();
  if (index < 0 || index >= static_cast<int>(all.size()))
    detail::fail_param<InvalidArgument>("kernel_family_info", "index", fmt::format("in [0, {})", all.size()), index);
  const detail::Family& f = *all[static_cast<std::size_t>(index)];
  return KernelFamilyInfo{f.option(), f.id(), detail::operation_name(f.operation())};
}

KernelFamily kernel_family_by_name(const char* name, const char* where) {
  if (name && std::string(name) == "auto") return KernelFamily::automatic;
  if (name)
    if (const detail::Family* f = detail::family_by_option(name)) return f->id();
  std::string names = "'auto'";
  for (const detail::Family* f : detail::families()) names += fmt::format(", '{}'", f->option());
  detail::fail_param<InvalidArgument>(where ? where : "indexer_forward", "family", fmt::format("one of {}", names),
                                      name ? fmt::format("'{}'", name) : std::string("NULL"));
}

const char* version() { return DSA_INDEXER_VERSION; }

}  // namespace dsa_indexer
