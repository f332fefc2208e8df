#pragma once
// The top-k rows of the command-line tool (issue 20, "Speed"): `dsa-indexer bench --op topk`
// and `dsa-indexer demo --op topk`. Split from dsa_indexer_cli.cpp, which keeps the scores rows
// and the command line; bench/peers.py --op topk runs the same shapes (topk_bench_cases below,
// which python/tests/test_bench_tools.py reads back from this file's source).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsa_cli {

struct TopkBenchOptions {
  int reps = 20;
  std::vector<int> ks = {2048, 512};
  bool quick = false;   // the first two shapes only
  std::string match;    // only the shapes whose name contains it
  uint64_t budget_mib = 0;  // both paths' block budget (0: the library's)
  bool one_wave = false;    // the unfused path's blocks of one wave of rows at least (the old blocking)
  // blocks with explicit windows (THD) on lean's row windows (topk_lean_window_blocks; unset: the
  // library's default, on)
  std::optional<bool> lean_windows;
  std::optional<bool> fused_part;  // the fused sweep's partitioned appends (topk_fused_part; unset: the default)
  bool fp8 = false;  // E4M3 q and k with per-token q and k scales (bench --op topk --in e4m3), W bf16
  bool lse = false;  // every call (scores and top-k) also writes the lse (shape names gain " lse")
  std::optional<bool> select_short;   // rows of at most 4096 cells by sm90_topk_select_short (unset: the default)
  std::optional<bool> select_medium;  // rows of 4097..8192 cells by sm90_topk_select_short<256, 8> (unset: the default)
  std::optional<bool> regs_mid;       // rows of 4097..8192 cells by the narrow register rows (unset: the default)
  std::optional<bool> narrow_long;    // long rows without softmax and lse by 256 threads (unset: the default)
  std::optional<bool> regs_narrow;    // the narrow register rows (unset: the default)
  int regs_ctas = -1;                 // the register rows' first launch: CTAs per SM (0: one per row; -1: the default)
  std::optional<bool> select_regs;    // the general kernels' register rows, sm90_topk_select<T, true> (unset: the default)
  std::optional<bool> lse_lanes;  // BSHD lse in the fused sweep's lane order (topk_lse_lanes; unset: the default)
};

// "2048,512" -> {2048, 512}; throws dsa_indexer::InvalidArgument naming --topk-k for anything
// else than a comma list of integers in [1, 2048].
std::vector<int> parse_topk_ks(const std::string& list);

// Prints the top-k table (needs a Hopper GPU) and returns its rows as JSON objects joined by
// ",\n" (bench --json puts them under "topk_cases").
std::string run_topk_bench(const TopkBenchOptions& o);

// The default DeepSeek-V4-like top-k problem, checked against a reference selection of our own
// scores and timed against the scores alone; 0 when every check passed.
int run_topk_demo();

}  // namespace dsa_cli
