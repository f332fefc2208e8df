#include <catch2/catch.hpp>

#include <future>
#include <vector>

#include "jit/codegen.hpp"
#include "dsa_indexer/errors.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "golden_specs.hpp"
#include "dispatch/planner.hpp"

using namespace dsa_indexer::detail;
using dsa_test::all_specs;

namespace {

struct Compiled {
  std::string key;
  CompileOutput out;
  std::string error;
};

std::vector<Compiled> compile_all(const std::vector<KernelSpec>& specs) {
  // NVRTC is thread-safe; two workers halve the wall time on a two-core CI machine.
  std::vector<Compiled> res(specs.size());
  auto work = [&](std::size_t first) {
    for (std::size_t i = first; i < specs.size(); i += 2) {
      GeneratedSource g = render(specs[i]);
      res[i].key = g.name;
      try {
        res[i].out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(specs[i].arch), nullptr});
      } catch (const dsa_indexer::CompileError& e) {
        res[i].error = e.what();
      }
    }
  };
  auto f0 = std::async(std::launch::async, work, 0);
  auto f1 = std::async(std::launch::async, work, 1);
  f0.get();
  f1.get();
  return res;
}

void check_cubins(const std::vector<Compiled>& res, std::size_t kernels_min) {
  for (const auto& r : res) {
    INFO(r.key << "\n" << r.error << "\n" << r.out.log);
    REQUIRE(r.error.empty());
    CHECK(r.out.cubin.size() > 1000);
    CHECK(r.out.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    CHECK(r.out.lowered_names.size() >= kernels_min);
    // no local-memory spills in any variant (ptxas -v report)
    CHECK(r.out.log.find("bytes spill stores") != std::string::npos);
    CHECK(r.out.log.find(" 0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
    CHECK(r.out.log.find("warning") == std::string::npos);
    // no "Potential Performance Loss" notes (C7514 / C7518: ptxas serialized the wgmma)
    CHECK(r.out.log.find("Performance Loss") == std::string::npos);
  }
}
}  // namespace

TEST_CASE("every reference variant compiles to an sm_90a cubin without an include path", "[nvrtc]") {
  check_cubins(compile_all(all_specs(reference_family())), 1);
}

TEST_CASE("every generic variant compiles to an sm_90a cubin without spills", "[nvrtc]") {
  auto res = compile_all(all_specs(generic_family()));
  check_cubins(res, 1);
  for (const auto& r : res) {
    INFO(r.key);
    // every ptxas report line: 0 bytes stack frame (no local memory at all)
    CHECK(r.out.log.find("0 bytes stack frame") != std::string::npos);
  }
}

TEST_CASE("every lean variant of the default manifest compiles without spills", "[nvrtc]") {
  const auto specs = all_specs(lean_family());
  // 20 BSHD shapes: the 4 with S_q 1024 (128 q-tiles) do not saturate 132 SMs and take the
  // split variant; two of the 20 are warmed in both scale variants. 4 THD lines: 3 variants
  // (one q-tile as T_q: the bf16 local lines of T_q 8192 and 16384 share one).
  // The top-k lines' BSHD blocks, within the unfused path's 256 MiB (the S_k 131072 and 262144
  // lines' automatic calls take the fused path; these are the escape hatch's): 4096 x 16384
  // (lean), 1024 x 65536, 512 x 131072 and 256 x 262144 (split; the S_q 16384 / S_k 4096 block
  // is a scores line's shape). The FP8 headline line: its lean FP8 variant. The FP8 window-start
  // line (DeepGEMM's compressed logits): lean's row-windows variant (FP8, local columns). The THD
  // top-k line's blocks: lean's bf16 row-windows variant with key columns.
  CHECK(specs.size() == 32);
  auto res = compile_all(specs);
  check_cubins(res, 1);
  for (const auto& r : res) {
    INFO(r.key);
    CHECK(r.out.log.find("0 bytes stack frame") != std::string::npos);
    // the kernel is the lean template instantiated for this shape's config and schedule
    CHECK(r.out.lowered_names[0].find("sm90_indexer_lean") != std::string::npos);
  }
  // odd shapes too: ragged S_k, the smallest saturating S_q, S_k longer than S_q, and THD
  // variants of both column modes in the scale and weight variants the manifest does not warm
  using dsa_indexer::DType;
  std::vector<KernelSpec> odd = {lean_spec(1056, 1, DType::bf16, true), lean_spec(2048, 999, DType::f32, true),
                                 lean_spec(4096, 8192, DType::bf16, false), lean_spec(1056, 0, DType::f32, true, Layout::thd_global),
                                 lean_spec(2048, 0, DType::bf16, true, Layout::thd_local),
                                 lean_spec(1056, 999, DType::bf16, false), lean_spec(1056, 127, DType::f32, false, Layout::bshd, DType::e4m3)};
  auto odd_res = compile_all(odd);
  check_cubins(odd_res, 1);
  for (const auto& r : odd_res) {
    INFO(r.key);
    // no spills there either (ragged S_k: the fillers' unaligned row ends, session 11)
    CHECK(r.out.log.find("0 bytes stack frame") != std::string::npos);
  }
}

TEST_CASE("compile errors carry the log and the options", "[nvrtc]") {
  CompileRequest req{"broken.cu", "__global__ void k() { this is not cuda; }\n", {"k"}, compile_options("sm_90a"), nullptr};
  try {
    nvrtc_compile(req);
    FAIL("expected a CompileError");
  } catch (const dsa_indexer::CompileError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("broken.cu"));
    CHECK_THAT(e.log(), Catch::Contains("error"));
    CHECK(e.options() == compile_options("sm_90a"));
  }
}

TEST_CASE("a PTX-only target is rejected as an empty cubin", "[nvrtc]") {
  CompileRequest req{"ptx.cu", "extern \"C\" __global__ void k(float* p) { *p = 1.0f; }\n", {"k"}, {"-arch=compute_90a"}, nullptr};
  CHECK_THROWS_WITH(nvrtc_compile(req), Catch::Contains("empty cubin"));
}

TEST_CASE("nvrtc version is known", "[nvrtc]") {
  CHECK(nvrtc_version() != "unknown");
  CHECK(nvrtc_version().find('.') != std::string::npos);
}
