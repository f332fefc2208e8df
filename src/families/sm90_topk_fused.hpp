#pragma once
// sm90_topk_fused: the top-k operation without score rows in memory. Per block of rows (the
// unfused path's blocks, sm90_topk_unfused.hpp): the rows kernel, then the lean sweep with a
// selection epilogue (family sm90_topk_fused_sweep, Operation::topk_sweep, through the
// dispatcher: templates/sm90_topk_fused_sweep.cuh) appends each row's candidates to a bounded
// buffer, and the candidates kernel (sm90_topk_candidates.cuh) selects each row's top-k.
// Bitwise equal to sm90_topk_unfused (indices, values, softmax); BSHD bf16 blocks the lean family
// serves, without lse (the unfused path serves the rest).
#include <cstdint>
#include <optional>

#include "dispatch/family.hpp"

namespace dsa_indexer::detail {

const Family& topk_fused_family();
const Family& topk_fused_sweep_family();

// Candidate entries per row of a call. The sampled sweep (the default): its sample, m (at most
// about 1024), plus the cells above the cut, about r s_k / m with r = e + margin sqrt(e) and
// e = k m / s_k, with room for 6 relative deviations 1 / sqrt(r) (k 2048: 5356 at S_k 16384,
// 6376 at 32768, 7992 at 65536, 10304 at 131072); the exact sweep: min(max(4k, 1024),
// 8192). Never more than S_k + 64 (a row's cells and a tile), at least k + 64 (one tile past k,
// so that a compaction always has room), a multiple of 4, at most kLeanTopkMaxLd (16384; lists
// longer than 8192, the candidates kernel's shared-memory staging, it reads from global memory).
// DSA_INDEXER_TOPK_CANDIDATES or set_topk_fused_candidates (tests: a tiny buffer forces
// compactions) replace the planned value, still at least k + 64.
int64_t topk_fused_candidates(int64_t k, int64_t s_k);
// Whether the planned value fits kLeanTopkMaxLd uncapped (a capped buffer overflows on most rows,
// which the exact redo then sweeps again).
bool topk_fused_candidates_fit(int64_t k, int64_t s_k);
// Process-wide override of the planned value (0: none), for tests and measurements.
void set_topk_fused_candidates(int64_t entries);
// The candidate buffers' bytes a block of rows aims for: the unfused path's budget, so that the
// long-S_k calls automatic calls send here use less workspace than the unfused path would
// (session 22, an H100: at S_k 65536-262144 the same time as blocks of 512 MiB within the run's
// spread; sessions 15-21 used 512 MiB, one block for S_q 8192 up to S_k 65536). Bounds the
// workspace independently of S_k up to the sweep's kLeanTopkMaxLd entries per row.
inline constexpr uint64_t kTopkFusedBudget = uint64_t(256) << 20;
// Automatic top-k calls take the fused path where its gates hold, k is at least
// kTopkFusedAutoMinK and the unfused path's blocks would hold under half a wave of rows
// (topk_unfused_short_blocks: long S_k); elsewhere the unfused path, which is faster there
// (session 22, an H100: the fused path up to 11 % slower at S_k 16384-65536, 19-34 % at ratio 4;
// session 33: k 512 and 1024 at S_k 262144; docs/PERF_NOTES.md).
// Appends to a row between refreshes of its threshold from its histograms; 0: no histograms are
// kept while sweeping, the threshold rises at compactions only.
inline constexpr int32_t kTopkFusedRefresh = 32;
// The refresh the sweeps use: kTopkFusedRefresh, or the process-wide override (tests and
// measurements time both modes; negative: none).
int32_t topk_fused_refresh();
void set_topk_fused_refresh(int32_t refresh);
// The sweep's threshold: sampled (the default) or exact. Sampled, a block's sweep takes its
// sample tiles first (every s-th KV tile of a q-tile's, s = lean_topk_sample_stride(S_k): a
// sample of at most about 1024 cells per row), each consumer warp finds a row's threshold, the
// key of the sample's r-th largest cell, r the expected number of sample cells in the row's
// top-k plus kTopkFusedMargin standard deviations, and the consumers append only cells at or
// above it:
// a row keeps about its sample + k + margin sqrt(s k) entries instead of a third to a half of its
// cells. A row whose set cannot be shown to hold its top-k (the sample overestimated it: about
// 1e-6 of rows at margin 5 with scores that do not depend on the column; or its buffer overflowed)
// is swept again by a second, exact launch of the same kernel over its q-tile. Exact: the
// selector warps keep each row from a threshold of 0 (session 13's sweep).
inline constexpr float kTopkFusedMargin = 5.0f;
// The margin the sweeps use (NaN: exact), and its process-wide override for tests and
// measurements (nullopt: kTopkFusedMargin; NaN: exact; a negative margin makes most cut rows
// fail, which tests use to exercise the redo launch).
float topk_fused_margin();
void set_topk_fused_margin(std::optional<float> margin);
// The sampled sweep's appends after the cut: a shared atomic per warp, row and tile for the
// positions (the default), or warp-private partitions of the row's buffer counted in registers
// and compacted by the selector warps after each item (the sweep variant's kTopkPart; session 23:
// ncu found the atomic path on the consumers' critical path in 88 % of warp-tiles at S_k 131072,
// docs/PERF_NOTES.md). Checked on an H100 in session 24 (bitwise equal to the unfused path,
// memcheck and racecheck clean) but slower: 1.177x the scores time against 1.124x at S_k 131072
// k 2048, so off; set_topk_fused_part(true) turns it on for tests and timing.
inline constexpr bool kTopkFusedPart = false;
bool topk_fused_part();
void set_topk_fused_part(std::optional<bool> on);  // nullopt: kTopkFusedPart
// THD blocks of a ragged end (a packing's last block whose rows are no whole q-tiles, T_q % 8):
// the row-windows sweep over them, its last q-tile's rows past T_q empty (lean's THD row
// validity, the selectors' count and failed-flag guards). Built in session 26; on since session
// 27, when the GPU case "THD, a ragged last block" passed bitwise against the unfused path in
// every protocol (an H100). set_topk_fused_ragged_thd(false): refused by name, "a multiple of 8
// (explicit windows)", as before.
inline constexpr bool kTopkFusedRaggedThd = true;
bool topk_fused_ragged_thd();
void set_topk_fused_ragged_thd(std::optional<bool> on);  // nullopt: kTopkFusedRaggedThd
// THD blocks of row ranges (for_each_topk_row_block: bl.rows packed rows whatever their
// segments, the blocking's even split, so no sliver under a wave) instead of the unfused path's
// segment groups, which split a segment where the budget's rows end and can leave a block of a
// few q-tiles that the sweep's gate refuses. Built in session 26; on since session 27, when the
// GPU case "THD, row-range blocks" passed bitwise against the unfused path (an H100).
// set_topk_fused_thd_rows(false): the segment groups, as before.
inline constexpr bool kTopkFusedThdRows = true;
bool topk_fused_thd_rows();
void set_topk_fused_thd_rows(std::optional<bool> on);  // nullopt: kTopkFusedThdRows
// Whether automatic calls take the fused path where its policy would (Family::auto_applies:
// BSHD bf16 past about 127k keys, k at least kTopkFusedAutoMinK). Off in sessions 28-32: the
// sampled sweep's exact redo depends on the inputs, and on an H100 one of three N(0,1) input sets
// at S_q 2048 / S_k 262144 sent q-tiles to it, 11.2 ms after the 14.1 ms sweep: the call took 26.1
// ms against 15.6 for the unfused path. On since session 33, with the seeded redo pool: on an
// H100 (gpu_session.sh s33a), k 2048 over 8 input sets the fused call took 14.54-14.81 ms where no
// row failed (unfused 15.02-15.68) and 15.60 where one did (unfused 15.06); with 9 failed q-tiles
// (margin 3) 16.53 against 16.05. At k 512 it was slower on 7 of the 8 sets, by up to 12 % (14.21-15.05 against
// 13.47-14.61), and the bench (s33b) had k 1024 3 % slower at S_k 262144 and k 2048 faster at both
// S_k 131072 (14418 against 14715 us cold) and 262144 (14643 against 15549): hence the k gate.
inline constexpr bool kTopkFusedAutomatic = true;
inline constexpr int64_t kTopkFusedAutoMinK = 2048;
bool topk_fused_automatic();
void set_topk_fused_automatic(std::optional<bool> on);  // tests and measurements (nullopt: kTopkFusedAutomatic)
// The split redo (session 30): a BSHD block's q-tiles with a failed row are swept again in
// chunks of their KV tiles, a chunk per CTA (lean's split work over q-tiles x parts), each chunk
// keeping its rows' exact candidates, at most k each, in a buffer of its own; a join kernel then
// puts a row's chunks in its buffer for the candidates kernel. The whole-row redo sweeps a q-tile
// on one CTA, which at S_q 2048 / S_k 262144 cost 11.2 ms after a 14.1 ms sweep for one failed
// row (session 28, an H100); split, a failed q-tile costs about a chunk. Slots: the q-tiles a
// block's split redo takes (in row order); those past them keep the whole-row redo.
// Not for THD blocks (lean's split work is BSHD's) nor calls with lse (a chunk's would be part of
// a row's): their redo is the whole-row one. On since session 30: on an H100 its GPU cases passed
// (bitwise the unfused path with 1, 8 and 4096 slots, FP8 too; memcheck and racecheck clean), and
// at S_q 2048 / S_k 262144 k 2048 the input set with a failed row (seed 2) took 17.05 ms against
// 25.32 with the whole-row redo (unfused 15.42); on the 15 other sets of seeds 1-8 (k 2048 and
// 512) no row failed and the call's time stayed within the run's spread (docs/PERF_NOTES.md).
struct TopkRedoSplit {
  int32_t parts = 0;    // chunks per q-tile; 0: no split (the whole-row redo)
  int32_t chunk = 0;    // KV tiles per chunk
  int64_t part_ld = 0;  // entries of a chunk's buffer of a row
};
// parts = min(ld / k, kTopkRedoMaxParts, KV tiles / kTopkRedoMinChunk) where at least 2 (ld: the
// rows' buffers, which hold the joined chunks: parts x k <= ld; 7 at k 2048 / S_k 262144);
// with the join that cuts (topk_fused_redo_join_cut) or the redo pool (topk_fused_redo_pool)
// min(kTopkRedoMaxParts, KV tiles / kTopkRedoMinChunk) where ld >= 2k (16 there). part_ld = k + max(k, 1024) + 64 (at most
// kLeanTopkMaxLd).
inline constexpr int32_t kTopkRedoMaxParts = 16;
inline constexpr int32_t kTopkRedoMinChunk = 16;
inline constexpr int32_t kTopkRedoSlots = 8;
TopkRedoSplit topk_redo_split(int64_t k, int64_t ld, int64_t s_k);
inline constexpr bool kTopkFusedRedoSplit = true;
bool topk_fused_redo_split();
void set_topk_fused_redo_split(std::optional<bool> on);  // nullopt: kTopkFusedRedoSplit
// The split launch's items: by slots (the default since session 31), the items are slots x
// parts, slot r's q-tile from tile_of, in round-robin order on min(slots x parts, SMs) CTAs: a
// chunk per CTA at 8 slots of up to 16 chunks on 132 SMs. By q-tiles
// (set_topk_fused_redo_slot_items(false), session 30's order), item = part x q-tiles + q-tile,
// and a CTA takes the items congruent to it modulo the grid (lean's split work), so where a
// block's q-tiles are a multiple of the grid (1056 rows on 132 SMs, 2112, ...) all chunks of a
// failed q-tile fall on one CTA and run one after another. On an H100 (session 31, S_q 2112 /
// S_k 262144 k 2048, margin 3: 9 rows failed): whole-row redo 25.29 ms, by q-tiles 40.18, by
// slots 28.01 (unfused 15.84); at S_q 2048 the two orders within the run's spread; the GPU cases
// passed bitwise in both orders, memcheck and racecheck clean.
inline constexpr bool kTopkFusedRedoSlotItems = true;
bool topk_fused_redo_slot_items();
void set_topk_fused_redo_slot_items(std::optional<bool> on);  // nullopt: kTopkFusedRedoSlotItems
// The join that cuts (session 31; off): sm90_topk_redo_merge cuts a row's joined list to its k
// largest (the keeper's exact compaction, the one a chunk ends with) before a chunk that would
// not fit, so that a q-tile splits in kTopkRedoMaxParts chunks whatever k (at k 2048 / S_k 262144
// 16 instead of 7: a chunk of 256 KV tiles instead of 586). The chunk buffers grow with the
// parts: 34 MiB instead of 15 there. Session 32 on an H100: bitwise the unfused path, memcheck
// and racecheck clean; seed 2 at S_q 2048 / S_k 262144 k 2048 16.49 ms against 16.98 by slots
// (the chunks' exact sweep from an empty row, not their length, is most of a failed q-tile's 2
// ms); 9 failed q-tiles 26.51 against 27.76 (the 9th still whole-row). The redo pool supersedes it.
inline constexpr bool kTopkFusedRedoJoinCut = false;
bool topk_fused_redo_join_cut();
void set_topk_fused_redo_join_cut(std::optional<bool> on);  // nullopt: kTopkFusedRedoJoinCut
// The redo pool (session 32; the default since session 33): the split redo without slots.
// sm90_topk_redo_slots lists every failed q-tile of a block (sm90_topk_redo_seed empties its rows'
// lists and sets their floors, below), the split launch sweeps them all, chunk p % parts of the
// listed q-tile p / parts at position p (a q-tile's chunks on consecutive CTAs), each CTA's chunk in the CTA's own buffer
// (a buffer per SM: 35 MB at k 2048 on 132 SMs, whatever the failed q-tiles), and the chunk's
// end joins each row to the row's list under a lock per row (cut to its k largest when the chunk
// would not fit, as the join that cuts, whose smallest then filters the row's later joins), so
// neither the join kernel nor the whole-row redo runs.
// Any number of failed q-tiles then costs their chunks over the SMs (9 failed q-tiles at S_k
// 262144 k 2048: 144 chunks of 256 KV tiles, two rounds on 132 SMs) instead of a whole-row sweep
// per q-tile past the slots (session 31: 28.0 ms against 15.8 unfused). Chunks join in any
// order, and the candidates kernel selects exactly from any list that holds the row's top-k, so
// the bits are the same. Parts as with the join that cuts (ld >= 2k). Session 32 on an H100:
// bitwise the unfused path in every case, memcheck clean; 9 failed q-tiles (S_q 2112 / S_k
// 262144 k 2048) 17.59 ms against 27.76 by slots (unfused 15.74), one (seed 2) 16.62 against
// 16.98; racecheck found a warp-level hazard on a row's count (every lane's read, lane 0's reset
// after an empty chunk), fixed, then racecheck clean (gpu_session.sh s32b). Session 33 on an H100
// with the floors (kTopkFusedRedoSeed, below; gpu_session.sh s33a): bitwise in every case,
// memcheck and racecheck clean; seed 2 15.60 ms, 9 failed q-tiles 16.53 (unfused 15.06, 16.05).
inline constexpr bool kTopkFusedRedoPool = true;
bool topk_fused_redo_pool();
void set_topk_fused_redo_pool(std::optional<bool> on);  // nullopt: kTopkFusedRedoPool
// The redo pool's floors (session 33): sm90_topk_redo_seed starts each failed q-tile's row from
// the prefix at or above which k entries of the list the sampled sweep left lie (rows that kept
// theirs, and rows that failed with fewer than k above the cut, whose lists are whole), so the
// pool's chunks append only cells at or above it instead of sweeping from an empty row (session
// 32: about 2.2 ms a failed q-tile at S_k 262144 k 2048, the selectors taking every cell).
// Any floor at or below the row's k-th largest gives the same bits (the candidates kernel
// selects exactly from any list that holds the top-k). set_topk_fused_redo_seed(false): floors 0,
// as in session 32 (tests and measurements).
inline constexpr bool kTopkFusedRedoSeed = true;
bool topk_fused_redo_seed();
void set_topk_fused_redo_seed(std::optional<bool> on);  // nullopt: kTopkFusedRedoSeed
// The slots (0: kTopkRedoSlots); tests take 1 to leave q-tiles to the whole-row redo.
int32_t topk_fused_redo_slots();
void set_topk_fused_redo_slots(int32_t slots);
// Measurements: device memory of dsa::kLeanTopkStats u32 counters that every later sampled
// sweep launch adds its rows to (by how they ended, and the entries kept: LeanTopkStat in
// sm90_topk_fused_args.cuh); nullptr (the default) counts nothing.
void set_topk_fused_stats(uint32_t* device_counters);
// Measurements: the candidate buffers' bytes a block of rows aims for (topk_blocking's budget;
// 0, the default: kTopkFusedBudget), e.g. to time a call in one block.
void set_topk_fused_budget(uint64_t bytes);

}  // namespace dsa_indexer::detail
