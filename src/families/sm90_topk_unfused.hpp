#pragma once
// sm90_topk_unfused: the top-k operation as scores of a bounded block of rows into the workspace
// (by the score family the dispatcher picks for the block) followed by an exact radix selection
// (templates/sm90_topk_unfused.cuh, sm90_topk_select.cuh). Serves every top-k call; the
// reference the fused families must equal bit for bit.
#include <functional>
#include <optional>

#include "dispatch/family.hpp"
#include "sm90_topk_select_args.cuh"
#include "sm90_topk_unfused_args.cuh"

namespace dsa_indexer::detail {

const Family& topk_unfused_family();
KernelSpec topk_unfused_spec(Layout layout);

// The selection kernel of a loaded top-k variant (`plan` its plan) over a.n_rows score rows of at
// most `width` visible columns: what launch() runs after each block's scores, exposed so that a
// tool can time the selection alone on score rows it holds (dsa-indexer bench --op topk).
// Rows that fit the short-row kernel take it (topk_select_short, topk_select_short_fits).
// fitting_rows: how many of the rows the caller knows to see at most kTopkRegsCells cells
// (topk_rows_within), which decides whether a long-row launch takes the register rows
// (topk_select_regs_take); it changes the launches, never the bits.
void launch_topk_select(const Plan& plan, const LoadedKernel& k, const dsa::TopkSelectArgs& a, int64_t width, int64_t fitting_rows,
                        CUstream stream);
// Whether every row of `a` of at most `width` visible cells fits `cells` (kTopkShortCells:
// sm90_topk_select_short<256>; kTopkMediumCells: its 8-word variant) with its alignment.
bool topk_select_short_fits(const dsa::TopkSelectArgs& a, int64_t width, int64_t cells = dsa::kTopkShortCells);
// BSHD blocks with an lse output: the rows' lse in the fused sweep's order (sm90_topk_lse.cuh),
// over the block's scores and rows of `a` (launch 3 / function 3 of the unfused plan).
void launch_topk_lse(const Plan& plan, const LoadedKernel& k, const dsa::TopkSelectArgs& a, float* lse, int64_t stride,
                     CUstream stream);

inline constexpr int kTopkRowsThreads = 256;  // sm90_topk_rows' block
// The selection's block size for rows of at most `width` columns (256 or 512). The softmax's
// fixed summation order depends on it, so the fused path's selection takes the same.
int topk_select_threads(int64_t width);

// The workspace plan of one call, a pure function of the shapes and the device (exposed for tests).
struct TopkBlocking {
  int64_t rows = 0;             // rows per block (at most)
  int64_t width = 0;            // key columns per block (at most): the workspace row length
  uint64_t scores_bytes = 0;    // rows x width fp32
  uint64_t ks_offset = 0, ke_offset = 0, rows_offset = 0;  // byte offsets of the per-row arrays
  uint64_t offset_offset = 0;   // byte offset of the block's q_causal_offsets (one int32)
  uint64_t extra_offset = 0;    // a family's own region after these (the fused top-k's split redo)
  uint64_t total_bytes = 0;
};
// budget: the bytes of block scores the planner aims for (the workspace may exceed it when
// min_rows rows need more); 0 takes the default. row_bytes: the workspace bytes of one row (0: a
// row of fp32 scores, width x 4; the fused top-k: its candidate buffer). min_rows: the fewest
// rows of a block (0: one 8-row q-tile per SM, one wave).
TopkBlocking topk_blocking(const Problem& p, const DeviceInfo& dev, uint64_t budget = 0, uint64_t row_bytes = 0,
                           int64_t min_rows = 0);
// The unfused path's blocks stay within kTopkDefaultBudget at any S_k: past about 63k keys (one
// wave of 8-row q-tiles needs more on 132 SMs) a block holds fewer rows than the SMs' q-tiles
// and lean's split variant scores it (session 22, docs/PERF_NOTES.md: the same time as one-wave
// blocks at S_k 65536, 3-7 % more at 131072-262144, where one-wave blocks took 0.5-1 GiB).
// Measurements: another budget (0: the default) and the old one-wave blocks.
void set_topk_unfused_blocking(uint64_t budget, bool one_wave);
// Blocks with explicit windows (THD; BSHD past S_k x ratio 2^31) on lean's row-windows variant,
// their score calls padded to whole q-tiles (TopkBlock::n_win), instead of generic (the variant's
// code does not depend on the height, so one compile serves every block; the padding's windows
// are empty and the workspace rows the selection reads keep their places). Checked on a GPU in
// session 23 (`tools/gpu_session.sh s22d`; set_topk_lean_window_blocks(false): generic, as before).
inline constexpr bool kTopkLeanWindowBlocks = true;
bool topk_lean_window_blocks();
void set_topk_lean_window_blocks(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// The lse of BSHD calls in the fused sweep's lane order (templates/sm90_topk_lse.cuh): the unfused
// path's blocks take it from sm90_topk_lse, and the fused path serves lse calls (its sweep's
// kTopkLse). Built in session 25: on an H100 bitwise equal between the paths in every protocol,
// within 1e-6 of the two-pass sum, special cells as the oracle ([topk_lse]); but the unfused
// replay cost that path 40 % at S_k 131072 (session 26, docs/PERF_NOTES.md), so off: BSHD keeps
// the selection's fp64 two-pass sum, and the fused path refuses lse, unless a test turns it on.
inline constexpr bool kTopkLseLanes = false;
bool topk_lse_lanes();
void set_topk_lse_lanes(std::optional<bool> on);  // tests (nullopt: kTopkLseLanes)
// Rows of at most 4096 cells (BSHD S_k <= 4096, THD max_seqlen_k <= 4093) selected by
// sm90_topk_select_short<256>: the row in registers, 40 KB of shared memory, the same bits as
// sm90_topk_select<256> (templates/sm90_topk_select.cuh). On since session 27: on an H100 bitwise
// equal to the general kernel and the oracle ([topk_short]), and the selection of the S_q 16384 /
// S_k 4096 ratio-4 row 281.2 µs against 389.9 (docs/PERF_NOTES.md).
inline constexpr bool kTopkSelectShort = true;
bool topk_select_short();
void set_topk_select_short(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// Rows of 4097..8192 cells (BSHD S_k <= 8192, THD max_seqlen_k <= 8189) by the 8-word variant,
// sm90_topk_select_short<256, 8> (2 CTAs per SM, 32 keys a thread in registers), the same bits
// as sm90_topk_select<256>. Built in session 27 without a GPU: off until one checks and times it.
// Session 28 on an H100: its selection of the S_q 16384 / S_k 8192 ratio-2 row took 656.0 µs
// against the general kernel's 601.6 (docs/PERF_NOTES.md), so it stays off.
inline constexpr bool kTopkSelectMedium = false;
bool topk_select_medium();
void set_topk_select_medium(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// The register rows: a selection of long rows (width past 8192: BSHD S_k, THD max_seqlen_k; 512
// threads) runs two launches, with the same block size and so the same bits:
// sm90_topk_select_short<512> selects the rows of at most 8192 cells from registers, then
// sm90_topk_select<512, true> the others. Built in session 28: on an H100 both kernels held the
// general kernel's bits and the oracle, the whole path with them passed, racecheck and memcheck
// clean (session 29 racecheck of the two-launch case: 0 hazards). Session 29 timed it on an H100
// (docs/PERF_NOTES.md): the THD bench row's selection (nearly every row within 8192 cells) 546.6
// µs against 626.0, and the BSHD long rows, where no row fits and the first launch only skips,
// 4-10 % slower (S_k 16384: 602.3 against 547.9; B 4: 1183.7 / 1119.0; S_k 65536: 1354.5 /
// 1313.1). So it is a policy (kTopkSelectRegs): a long-row launch takes the register rows where
// at least half of its rows are known to fit (topk_rows_within); mixtures in between are
// unmeasured. set_topk_select_regs(true / false) forces them on / off (tests, measurements);
// nullopt: the policy.
inline constexpr bool kTopkSelectRegs = true;
// Cells a register row holds with its alignment (topk_select_short_fits' width + 3 <= 8192).
inline constexpr int64_t kTopkRegsCells = 8189;
bool topk_select_regs_take(int64_t fitting_rows, int64_t n_rows);
void set_topk_select_regs(std::optional<bool> on);  // tests and measurements (nullopt: the policy)
// The narrow register rows (on since session 29): in a register-rows selection of a call without
// softmax and lse, whose outputs (the unique selected set's indices and values) do not depend on
// the block size, the rows of at most 4096 cells are selected first by
// sm90_topk_select_short<256> (4 CTAs per SM against 2 of 512 threads), then
// sm90_topk_select_short<512> skips them (TopkSelectArgs::skip_words). Calls with softmax or lse
// keep the 512-thread kernels, whose summation order those bits follow. On an H100 (session 29,
// docs/PERF_NOTES.md): indices and values bitwise the 512-thread path's (and every output with
// softmax, which keeps that path), memcheck clean; the THD bench row's selection 492.9 µs against
// 549.3 at k 2048, 481.4 against 563.2 at k 512.
inline constexpr bool kTopkSelectRegsNarrow = true;
bool topk_select_regs_narrow();
void set_topk_select_regs_narrow(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// Long rows by 256 threads (built in session 29, on since session 30 up to kTopkNarrowLongCells): a
// long-row selection (width past 8192) that does not take the register rows, in a call without
// softmax and lse, runs sm90_topk_select<256> instead of <512>: the same outputs (no output of
// such a call depends on the block size), and with 56 KB of shared memory and 64 registers a
// thread, 4 CTAs (rows in flight) per SM against 2. On an H100 (session 30, docs/PERF_NOTES.md;
// the selection alone, warm µs, 512 -> 256 threads): S_q 8192 / S_k 16384 556.2 -> 506.1 (k
// 2048) and 537.7 -> 475.9 (k 512); B 4 1124.8 -> 1044.8 and 1057.9 -> 1009.9; but S_k 65536
// 1319.5 -> 1444.1 and 1258.4 -> 1353.8, slower. So widths up to 16384 only (between 16384 and
// 65536 not timed); set_topk_select_narrow_long(true) forces it at every width, false off.
inline constexpr bool kTopkSelectNarrowLong = true;
inline constexpr int64_t kTopkNarrowLongCells = 16384;
void set_topk_select_narrow_long(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// Rows of 4097..8192 cells by the narrow register rows (built in session 29, on since session 30):
// a selection of width 4097..8192 (256 threads, the general kernel: the ratio-2 row's 606 µs
// against cuDNN's 463 in session 28) in a call without softmax and lse runs the narrow register
// rows' three launches instead (sm90_topk_select_short<256> for rows of at most 4096 cells,
// sm90_topk_select_short<512> for those of at most 8192, the general sm90_topk_select<512, true>
// for the rows whose alignment pushes them past 2048 words): the same outputs. On an H100
// (session 30, the ratio-2 row S_q 16384 / S_k 8192, the selection alone, warm µs): 599.2 ->
// 554.2 at k 2048, 579.2 -> 531.2 at k 512. Needs topk_select_regs_narrow; not taken where
// set_topk_select_regs(false) forces the register rows off.
inline constexpr bool kTopkSelectRegsMid = true;
bool topk_select_regs_mid();
void set_topk_select_regs_mid(std::optional<bool> on);  // tests and measurements (nullopt: the default)
// Measurements: the grid of the register rows' first launch (sm90_topk_select_short<512>), CTAs
// per SM (0: one CTA per row; negative: the default, the general launch's 8 per SM).
void set_topk_select_regs_ctas(int ctas_per_sm);
// Whether the unfused path's blocks of this call would hold fewer rows than half a wave of
// q-tiles (S_k past about 127k keys at 256 MiB on 132 SMs): where the fused path, whose
// candidate rows are 8-16x shorter, keeps full blocks in less memory (its automatic policy at k
// 2048: topk_fused_automatic).
bool topk_unfused_short_blocks(const Problem& p, const DeviceInfo& dev);
inline constexpr uint64_t kTopkDefaultBudget = uint64_t(256) << 20;

// The blocks of rows both top-k paths walk (the fused one builds on the unfused one's).
struct TopkBlock {
  int64_t batch = 0, row0 = 0, n = 0;  // BSHD: batch and first row; THD: first packed row
  int64_t k_base = 0, width = 0;       // the block's key rows [k_base, k_base + width)
  int64_t out_row = 0;                 // the block's first output row
  int64_t n_win = 0;                   // rows of the block's score call: n, or with explicit
                                       // windows n rounded up to whole 8-row q-tiles where the
                                       // call has those rows (the padding's windows are empty)
  int64_t score_rows() const { return n_win > n ? n_win : n; }  // (n_win 0: not set, n)
};
// The width that picks block b's selection block size: BSHD the block's (S_k); THD the call's
// max_seqlen_k. THD blocks group segments up to a width the path's blocking decides (the unfused
// path's score rows or the fused path's candidate buffers hold other row counts; the fused
// path's row-range blocks span any keys), so a block's own width would make the softmax's bits
// depend on the path and the workspace budget; the call's makes them the same on both paths.
int64_t topk_select_width(const Problem& p, const TopkBlock& b);
// The rows of block b known on the host to see at most `cells` keys: a row sees at most its
// segment's keys (BSHD S_k, THD its segment's), and without q_causal_offsets and explicit windows
// exactly its causal limit at offset 0; with them a longer segment's rows count as not fitting.
int64_t topk_rows_within(const Problem& p, const TopkBlock& b, int64_t cells);
// Calls f(block) for every block of the call, in output-row order. `shapes_only`
// (inner_problems): at least one block of every distinct (rows, width) shape, skipping the
// blocks whose shape an earlier one already had, so that a line of 2^31 rows costs a few blocks.
void for_each_topk_block(const Problem& p, const TopkBlocking& bl, const std::function<void(const TopkBlock&)>& f,
                         bool shapes_only = false);
// THD: blocks of bl.rows consecutive packed rows whatever their segments (the last one the rest),
// each over the keys of the segments it touches (its width may pass max_seqlen_k): the fused
// path's row-range blocks (topk_fused_thd_rows), whose candidate rows do not scale with the keys.
void for_each_topk_row_block(const Problem& p, const TopkBlocking& bl, const std::function<void(const TopkBlock&)>& f);
// Whether a BSHD block is a causal problem of its own (then the fast score families serve it).
bool topk_causal_blocks(const Problem& p);
// The score problem of one block (a BSHD problem of one batch entry over the block's rows and
// keys) writing into `scores`; windows from the rows kernel's ks/ke or the block's offset.
Problem topk_block_problem(const Problem& p, const TopkBlock& b, void* scores, const int32_t* ks, const int32_t* ke,
                           const int32_t* offset);
// The rows kernel's arguments for a call (the per-row arrays in the workspace at `ws`), and its
// launch for one block: every row's window, as ks/ke, the block's offset and TopkRow.
dsa::TopkBlockArgs topk_rows_args(const Problem& p, const TopkBlocking& bl, unsigned char* ws);
void launch_topk_rows(const Plan& plan, const LoadedKernel& k, dsa::TopkBlockArgs& rb, const TopkBlock& b, CUstream stream);

// The selection's rows and outputs for block b, into either selection kernel's arguments
// (TopkSelectArgs, TopkCandArgs: the same output fields): the rows kernel's TopkRows, k, the
// slot order, and the block's rows of indices, values and softmax.
template <class SelectArgs>
void set_topk_outputs(SelectArgs& a, const Problem& p, const TopkBlock& b, const dsa::TopkRow* rows) {
  const int64_t K = p.topk.k;
  a.rows = rows;
  a.n_rows = b.n;
  a.k = static_cast<int32_t>(K);
  a.sort_by_score = p.topk.sort_by_score ? 1 : 0;
  a.indices = static_cast<int32_t*>(p.topk.indices) + b.out_row * K;
  a.indices_ld = K;
  if (p.topk.values) {
    a.values = static_cast<float*>(p.topk.values) + b.out_row * K;
    a.values_ld = K;
  }
  if (p.topk.softmax) {
    a.softmax = static_cast<float*>(p.topk.softmax) + b.out_row * K;
    a.softmax_ld = K;
  }
}

}  // namespace dsa_indexer::detail
