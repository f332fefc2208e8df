#pragma once
// Compile variants with NVRTC (no GPU needed) and check what every tested variant must show: a
// cubin, no spills, no stack frame and no serialized wgmma in any of its kernels, the first of which
// has `kernel` in its name.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/kernel_spec.hpp"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "process_support.hpp"

namespace dsa_test {

// launch_regs (when not 0): the registers per thread ptxas must report, which is what a kernel
// that moves registers between warpgroups with setmaxnreg launches with (its static_assert on
// the pool assumes it).
inline void check_compiles_without_spills(const std::vector<dsa_indexer::detail::KernelSpec>& specs, const std::string& kernel,
                                          int launch_regs = 0) {
  using namespace dsa_indexer::detail;
  for (const KernelSpec& spec : specs) {
    const GeneratedSource g = render(spec);
    INFO(g.name);
    const CompileOutput out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(spec.arch), nullptr});
    CHECK_FALSE(out.cubin.empty());
    INFO(out.log);
    // each kernel of the module (ptxas reports every one): no spills, no stack frame
    const int n = static_cast<int>(g.kernels.size());
    CHECK(count_of(out.log, " bytes spill stores") == n);
    CHECK(count_of(out.log, " 0 bytes spill stores, 0 bytes spill loads") == n);
    CHECK(count_of(out.log, " 0 bytes stack frame") == n);
    CHECK(out.log.find("Performance Loss") == std::string::npos);  // C7514 / C7518: serialized wgmma
    if (launch_regs) CHECK(out.log.find("Used " + std::to_string(launch_regs) + " registers") != std::string::npos);
    REQUIRE(static_cast<int>(out.lowered_names.size()) == n);
    CHECK(out.lowered_names[0].find(kernel) != std::string::npos);
  }
}

}  // namespace dsa_test
