#pragma once
// The FP8 (E4M3) rows of the command-line tool (issue 22, "Speed"): `dsa-indexer bench --in
// e4m3`. Split from dsa_indexer_cli.cpp, which keeps the bf16 rows and the command line;
// bench/peers.py --precision fp8 runs the same shapes (fp8_bench_cases below, which
// python/tests/test_bench_tools.py reads back from this file's source).
#include <cstdint>
#include <string>
#include <vector>

#include "host_problem.hpp"

namespace dsa_cli {

struct Fp8BenchOptions {
  int reps = 20;
  // The families of the FP8 rows, as --family takes them; "auto" is tried and shows "not
  // served" with the library's reason while the automatic choice does not take e4m3.
  std::string families = "generic,lean,auto";
  bool quick = false;   // the headline shape only
  std::string match;    // only the shapes whose name contains it
};

struct Fp8Case {
  std::string name;
  dsa_support::HostProblem p;  // the bf16 problem; its FP8 inputs are its per-row quantization
};

// BSHD, B 1, H 64, D 128, sm_scale 0.125, bf16 W. `end_at_sk`: q_causal_offsets S_k - S_q - 1, so
// that row i sees keys [0, i + S_k - S_q) (DeepGEMM's fp8_mqa_logits benchmark windows, ks 0 and
// ke i + S_k - S_q; the rows of a prefill chunk at the end of its context).
dsa_support::HostProblem fp8_bshd(int64_t sq, int64_t sk, int64_t ratio, bool end_at_sk);

// Issue 22's shapes, the headline first (bench/peers.py's fp8_cases: the same list, same order).
std::vector<Fp8Case> fp8_bench_cases();

// The sampled rows the check compares with the fp64 oracle: the first and last rows, both sides
// of every 64-row q-tile boundary near the ends, and rows spread evenly between.
std::vector<int64_t> fp8_check_rows(int64_t rows);

// Prints the FP8 table (needs a Hopper GPU) and returns the JSON members it adds to bench's
// file ("fp8_gemm_ceiling", "fp8_bf16_gemm_ceiling", "fp8_cases", "fp8_checks", "fp8_targets"),
// without the enclosing braces. *checks_ok: every FP8 row that ran passed its check, was
// bitwise equal to generic FP8 and run to run (the speed targets do not count).
std::string run_fp8_bench(const Fp8BenchOptions& o, bool* checks_ok = nullptr);

}  // namespace dsa_cli
