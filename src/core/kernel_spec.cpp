#include "core/kernel_spec.hpp"

namespace dsa_indexer::detail {

std::string KernelSpec::shape_key() const {
  std::string k;
  k.reserve(48);
  if (!family) return k;
  const auto& ps = family->params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamDesc& d = ps[i];
    if (!d.key || (d.omit_zero && values[i] == 0)) continue;
    if (!k.empty()) k += '.';
    k += d.key;
    const int64_t v = values[i];
    switch (d.kind) {
      case ParamDesc::integer: k += std::to_string(v); break;
      case ParamDesc::boolean: k += v ? '1' : '0'; break;
      case ParamDesc::choice: k += (v >= 0 && v < d.n_choices) ? d.choices[v] : "?"; break;
    }
  }
  return k;
}

std::string KernelSpec::variant_key() const {
  return std::string(family ? family->name() : "?") + '/' + shape_key() + '/' + arch;
}

bool KernelSpec::operator==(const KernelSpec& o) const {
  return family == o.family && values == o.values && dynamic_smem == o.dynamic_smem && arch == o.arch;
}

}  // namespace dsa_indexer::detail
