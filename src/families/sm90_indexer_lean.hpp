#pragma once
// sm90_indexer_lean: the per-shape fast path (H 64, D 128, no LSE, no explicit windows).
// BSHD: compiled per (S_q, S_k, W dtype, scale variant); the planner's q-tile order and CTA
// policy are emitted into the source, and the batch size is a launch argument.
// THD: compiled per (W dtype, scale variant, column mode); T_q, T_k, the segment boundaries and
// the offsets are launch arguments (the variant carries one q-tile as T_q), and so is the q-tile order,
// planned per packing from the host cu_seqlens (and memoized per packing).
#include <memory>
#include <vector>

#include "dispatch/family.hpp"
#include "sm90_indexer_lean_args.cuh"

namespace dsa_indexer::detail {

struct LeanGeometry {
  static constexpr int kHeads = 64;  // THD and the fused top-k's sweep; BSHD also 32 and 16
  static constexpr int kThreads = 384;  // two consumer warpgroups
  static constexpr int kTokensPerConsumer = 4;  // H 64 (256 packed token-head rows per consumer)
  static constexpr int kTokensPerTile = 8;      // H 64
  // The q-tile holds 512 packed (token, head) rows whatever the consumer count: two consumers of
  // 256 rows (m64n256), or four of 128 (m64n128).
  static constexpr int threads(int consumers) { return 128 * (consumers + 1); }
  static constexpr int64_t tokens_per_consumer(int64_t heads, int consumers = 2) { return 512 / consumers / heads; }
  static constexpr int64_t tokens_per_tile(int64_t heads) { return 512 / heads; }
  static constexpr bool serves_heads(int64_t heads) { return heads == 64 || heads == 32 || heads == 16; }
  static constexpr int kKvRows = 64;
  static constexpr int kKvStages = 5;
  // FP8 consumes a tile in half bf16's product time and has the shared memory (session 10: 1-2 %
  // faster than 5 stages).
  static constexpr int kKvStagesFp8 = 8;
  // The cost model of the schedule: one q-tile costs its KV tiles plus this many KV-tile
  // equivalents of fixed work (Q and weight loads, the first product's latency, the -inf rows).
  static constexpr double kTileOverhead = 1.0;
  // Mirrors LeanSmem in templates/sm90_indexer_lean.cuh; the kernel static_asserts agreement.
  static int smem_bytes(DType w, int kv_stages = kKvStages, DType qk = DType::bf16, int consumers = 2, bool thd = false,
                        bool split = false, bool lse = false);
  // A kWithLse variant's epilogue scratch, after the barriers: every consumer's 4 warps x its
  // tokens x (max, sum), 512 / H tokens per q-tile whatever the consumer count.
  static constexpr int lse_bytes(int64_t heads) { return static_cast<int>(4 * (512 / heads) * 2 * 4); }
};

// The emitted schedule: q-tiles by rank (runs of the order, longest first) and the CTA policy.
struct LeanSchedule {
  int32_t policy = dsa::kLeanSnake;
  std::vector<dsa::LeanRun> runs;
  int64_t tiles_per_batch = 0;
  int64_t tile_of_rank(int64_t r) const;  // the kernel's LeanWork::item arithmetic
};

// Cost of every q-tile of one batch under the model above, with zero offsets and this ratio
// (for tests: a table of S_q / 8; the planner computes costs on demand).
std::vector<double> lean_tile_costs(int64_t s_q, int64_t s_k, int64_t ratio, int64_t heads = 64);
// Past this many q-tiles per batch the planner does not evaluate the policies: it takes the
// snake, which the evaluation picks on every shape measured (18,000 shapes of 1 to 3,000 tiles
// and 14 S_k each at 65,536 and 262,144 tiles; round-robin never balanced better), and where
// both are within 0.4 % of even (496 rounds of 132 CTAs and more).
inline constexpr int64_t kLeanMaxBalancedTiles = int64_t(1) << 16;
// The planner: the q-tile order of an (S_q, S_k) key and the policy that balances it best.
// The order is ratio-independent (a tile's window never shrinks with its index, whatever the
// ratio), which is why the ratio is not part of the key. Its cost does not grow with S_q past
// kLeanMaxBalancedTiles x 8 (about 2 ms there, on the 2-core box), and it keeps no table
// proportional to S_q: the order is one run, written directly.
LeanSchedule lean_schedule(int64_t s_q, int64_t s_k, int64_t heads = 64);
// max / mean of per-CTA cost when `grid` CTAs run the schedule for `batch` copies of `costs`.
double lean_balance(const LeanSchedule& s, const std::vector<double>& costs, int64_t batch, int64_t grid);

// THD. KV tiles of every q-tile (`tile` tokens: 8, 16, 32 at H 64, 32, 16) of a packing under zero offsets (the planner does not read the
// device q_causal_offsets): the union of the tile's rows' windows, as the kernel sweeps it.
std::vector<int32_t> lean_thd_tile_kv(const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k, int64_t t_q,
                                      int64_t ratio, int64_t tile = LeanGeometry::kTokensPerTile);
// `balanced`: longest first (by cost class), the CTA policy that balances the packing best;
// `static`: the packed q-tiles from the last (the generic family's order). Any order is
// correct; only the balance differs.
enum class LeanThdOrder { balanced = 0, static_order = 1 };
struct LeanThdPlan {
  dsa::LeanThdSchedule sched;  // the launch parameter
  int32_t quantum = 1;         // the cost class width that made the order fit kLeanThdMaxRuns
  double balance = 1.0;        // max / mean per-CTA cost on the launch grid
};
LeanThdPlan lean_thd_plan(const std::vector<int32_t>& kv, int64_t grid, LeanThdOrder order);
// Process-wide, for measuring one order against the other (dsa-indexer bench --thd-order).
void set_lean_thd_order(LeanThdOrder order);

// The scores kernels' consumer warpgroups: 2 (the default) or 4 (each of half the packed rows;
// session 11's experiment, docs/PERF_NOTES.md). Process-wide, for measuring one against the
// other (dsa-indexer bench --family lean4, warmup --lean-consumers) and for the tests; every
// scores variant (BSHD at H 64, 32 and 16, split, THD, bf16 and FP8) has both; the fused top-k's
// sweep keeps 2.
void set_lean_consumers(int consumers);
int lean_consumers();
// Whether the scores kernels' consumers issue their products in the ring of named barriers (the
// default) or free-running, each as soon as its Q and the KV stage are there (session 12's
// experiment for packed batches of short segments, whose per-item Q loads stall the ring;
// dsa-indexer bench --family lean4f, warmup --lean-free). Process-wide, as set_lean_consumers;
// the fused top-k's sweep keeps the ring. The bits are the same either way.
void set_lean_free(bool free_running);
bool lean_free();
// Measurements: device memory of grid x dsa::kLeanTraceRoles x dsa::kLeanTraceWords u32 (the
// grid: at most the SM count) into which every later lean scores launch stamps its roles' phases
// (the kTrace variants, sm90_indexer_lean_args.cuh: LeanTrace); nullptr (the default): none.
// Process-wide, as set_lean_free; tests/gpu/test_lean_trace.cpp and tools/lean_trace.py read it.
void set_lean_trace(uint32_t* device_words);
uint32_t* lean_trace();

// The split variant (templates/sm90_indexer_lean.cuh, sm90_indexer_lean_split): BSHD calls whose
// q-tiles x B are fewer than the SMs cut every q-tile's KV tiles into `parts` chunks of `chunk`
// tiles, one work item each. The cost model assumes every q-tile sweeps all of S_k (rows that end
// at S_k, as chunked prefill's offsets make them; shorter windows leave chunks empty, and those
// cost nearly nothing): items of chunk + kTileOverhead, handed out in rounds of `grid`.
struct LeanSplitPlan {
  int32_t parts = 1, chunk = 0;
  double makespan = 0;  // the model's cost of the busiest CTA, in KV tiles
};
// A chunk is at least this many KV tiles (512 keys): below it the per-item fixed work (Q and
// weights, the first product's latency) outweighs what a better balance could gain.
inline constexpr int32_t kLeanMinChunk = 8;
// At most this many chunks per q-tile (the planner's search, O(1) each, runs per call).
inline constexpr int32_t kLeanMaxParts = 64;
LeanSplitPlan lean_split_plan(int64_t s_k, int64_t base_items, int64_t grid);

const Family& lean_family();

// The lean family's gate, plan, schedule and launch, for a family that runs the same sweep with
// another epilogue (the fused top-k's sweep, sm90_topk_fused.cpp): plan.spec is made `family`'s,
// with extra_smem bytes of shared memory for its epilogue; lean_launch passes `extra` as the
// kernel's last parameter, in the lse's place (nullptr for the scores kernels).
// `split`: whether BSHD calls that cannot fill the grid pass (and are planned split); the fused
// top-k's sweep keeps one item per q-tile (its per-row selection state spans the whole row).
// `ragged_rows`: explicit windows whose S_q is no multiple of the q-tile (the fused top-k's THD
// sweep of a packing's last block, topk_fused_ragged_thd): the row-windows view's rows past S_q
// are rows past T_q, which the THD kernel reads as empty.
Gate lean_check(const Problem& p, const DeviceInfo& dev, bool split = true, bool ragged_rows = false);
std::string lean_gate_key(const Problem& p, const DeviceInfo& dev);
Plan lean_plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose, const Family& family, int extra_smem,
               bool split = true);
void lean_render_schedule(const KernelSpec& spec, GeneratedSource& g);
// `function`: which of the module's kernels (BSHD without a split; another epilogue's module may
// hold one per protocol, the fused top-k's sweep).
void lean_launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream, void* extra, const char* what,
                 int function = 0);
// s_q: S_q (BSHD) or one q-tile (THD: the planner's; the code does not depend on it); s_k: S_k (BSHD) or 0 (THD).
KernelSpec lean_spec(int64_t s_q, int64_t s_k, DType w, bool unit_scale, Layout layout = Layout::bshd,
                     DType qk = DType::bf16, bool split = false, int64_t heads = 64, int consumers = 2, bool lse = false,
                     bool free_running = false, bool row_windows = false);
// The consumer warpgroups of a lean spec (the scores family's or the fused sweep's).
int lean_spec_consumers(const KernelSpec& spec);
// Whether a lean spec is a THD variant (THD, or a B 1 call's row windows), whose kernel takes the
// packing's schedule as a launch parameter.
bool lean_spec_thd(const KernelSpec& spec);
}  // namespace dsa_indexer::detail
