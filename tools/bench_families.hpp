#pragma once
// The families of a bench row list (--family), shared by the bf16 and FP8 tables: auto, every
// family's option, lean4, the lean family with four consumer warpgroups (session 11's
// experiment, docs/PERF_NOTES.md), which runs as lean with set_lean_consumers(4), lean4f, lean4
// with free-running consumers (set_lean_free, session 12's experiment), and leanf, lean's two
// consumers free-running.
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

#include "dispatch/family.hpp"
#include "dsa_indexer/errors.hpp"
#include "families/sm90_indexer_lean.hpp"

namespace dsa_cli {

struct BenchFamily {
  std::string name;                 // as --family spelled it: the row's family column
  dsa_indexer::KernelFamily family;
  int lean_consumers = 2;           // what set_lean_consumers takes while the row runs
  bool lean_free = false;           // and set_lean_free
  // The process-wide lean consumer count of this row (2 for every family but lean4 and lean4f)
  // and whether its consumers run free (lean4f, leanf).
  void apply() const {
    dsa_indexer::detail::set_lean_consumers(lean_consumers);
    dsa_indexer::detail::set_lean_free(lean_free);
  }
};

inline std::vector<BenchFamily> bench_families(const std::string& list) {
  namespace dd = dsa_indexer::detail;
  std::vector<BenchFamily> v;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name == "auto") {
      v.push_back({name, dsa_indexer::KernelFamily::automatic});
      continue;
    }
    if (name == "lean4" || name == "lean4f") {
      v.push_back({name, dsa_indexer::KernelFamily::lean, 4, name == "lean4f"});
      continue;
    }
    if (name == "leanf") {
      v.push_back({name, dsa_indexer::KernelFamily::lean, 2, true});
      continue;
    }
    const dd::Family* f = dd::family_by_option(name);
    if (!f)
      throw dsa_indexer::InvalidArgument(
          fmt::format("--family: expected a comma list of auto, lean4, lean4f, leanf, {}; got '{}'", dd::family_options(), name));
    v.push_back({name, f->id()});
  }
  return v;
}

}  // namespace dsa_cli
