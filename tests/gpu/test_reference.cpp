#include "edge_grid.hpp"

using namespace dsa_gpu_test;

TEST_CASE("reference: BSHD edge grid against the fp64 oracle", "[reference]") { run_edge_grid(KernelFamily::reference); }

TEST_CASE("reference: THD layouts against the fp64 oracle", "[reference]") { run_thd_cases(KernelFamily::reference); }

TEST_CASE("reference: explicit windows", "[reference]") { run_window_cases(KernelFamily::reference); }

TEST_CASE("reference: deterministic, bf16 W == fp32 W bitwise", "[reference]") {
  HostProblem p = bshd(2, 100, 80, 64, 2);
  p.lse = true;
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(KernelFamily::reference, p);
}
