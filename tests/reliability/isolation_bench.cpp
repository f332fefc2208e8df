// The cost of DSA_INDEXER_COMPILE_ISOLATION=process (docs/BENCHMARKS.md, "JIT: compile
// isolation cost"): wall time of compiling one variant in process and through the helper,
// median of N after one warm-up compile of each.
//   dsa_isolation_bench [reps=5] [helper] [reference|generic]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "jit/codegen.hpp"
#include "jit/compile_isolation.hpp"
#include "jit/nvrtc_compiler.hpp"

using namespace dsa_indexer::detail;

namespace {
template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string helper = argc > 2 ? argv[2] : DSA_TEST_HELPER;
  KernelSpec spec = reference_spec(16, dsa_indexer::DType::bf16, false, Layout::bshd);
  if (argc > 3 && std::string(argv[3]) == "generic") spec = generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd);
  const GeneratedSource g = render(spec);
  const CompileRequest req{g.name, g.text, g.kernels, compile_options(spec.arch), nullptr};
  nvrtc_compile(req);
  compile_in_subprocess(req, helper);
  const double in_proc = median_seconds(reps, [&] { nvrtc_compile(req); });
  const double isolated = median_seconds(reps, [&] { compile_in_subprocess(req, helper); });
  // An empty request isolates the process start + NVRTC load from the compile itself.
  CompileRequest trivial{"empty.cu", "__global__ void k() {}\n", {"k"}, compile_options(spec.arch), nullptr};
  const double trivial_in = median_seconds(reps, [&] { nvrtc_compile(trivial); });
  const double trivial_iso = median_seconds(reps, [&] { compile_in_subprocess(trivial, helper); });
  std::printf("compile isolation cost, %s, median of %d\n", g.name.c_str(), reps);
  std::printf("  in-process   %7.1f ms\n  isolated     %7.1f ms\n  overhead     %7.1f ms (%+.0f %%)\n", in_proc * 1e3,
              isolated * 1e3, (isolated - in_proc) * 1e3, 100.0 * (isolated - in_proc) / in_proc);
  std::printf("  trivial kernel: in-process %.1f ms, isolated %.1f ms\n", trivial_in * 1e3, trivial_iso * 1e3);
  return 0;
}
