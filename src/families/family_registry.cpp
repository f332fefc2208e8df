// The one list of kernel families. Everything that enumerates families (validation, the
// dispatcher, warmup manifests, the tools) goes through it.
#include "dispatch/family.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {

Gate Gate::fail(const char* gate, std::string expected, std::string actual) {
  Gate g;
  g.failed = gate;
  g.expected = std::move(expected);
  g.actual = std::move(actual);
  return g;
}

std::string Family::input_dtypes() const {
  std::string s;
  for (DType d : {DType::bf16, DType::e4m3})
    if (serves_input(d)) s += std::string(s.empty() ? "" : " or ") + dtype_name(d);
  return s;
}

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {&reference_family(), &generic_family(), &lean_family(),
                                                       &topk_unfused_family(), &topk_fused_family(),
                                                       &topk_fused_sweep_family()};
  return all;
}

const Family& family_for(KernelFamily id) {
  for (const Family* f : families())
    if (f->id() == id) return *f;
  fail_param<InvalidArgument>("indexer_forward", "family", fmt::format("automatic or one of {}", family_options()),
                              static_cast<int>(id));
}

bool family_known(KernelFamily id) {
  for (const Family* f : families())
    if (f->id() == id) return true;
  return false;
}

const Family* family_by_option(const std::string& option) {
  for (const Family* f : families())
    if (option == f->option()) return f;
  return nullptr;
}

std::string family_options() {
  std::string s;
  const auto& all = families();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i) s += i + 1 == all.size() ? " or " : ", ";
    s += fmt::format("{} ({})", all[i]->option(), static_cast<int>(all[i]->id()));
  }
  return s;
}

}  // namespace dsa_indexer::detail
