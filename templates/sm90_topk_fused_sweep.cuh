#pragma once
// sm90_topk_fused_sweep: the score sweep of the fused top-k. The lean kernel (sm90_indexer_lean.cuh)
// with another epilogue: the consumers compute every score exactly as the scores operation does
// (the same main loop, head sum and sm_scale, so the same bits), and instead of storing a row
// they append each row's candidates to a bounded per-row buffer in global memory (LeanTopkArgs).
// No score row reaches memory; the selection kernel (sm90_topk_candidates.cuh) then selects each
// row's top-k from its candidates. Two protocols (LeanTopkEpilogue, below):
//
// Sampled (the default): a threshold from a sample. The q-tile's sample tiles come first (lean's
// tile order), every visible cell of them is appended; then each consumer warp finds, for one
// of its consumer's rows, the key of the sample's r-th largest cell, and the consumers, which
// hold each cell in a register, append only cells with a key at least that. About m + k +
// 5 sqrt(s k) entries per row; a row whose set cannot be shown to hold its top-k is marked for
// the redo launch.
//
// Exact (and redo): the consumers hand their keys to the selector warps. Per row (a token of the
// q-tile, 8 of them, kept by one selector warp):
// - a threshold thr on the composite (key << 32 | ~column): a visible cell is appended when its
//   composite is > thr. thr only rises, and only to a value that at least k entries already in
//   the buffer reach, so every cell of the row's top-k is appended (the set is exact);
// - h1, a histogram of the top 8 key bits of every entry, and h2, of the next 8 bits of the
//   entries of one coarse bin b1 appended since b1 was chosen (16-bit counts: a buffer holds at
//   most kLeanTopkMaxLd entries). A refresh (every `refresh` appends, once the row holds k)
//   takes the lowest h1 bin whose suffix count reaches k as b1 and, while b1 stays, the lowest
//   h2 bin whose count with the entries above b1 reaches k: thr = that key prefix - 1.
//   Entries never counted (h2 started late) only make thr lower, never wrong;
// - when a row's buffer could overflow within the next tile, its warp compacts it: an exact
//   radix selection of the k-th largest composite (h1, then 8-bit digits over the buffer),
//   a stable in-place compaction to exactly the k entries >= it, and thr = the smallest kept
//   composite (composites are distinct, so a later cell enters only above it).
// With refresh 0 (compaction only) no histogram is kept while sweeping: no shared atomic per
// appended cell; the threshold rises only at compactions, which first count h1 over the buffer.
//
// (v1, sessions 8-9, did the exact upkeep in the consumers themselves, between their products:
// 2-5x the scores-only time; v2-v4, sessions 13-14, in the selector warps: 1.7-4.7x; v5, session
// 15, the sampled cut in the consumers: 1.13-1.31x at S_k >= 16384 on an H100, with the
// candidates kernel. docs/PERF_NOTES.md has the measurements.)
#include "sm90_indexer_lean.cuh"
#include "sm90_topk_fused_args.cuh"
#include "sm90_topk_keeper.cuh"
#include "sm90_topk_common.cuh"
#include "sm90_topk_lse.cuh"

namespace dsa {

// Whether a selection walks the redo pool's work (select_exact; specialized below, after
// LeanTopkRuns).
template <class Work>
struct LeanTopkPoolOf {
  static constexpr bool value = false;
};

// The sampled protocol's appends after the cut (kTopkPart, rendered only when set: the variants
// without it keep their sources): 0, a shared atomic per warp, row and tile for the positions;
// 1, warp-private partitions of the row's buffer past the sample, positions counted in
// registers, compacted by the selectors after the item (LeanTopkEpilogue).
DSA_CONFIG_OR(TopkPartOf, kTopkPart, bool, false)
// The call's lse (kTopkLse, rendered only when set): the consumers keep each row's running
// (max, sum of exp) in the order of sm90_topk_lse.cuh and write the row's lse at the item's end.
DSA_CONFIG_OR(TopkLseOf, kTopkLse, bool, false)
// The sample stride (kTopkSampleStride, rendered only when set): THD variants carry no S_k
// (kSeqK 0), so the host passes the stride of the call's max_seqlen_k when it is not 16; 0 (BSHD,
// and THD up to 16384 keys): lean_topk_sample_stride(kSeqK).
DSA_CONFIG_OR(TopkSampleStrideOf, kTopkSampleStride, int, 0)

static_assert(kLeanTopkTileCols == kKvRows, "sm90_topk_fused_sweep: a row gains at most one KV tile of cells between checks");

// A row's state in the sampled sweep (one per row and item parity, so that the selectors set up
// the next item's while the consumers sweep this one). The sample cells go to positions [0, m),
// the others from m on; the consumers take positions with shared atomics.
struct LeanTopkLive {
  u32 tk;      // the cut: a cell of a non-sample tile is appended when its key is >= tk (0: no cut)
  u32 scnt;    // sample cells appended so far
  u32 cnt;     // m + the other cells appended (may pass the buffer: those past it are dropped);
               // 4 bytes past scnt (the consumers' atomics address both from scnt's address)
  u32 r;       // sample entries with a key >= tk (0: no cut; kLeanTopkBadSample: m did not match)
  u32 m;       // the row's visible sample cells
  u32 rank;    // the cut's rank in the sample (set up by the selectors; 0: no cut)
  u32 pad[2];
};
static_assert(sizeof(LeanTopkLive) == 32, "sm90_topk_fused_sweep: LeanTopkLive layout");
constexpr u32 kLeanTopkBadSample = 0xffffffffu;

// The sweep's epilogue, in one of two protocols (LeanTopkArgs::mode).
//
// Sampled (the default): the consumers select themselves. The sample tiles (the first ns of an
// item) append every visible cell; the lanes of a row that append take consecutive positions
// with one shared atomic per warp and row. Before its first other tile a consumer cuts its 4
// rows (cut(), between two named barriers of its 128 threads): warp w loads row w's m sample
// keys from the buffer (L2, 32 per lane in flight) into registers and finds the key tk of the
// sample's rank-th largest by a bitwise search (32 steps of a compare per key and a warp sum;
// no shared memory, no atomics). From then on a lane compares each of its 2 cells' key with
// its row's tk (a register) and appends those >= tk. The selectors set up each item's rows
// (m and rank, ready) and, when both consumers have arrived on item_done, write each row's
// count: -1 - count where the set may not hold the row's top-k (fewer than k entries with a key
// >= tk: the r sample entries and every cell appended after the cut; a buffer overflow; a
// sample that did not fill [0, m)), for the redo launch. Every cell with a key >= tk is in the
// buffer, so k of them there means no cell below tk is in the top-k.
//
// Exact (and redo): the consumers hand each tile's keys to the selectors through stage slots:
//   consumer cg, per KV tile: waits for its stage slot to be free, writes the key (topk_key) of
//     each of its 2 cells per lane, 0 for a cell outside its row's window (no score has key 0:
//     a NaN's is kTopkNanKey), and arrives on the slot's full barrier (every thread: release);
//   selector warp s (0..2) owns rows s, s + 3, s + 6 of the q-tile's 8 (row cg * 4 + token):
//     per KV tile and consumer it waits for the slot, appends its rows' cells above their
//     thresholds, frees the slot (every lane arrives: an arrival releases only the arriving
//     thread's reads), then keeps those rows (LeanTopkKeeper::after_tile); per item it writes
//     each row's count and resets the row.
// A row's entries are written by its one warp, so positions need no atomics.
// Slot layout: [consumer][slot][token][64 keys], the key of column c of token t at c ^ (8 t)
// (the 32 lanes of a consumer warp write 4 tokens x 8 columns: 32 banks; a selector lane reads
// a column of one token: 32 banks).
// Either way the candidates kernel selects exactly from the set, so the order of the entries
// (which differs run to run in the sampled sweep) does not reach the outputs.
// kProto: the protocol compiled in (a kernel each: the sampled one's selectors do little, so
// its consumers get the registers the exact one's selectors need): kLeanTopkSampled, or
// kLeanTopkExact for the exact and redo launches. kPool: the redo pool's (its selectors join
// each chunk to the rows' lists, kProducerRegs).
template <class Cfg, int kProto, bool kPool = false>
struct LeanTopkEpilogue {
  using T = LeanTraits<Cfg>;
  using Args = LeanTopkArgs;
  static constexpr int kRows = T::kTokensPerConsumer;
  static constexpr int kTileRows = T::kTokensPerTile;
  static constexpr int kSlots = kLeanTopkSlots;
  static constexpr int kSlotWords = kRows * kLeanTopkTileCols;
  static constexpr int kOffKeys = kTileRows * kLeanTopkRowBytes;
  static constexpr int kOffFull = kOffKeys + T::kConsumers * kSlots * kSlotWords * 4;
  static constexpr int kOffEmpty = kOffFull + T::kConsumers * kSlots * 8;
  // kLse: the consumers' lane states at an item's end, [consumer][warp][token] (m, s), after the
  // rest (the exact protocol uses all of it)
  static constexpr bool kLse = TopkLseOf<Cfg>::value;
  static constexpr int kOffLse = kOffEmpty + T::kConsumers * kSlots * 8;
  static constexpr int kSmemBytes = kOffLse + (kLse ? kLeanTopkLseBytes : 0);
  // The sampled protocol's state lies over the exact protocol's stage slots, which it does not
  // use (a launch runs one protocol, and initializes only its own barriers: init_barriers):
  // 5 KV stages and the slots fill an SM's shared memory.
  static constexpr int kOffLive = kOffKeys;                                          // [parity][row] LeanTopkLive
  static constexpr int kOffReady = kOffLive + 2 * kTileRows * sizeof(LeanTopkLive);  // [parity]
  static constexpr int kOffItemDone = kOffReady + 2 * 8;                             // [consumer]
  // The cut's named barriers, one per consumer (lean's ping-pong pair and its LSE barriers below).
  static constexpr u32 kCutBar = kLeanPingPong0 + 2 * T::kConsumers;
  static constexpr int kCutKeys = 32;  // sample keys per lane: a row's sample holds at most 1024 cells
  static_assert(kOffItemDone + T::kConsumers * 8 <= kOffFull, "sm90_topk_fused_sweep: the sampled state must fit the slots");
  static constexpr bool kFillsScores = false;  // there is no score matrix
  static constexpr bool kSelects = true;
  static constexpr bool kSampled = kProto == kLeanTopkSampled;
  static_assert(kSampled || kProto == kLeanTopkExact, "sm90_topk_fused_sweep: the protocol is sampled or exact");
  // Sampled, partitioned appends (TopkPartOf): past the sample [0, m), warp w of a consumer
  // appends row t's cells to [m + w q, m + (w + 1) q), q = (ld - m) / 4, at positions its lanes
  // count in a register (the 8 lanes of a token see the same ballots); at the item's end lanes
  // 0..3 store their token's count in kOffPart, and the selectors move partitions 1..3 down
  // behind partition 0 so that the candidates kernel sees one list [0, count).
  static constexpr bool kPart = kSampled && TopkPartOf<Cfg>::value;
  static constexpr int kOffPart = kOffItemDone + T::kConsumers * 8;  // u32 [parity][row][warp]
  static_assert(kOffPart + 2 * kTileRows * 4 * 4 <= kOffFull, "sm90_topk_fused_sweep: the partition counts must fit the slots");
  // kPart: the entries of each of a row's 4 partitions (ld entries, m of them the sample's), and
  // the index of row r's (0..7) first partition count in kOffPart in item parity p.
  __device__ __forceinline__ static u32 part_cap(i64 ld, u32 m) {
    return static_cast<u32>(ld) > m ? (static_cast<u32>(ld) - m) / 4u : 0u;
  }
  __device__ __forceinline__ static u32 part_slot(u32 p, u32 r) { return (p * kTileRows + r) * 4u; }
  // kPart, a row after its item: whether a partition overflowed (its row is redone), and the
  // entries kept (m + each partition's, at most its capacity each). The selectors' compaction
  // and their counts both take it from here.
  struct PartRow {
    u32 q, n;
    bool over;
  };
  __device__ __forceinline__ static PartRow part_row(const LeanTopkLive& L, const u32* c, i64 ld) {
    PartRow r{part_cap(ld, L.m), L.m, false};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      r.over = r.over || c[w] > r.q;
      r.n += c[w] > r.q ? r.q : c[w];
    }
    return r;
  }
  // The selectors' registers: the exact protocol's keep rows (80 spilled 4 bytes, 72 48 bytes;
  // the consumers get 208); the sampled protocol's set rows up and write counts (lean's own
  // producer budget: the consumers get lean's).
  // The redo pool's selectors also join each chunk's rows under the rows' locks (with 88 they
  // spilled 88 bytes, with 96 16; at 104 the consumers get 200 and spill nothing either).
  static constexpr int kProducerRegs = kSampled ? 0 : kPool ? 104 : 88;
  // The exact protocol's consumers (208 registers) keep the weights packed (widened at use): as
  // fp32 in registers they spilled 64 bytes; the sampled protocol's (232) hold them widened, but
  // FP8's (w x q_scale, fp32) beside the k scales spilled 44-64 bytes there, so FP8 reads them from
  // the item's shared copy per KV tile (the same values). With the lse's lane state beside them
  // the bf16 ones spilled 36-40 bytes (session 25): packed too.
  static constexpr bool kNarrowWeights = !kSampled || T::kFp8 || kLse;
  // THD: the exact protocol's consumers (208 registers) with the bf16 weights in registers take
  // the next item's lane state after the item (with it beside the first product they spilled 28
  // bytes); the sampled ones (224) and those reading the weights from shared memory keep lean's.
  static constexpr bool kLateLaneInfo = !kSampled && !T::kWSmem;
  static constexpr int kSelectors = 3;         // warps 1..3 of the producer warpgroup
  // lean's tile order: the sample tiles first
  static constexpr int kSampleStride =
      TopkSampleStrideOf<Cfg>::value ? TopkSampleStrideOf<Cfg>::value : lean_topk_sample_stride(T::kSeqK);
  static_assert(kSampleStride >= 2 && (kSampleStride & (kSampleStride - 1)) == 0, "sm90_topk_fused_sweep: a sample stride 2^n >= 2");
  static_assert(T::kConsumers == 2 && kRows == 4, "sm90_topk_fused_sweep: two consumers of 4 tokens (H 64)");
  static_assert(kSmemBytes == kLeanTopkSweepSmemBytes + (kLse ? kLeanTopkLseBytes : 0),
                "sm90_topk_fused_sweep: host and template disagree on shared memory");
  static_assert(kLeanTopkLseBytes == T::kConsumers * 4 * kRows * 16 && kOffLse % 16 == 0, "sm90_topk_fused_sweep: the lse states");
  static_assert(kOffKeys % 16 == 0 && kOffFull % 8 == 0 && kOffLive % 16 == 0, "sm90_topk_fused_sweep: alignment");

  u8* smem;
  u64 cand;     // the candidate buffers (sampled)
  i64 ld;
  int cg;
  mutable u32 slot = 0, phase = 0;   // exact: the stage slot ring
  mutable i32 iter = 0, ns = 0;      // sampled: the item's iteration, its sample tiles
  mutable u32 tk = 1;                // sampled: the row's cut (1 until it: every visible cell)
  mutable u32 count_at = 0;          // sampled: the shared address of this lane's row's scnt, this item
  mutable u64* row_buf = nullptr;    // sampled: this lane's row's buffer, this item
  mutable u32 pc = 0, pcap = 0, pbase = 0, pslot = 0;  // kPart: this lane's token's partition (count,
                                                       // capacity, first entry) and its count's slot
  // kLse: this lane's slot of its token's row (sm90_topk_lse.cuh), and where the row's lse goes
  template <bool kOn, int = 0>
  struct LseState {
    TopkLaneLse st;
    const Args* args;  // the kernel's parameter (__grid_constant__): lse, lse_stride, read at the end
  };
  template <int D>
  struct LseState<false, D> {};
  mutable LseState<kLse> lse;

  // Only the launch's own protocol's barriers: the sampled ones (ready, item done) lie in the
  // exact protocol's key slots, and shared memory that holds a live mbarrier must not be written
  // by ordinary stores (PTX: invalidate it first). Session 25: initialized in exact launches too,
  // they corrupted the keys of slot 0's words 128..135 (consumer 0's token 2, columns 16..23) on
  // an H100, from time to time and mostly under FP8 (docs/PERF_NOTES.md).
  __device__ __forceinline__ static void init_barriers(u8* smem) {
    if constexpr (!kSampled) {
      u64* f = reinterpret_cast<u64*>(smem + kOffFull);
      u64* e = reinterpret_cast<u64*>(smem + kOffEmpty);
      for (int i = 0; i < T::kConsumers * kSlots; ++i) {
        mbarrier_init(&f[i], 128);              // every thread of the consumer
        mbarrier_init(&e[i], kSelectors * 32);  // every selector lane (an arrival releases only its own reads)
      }
    } else {
      for (int p = 0; p < 2; ++p) mbarrier_init(reinterpret_cast<u64*>(smem + kOffReady) + p, kSelectors);
      for (int g = 0; g < T::kConsumers; ++g) mbarrier_init(reinterpret_cast<u64*>(smem + kOffItemDone) + g, 128);
    }
  }

  __device__ __forceinline__ LeanTopkEpilogue(const Args& ta, u8* smem_generic, int cg_, int, int)
      : smem(lean_topk_shared(smem_generic)), cand(ta.cand), ld(ta.cand_ld), cg(cg_) {
    if constexpr (kLse) {
      lse.st.reset();
      lse.args = &ta;
    }
  }

  // Sampled: this consumer's 4 rows' state for the item (its parity; `item`: the items with KV
  // tiles before it, the kernel's count).
  __device__ __forceinline__ LeanTopkLive* live_rows(u32 item) const {
    return reinterpret_cast<LeanTopkLive*>(smem + kOffLive) + (item & 1) * kTileRows + cg * kRows;
  }

  // (Lane: LeanLane, or THD's LeanLaneKv<1>, whose kv0 is the item's first KV row: the
  // composites' columns are the block's key rows, and a THD q-tile's span may start past key 0)
  template <class Lane>
  __device__ __forceinline__ void tile(const float* part, i32 it, const Lane& ln, int warp_in_wg, int lane,
                                       float sm_scale, u32 item) const {
    const i32 rel0 = it * kKvRows;
    const bool masked = !(rel0 >= ln.f_lo && rel0 + kKvRows <= ln.f_hi);
    const i32 col0 = 16 * warp_in_wg + (lane >> 2);
    const int t = token_quarter(lane);
    u32 key[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const i32 rel = rel0 + col0 + 8 * j;
      const float v = Cfg::kUnitScale ? part[j] : part[j] * sm_scale;
      const bool vis = !masked || (rel >= ln.w_lo[0] && rel < ln.w_hi[0]);
      key[j] = vis ? topk_key(v) : 0u;
      if constexpr (kLse) {
        if (vis) lse.st.push(v);  // the row's cells of this lane's slot: tile order, then j
      }
    }
    if constexpr (!kSampled) {
      u32* keys = reinterpret_cast<u32*>(smem + kOffKeys) + cg * kSlots * kSlotWords;
      u64* full = reinterpret_cast<u64*>(smem + kOffFull) + cg * kSlots;
      u64* empty = reinterpret_cast<u64*>(smem + kOffEmpty) + cg * kSlots;
      u32* dst = keys + slot * kSlotWords + t * kLeanTopkTileCols;
      mbarrier_wait(&empty[slot], phase ^ 1);
#pragma unroll
      for (int j = 0; j < 2; ++j) dst[(col0 + 8 * j) ^ (8 * t)] = key[j];
      mbarrier_arrive(&full[slot]);
      if (++slot == kSlots) {
        slot = 0;
        phase ^= 1;
      }
      return;
    }
    if (iter == 0) {
      // per item: the row state's and the buffer's addresses, kept (not re-derived per tile)
      ns = lean_sample_tiles<kSampleStride>(ln.n_kv);
      count_at = smem_addr(&live_rows(item)[t].scnt);
      row_buf = reinterpret_cast<u64*>(cand) + (ln.q_row0 + t) * ld;
      mbarrier_wait(reinterpret_cast<u64*>(smem + kOffReady) + (item & 1), (item >> 1) & 1);  // the rows are set up
      if constexpr (kPart) {
        const u32 m = live_rows(item)[t].m;
        pcap = part_cap(ld, m);
        pbase = m + static_cast<u32>(warp_in_wg) * pcap;
        pslot = part_slot(item & 1u, static_cast<u32>(cg * kRows + t)) + static_cast<u32>(warp_in_wg);
        pc = 0u;
      }
    }
    if (iter == ns) cut(live_rows(item), warp_in_wg, lane, t);
    const bool sample = iter < ns;
    ++iter;
    bool take[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) take[j] = key[j] >= tk;  // (tk >= 1: key 0 is a cell outside the window)
    const u32 b0 = __ballot_sync(0xffffffffu, take[0]), b1 = __ballot_sync(0xffffffffu, take[1]);
    if ((b0 | b1) == 0u) return;
    // the 8 lanes of this lane's token (token_quarter depends on lane & 3), led by the lowest
    const u32 mt = 0x11111111u << (lane & 3), lt = (1u << lane) - 1u;
    const u32 n0 = __popc(b0 & mt), n = n0 + __popc(b1 & mt);
    if constexpr (kPart) {
      if (!sample) {  // the warp's partition: positions from its lanes' count, no atomic
        const u32 pos[2] = {pc + __popc(b0 & mt & lt), pc + n0 + __popc(b1 & mt & lt)};
        pc += n;
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (take[j] && pos[j] < pcap) {
            u32 col = static_cast<u32>(rel0 + col0 + 8 * j);
            if constexpr (T::kThd) col += static_cast<u32>(ln.kv0);
            row_buf[pbase + pos[j]] = topk_composite(key[j], col);
          }
        return;
      }
    }
    u32 base = 0;
    if (lane < 4 && n != 0u) base = atom_shared_add_u32(count_at + (sample ? 0u : 4u), n);  // scnt, else cnt
    base = __shfl_sync(0xffffffffu, base, lane & 3);
    const u32 pos[2] = {base + __popc(b0 & mt & lt), base + n0 + __popc(b1 & mt & lt)};
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (take[j] && pos[j] < static_cast<u32>(ld)) {
        u32 col = static_cast<u32>(rel0 + col0 + 8 * j);
        if constexpr (T::kThd) col += static_cast<u32>(ln.kv0);
        row_buf[pos[j]] = topk_composite(key[j], col);
      }
  }

  // The cut of the consumer's 4 rows, by its 4 warps after their sample tiles (every thread of
  // the consumer calls it at the same tile): warp w sets row w's tk and r, then every lane takes
  // its own row's tk. A row cuts when the selectors gave it a rank and its sample is whole
  // (scnt == m <= the buffer, and m <= 32 kCutKeys); else it keeps tk 1.
  __device__ __forceinline__ void cut(LeanTopkLive* live, int w, int lane, int t) const {
    named_barrier_sync(kCutBar + cg, 128);  // every warp's sample stores and counts
    LeanTopkLive& R = live[w];
    const u32 m = R.m, rank = R.rank;
    if (R.scnt != m || m > static_cast<u32>(ld)) {
      if (lane == 0) R.r = kLeanTopkBadSample;
    } else if (rank != 0u && m <= 32u * kCutKeys) {
      // the sample's keys (the high words of its composites; L2 only: the other warps wrote them)
      // (row w's buffer from this lane's, row t's: the item's first row is not kept past its first tile)
      const u32* hi_words = reinterpret_cast<const u32*>(row_buf + static_cast<i64>(w - t) * ld) + 1;
      u32 kv[kCutKeys];
#pragma unroll
      for (int u = 0; u < kCutKeys; ++u) {
        const u32 i = static_cast<u32>(lane + 32 * u);
        kv[u] = i < m ? __ldcg(hi_words + 2 * i) : 0u;
      }
      // the largest key with at least `rank` sample keys at or above it: bit by bit from the top
      u32 prefix = 0u, ge = m;  // ge: the sample keys >= prefix (every key is >= 0)
#pragma unroll 1
      for (int bit = 31; bit >= 0; --bit) {
        const u32 cand_key = prefix | (1u << bit);
        u32 cnt = 0u;
#pragma unroll
        for (int u = 0; u < kCutKeys; ++u) cnt += kv[u] >= cand_key ? 1u : 0u;
        cnt = __reduce_add_sync(0xffffffffu, cnt);
        if (cnt >= rank) {
          prefix = cand_key;
          ge = cnt;
        }
      }
      if (lane == 0) {
        R.tk = prefix;  // >= 1: the sample's keys are visible cells' (>= 1) and rank <= m
        R.r = ge;
      }
    }
    named_barrier_sync(kCutBar + cg, 128);
    const u32 x = live[t].tk;
    tk = x > 1u ? x : 1u;
  }
  __device__ __forceinline__ void after_tile(const LeanLane&) const {}
  // kLse: every row of the item gets its lse (-inf without a visible cell): the 8 lanes of a
  // token by butterfly (xor 4, 8, 16: slots i ^ 1, i ^ 2, i ^ 4), then the 4 warps in order
  // through shared memory, between two barriers of the consumer's 128 threads.
  __device__ __forceinline__ void lse_finish(const LeanLane& ln) const {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    lse.st.merge_xor(4);
    lse.st.merge_xor(8);
    lse.st.merge_xor(16);
    u8* states = smem + kOffLse + cg * 4 * kRows * 16;  // [warp][token] {m, pad, s}
    if (lane < 4) {
      u8* e = states + (warp * kRows + token_quarter(lane)) * 16;
      *reinterpret_cast<float*>(e) = lse.st.m;
      *reinterpret_cast<double*>(e + 8) = lse.st.s;
    }
    const u32 bar = lean_consumer_bar<T>(cg);
    named_barrier_sync(bar, 128);
    if (warp == 0 && lane < kRows) {
      TopkLaneLse r;
      r.m = *reinterpret_cast<const float*>(states + lane * 16);
      r.s = *reinterpret_cast<const double*>(states + lane * 16 + 8);
#pragma unroll
      for (int w = 1; w < 4; ++w) {
        const u8* e = states + (w * kRows + lane) * 16;
        r.merge(*reinterpret_cast<const float*>(e), *reinterpret_cast<const double*>(e + 8));
      }
      reinterpret_cast<float*>(lse.args->lse)[(ln.q_row0 + lane) * lse.args->lse_stride] = r.value();
    }
    named_barrier_sync(bar, 128);
    lse.st.reset();
  }
  __device__ __forceinline__ void end_item(const LeanLane& ln) const {
    if constexpr (kLse) lse_finish(ln);
    if (!kSampled || ln.n_kv == 0) return;
    if constexpr (kPart) {
      if ((threadIdx.x & 31u) < 4u) reinterpret_cast<u32*>(smem + kOffPart)[pslot] = pc;  // lanes 0..3: tokens 0..3
    }
    mbarrier_arrive(reinterpret_cast<u64*>(smem + kOffItemDone) + cg);  // (release: the item's stores and counts)
    iter = 0;
    tk = 1u;
  }

  // The sampled cut's rank for a row of n visible cells, m of them in the sample tiles: the
  // expected number of sample cells in the row's top-k, e = k m / n, plus `margin` sqrt(e); 0 (no
  // cut) without a sample, when every visible cell is in the top-k, or when the rank takes the
  // whole sample.
  __device__ __forceinline__ static u32 cut_rank(u32 k, u32 m, i64 n, float margin) {
    u32 rank = 0u;
    if (m != 0u && n > static_cast<i64>(k)) {
      const float e = static_cast<float>(k) * static_cast<float>(m) / static_cast<float>(n);
      const float rf = ceilf(e + margin * sqrtf(e));
      rank = rf < 1.0f ? 1u : rf >= static_cast<float>(m) ? m : static_cast<u32>(rf);
      if (rank >= m) rank = 0u;
    }
    return rank;
  }
  // A row's sampled state for a new item.
  __device__ __forceinline__ static void set_up_row(LeanTopkLive& L, u32 m, u32 rank) {
    L.tk = 0u;
    L.scnt = 0u;
    L.cnt = m;
    L.r = 0u;
    L.m = m;
    L.rank = rank;
  }

  // Selector warp s (0..2) over the CTA's items, in the schedule every role walks.
  template <class Work>
  __device__ __forceinline__ static void select(const LeanArgs& a, const Args& ta, u8* smem_generic, const Work& work,
                                                int s, int lane) {
    static_assert(!(Work::kSplit && kSampled), "sm90_topk_fused_sweep: the sampled protocol sweeps whole q-tiles");
    if constexpr (kSampled) select_sampled(a, ta, smem_generic, work, s, lane);
    else select_exact(a, ta, smem_generic, work, s, lane);
  }

  template <class Work>
  __device__ __forceinline__ static void select_sampled(const LeanArgs& a, const Args& ta, u8* smem_generic, const Work& work,
                                                        int s, int lane) {
    u8* smem = lean_topk_shared(smem_generic);
    LeanTopkLive* live = reinterpret_cast<LeanTopkLive*>(smem + kOffLive);
    u64* ready = reinterpret_cast<u64*>(smem + kOffReady);
    u64* item_done = reinterpret_cast<u64*>(smem + kOffItemDone);
    i32* count = reinterpret_cast<i32*>(ta.count);
    u8* fail = reinterpret_cast<u8*>(ta.fail);
    const u32 k = static_cast<u32>(ta.k);
    const i64 rounds = work.rounds();
    // The next item with KV tiles from round kk on (rows of items without any are written empty).
    auto next_item = [&](i64& kk, i32& tile, i32& b) {
      for (; kk < rounds; ++kk) {
        i32 part;
        if (!work.item(kk, tile, b, part)) continue;
        const i32 tok0 = tile * kTileRows;
        if constexpr (T::kThd) {  // (every lane: shuffles)
          if (lean_thd_span<kTileRows>(lean_thd_row<Cfg>(a, tok0, lane)).n_kv > 0) return true;
        } else {
          if (lean_item<Cfg>(a, b).n_kv(tok0) > 0) return true;
        }
        if constexpr (T::kThd) {  // the packed rows (b 0), those past T_q have no count
          if (lane == 0)
            for (int r = s; r < kTileRows && tok0 + r < a.t_q; r += kSelectors) {
              count[tok0 + r] = 0;
              fail[tok0 + r] = 0;
            }
        } else {
          if (lane == 0)
            for (int r = s; r < kTileRows; r += kSelectors) {
              count[static_cast<i64>(b) * T::kSeqQ + tok0 + r] = 0;
              fail[static_cast<i64>(b) * T::kSeqQ + tok0 + r] = 0;
            }
        }
      }
      return false;
    };
    // Sets up the rows of item (tile, b) in parity p's state and signals it.
    auto set_up = [&](i32 tile, i32 b, u32 p) {
      const i32 tok0 = tile * kTileRows;
      if constexpr (T::kThd) {
        // Row r's window [lo, hi) relative to the span's first KV row (lean_thd_row, as the
        // consumers take it: every lane, shuffles); its sample cells lie on the span's tile grid.
        const LeanThdRow w = lean_thd_row<Cfg>(a, tok0, lane);
        const LeanThdSpan sp = lean_thd_span<kTileRows>(w);
        for (int r = s; r < kTileRows; r += kSelectors) {
          const LeanThdRow x = w.from_lane(r);
          const i64 lo = x.live() ? x.lo - sp.kv_begin : 0, hi = x.live() ? x.hi - sp.kv_begin : 0;
          if (lane == 0) {
            const u32 m = lean_topk_sample_cells_in(lo, hi, kSampleStride);
            set_up_row(live[p * kTileRows + r], m, cut_rank(k, m, hi - lo, ta.margin));
          }
        }
      } else {
        const LeanItem<Cfg> item = lean_item<Cfg>(a, b);
        if (lane == 0)
          for (int r = s; r < kTileRows; r += kSelectors) {
            // the window [0, hi)
            const i64 hi = item.hi(tok0 + r);
            const u32 m = lean_topk_sample_cells<kSampleStride>(hi);
            set_up_row(live[p * kTileRows + r], m, cut_rank(k, m, hi, ta.margin));
          }
      }
      __syncwarp();
      if (lane == 0) mbarrier_arrive(&ready[p]);
    };
    i64 kk = 0;
    i32 tile = 0, b = 0;
    bool have = next_item(kk, tile, b);
    if (have) set_up(tile, b, 0u);
    for (u32 uses = 0; have; ++uses) {
      const u32 p = uses & 1u;
      const i32 tok0 = tile * kTileRows;
      // the item's first output row: BSHD b * S_q + token; THD (one packed sequence, b 0) the packed row
      const i64 row0 = T::kThd ? static_cast<i64>(tok0) : static_cast<i64>(b) * T::kSeqQ + tok0;
      i64 kn = kk + 1;
      i32 tile_n = 0, b_n = 0;
      const bool have_n = next_item(kn, tile_n, b_n);
      if (have_n) set_up(tile_n, b_n, p ^ 1u);
      for (int g = 0; g < T::kConsumers; ++g) mbarrier_wait(&item_done[g], p);
      if constexpr (kPart) {
        // Partitions 1..3 of each row move down behind partition 0, in ascending chunks of a
        // warp (a chunk's destination never reaches the next chunk's source: it starts at or
        // below the source); rows that fail (bad sample, a partition overflowed) are redone.
        const u32* pcount = reinterpret_cast<const u32*>(smem + kOffPart);
        for (int r = s; r < kTileRows; r += kSelectors) {
          const LeanTopkLive& L = live[p * kTileRows + r];
          const u32* c = pcount + part_slot(p, static_cast<u32>(r));
          const PartRow pr = part_row(L, c, ta.cand_ld);
          if (L.r == kLeanTopkBadSample || pr.over) continue;
          const u32 m = L.m, q = pr.q;
          u64* buf = reinterpret_cast<u64*>(ta.cand) + (row0 + r) * ta.cand_ld;
          u32 dst = m + c[0];
          for (u32 w = 1; w < 4u; ++w) {
            const u32 src = m + w * q, n = c[w];
            if (dst != src)
              for (u32 i = 0; i < n; i += 32u) {
                const u32 e = i + static_cast<u32>(lane);
                u64 v = 0;
                if (e < n) v = __ldcg(buf + src + e);
                __syncwarp();
                if (e < n) buf[dst + e] = v;
                __syncwarp();
              }
            dst += n;
          }
        }
      }
      if (lane == 0)
        for (int r = s; r < kTileRows; r += kSelectors) {
          if constexpr (T::kThd) {
            if (row0 + r >= a.t_q) continue;  // past T_q: no count, no failed flag
          }
          const LeanTopkLive& L = live[p * kTileRows + r];
          u32 n = L.cnt;
          bool part_over = false;
          if constexpr (kPart) {  // m + the partitions' entries (each at most q kept)
            const PartRow pr = part_row(L, reinterpret_cast<const u32*>(smem + kOffPart) + part_slot(p, static_cast<u32>(r)), ta.cand_ld);
            n = pr.n;
            part_over = pr.over;
          }
          const u32 rr = L.r;
          const bool bad = rr == kLeanTopkBadSample, over = part_over || n > static_cast<u32>(ta.cand_ld);
          const bool below = rr != 0u && (n - L.m) + rr < k;  // every cell after the cut is >= tk
          const i32 kept = static_cast<i32>(over ? static_cast<u32>(ta.cand_ld) : n);
          const bool failed = bad || over || below;
          count[row0 + r] = failed ? -1 - kept : kept;
          fail[row0 + r] = bad || over ? kLeanTopkFailOther : below ? kLeanTopkFailBelowK : u8(0);
          if (ta.stats != 0ull) {
            u32* st = reinterpret_cast<u32*>(ta.stats);
            atomicAdd(&st[bad    ? kLeanTopkStatBadSample
                          : over  ? kLeanTopkStatOverflow
                          : below ? kLeanTopkStatBelowK
                          : rr != 0u ? kLeanTopkStatCut
                                  : kLeanTopkStatUncut],
                      1u);
            atomicAdd(&st[kLeanTopkStatEntries], static_cast<u32>(kept));
          }
        }
      __syncwarp();
      kk = kn;
      tile = tile_n;
      b = b_n;
      have = have_n;
    }
  }

  template <class Work>
  __device__ __forceinline__ static void select_exact(const LeanArgs& a, const Args& ta, u8* smem_generic, const Work& work,
                                                      int s, int lane) {
    u8* smem = lean_topk_shared(smem_generic);
    LeanTopkRow* rows = reinterpret_cast<LeanTopkRow*>(smem);
    const u32* keys = reinterpret_cast<const u32*>(smem + kOffKeys);
    u64* full = reinterpret_cast<u64*>(smem + kOffFull);
    u64* empty = reinterpret_cast<u64*>(smem + kOffEmpty);
    // The split redo's chunks keep their rows in buffers of their own (part_cand, part_ld entries),
    // each cut to at most k entries at its end (exactly: a compaction without the histograms), so
    // that sm90_topk_redo_merge can join a row's chunks in its buffer (parts x k <= cand_ld).
    constexpr bool parted = Work::kSplit;  // (only the split redo walks split work)
    // the redo pool: a chunk's rows in the CTA's own buffers, joined to the rows' at its end
    constexpr bool pool = LeanTopkPoolOf<Work>::value;
    const i64 ld = parted ? ta.part_ld : ta.cand_ld;
    i32* count = reinterpret_cast<i32*>(parted ? ta.part_count : ta.count);
    const LeanTopkKeeper keep{static_cast<u32>(ta.k), static_cast<u32>(ta.refresh), ld, ta.refresh > 0, lane};
    const LeanTopkKeeper cut{static_cast<u32>(ta.k), 0u, ld, false, lane};
    for (int r = s; r < kTileRows; r += kSelectors) keep.reset(rows[r]);
    const i64 rounds = work.rounds();
    u32 slot = 0, phase = 0;
    for (i64 k = 0; k < rounds; ++k) {
      i32 tile, b, part;
      if (!work.item(k, tile, b, part)) continue;
      const i32 tok0 = tile * kTileRows;
      i32 n_kv;
      u32 kv_begin = 0u;  // the composites' column of the item's relative 0: THD the span's first KV
                          // row, BSHD the chunk's
      if constexpr (T::kThd) {  // (every lane: shuffles)
        const LeanThdSpan sp = lean_thd_span<kTileRows>(lean_thd_row<Cfg>(a, tok0, lane));
        n_kv = sp.n_kv;
        kv_begin = static_cast<u32>(sp.kv_begin);
      } else {
        const LeanRange rg = lean_range(work, lean_item<Cfg>(a, b).n_kv(tok0), part);
        n_kv = rg.n;
        kv_begin = static_cast<u32>(rg.first * kKvRows);
      }
      // row r's entries at (row0 + r) ld: the row's own buffer, or in the split redo its chunk's
      // ([slot][chunk][row], the same form, so that the selectors' registers stay as they were)
      // (the redo pool: the CTA's, [CTA][row])
      const i64 row0 = pool     ? static_cast<i64>(blockIdx.x) * kTileRows
                       : parted ? (static_cast<i64>(reinterpret_cast<const i32*>(ta.slot_of)[tile]) * ta.parts + part) * kTileRows
                       : T::kThd ? static_cast<i64>(tok0) : static_cast<i64>(b) * T::kSeqQ + tok0;
      u64* const cand = reinterpret_cast<u64*>(parted ? ta.part_cand : ta.cand);
      if constexpr (pool) {
        // the chunk keeps only composites at or above its row's floor (sm90_topk_redo_seed's, or
        // higher once a join cut the row: any value read is at or below the row's k-th largest)
        if (lane == 0)
          for (int r = s; r < kTileRows; r += kSelectors) {
            const i64 own = static_cast<i64>(b) * T::kSeqQ + tok0 + r;
            const u64 f = *reinterpret_cast<volatile const u64*>(&reinterpret_cast<const LeanTopkPoolRow*>(ta.pool)[own].floor);
            if (f != 0ull) rows[r].thr = f - 1ull;
          }
        __syncwarp();
      }
      for (i32 it = 0; it < n_kv; ++it) {
        u32 rel = static_cast<u32>(lean_tile_at<kSampleStride>(it, n_kv) * kKvRows);
        rel += kv_begin;
#pragma unroll 1
        for (int cg = 0; cg < T::kConsumers; ++cg) {
          mbarrier_wait(&full[cg * kSlots + slot], phase);
          const u32* src = keys + (cg * kSlots + slot) * kSlotWords;
#pragma unroll 1
          for (int r = s; r < kTileRows; r += kSelectors) {
            if (r / kRows != cg) continue;
            const int t = r % kRows;
            LeanTopkRow& R = rows[r];
            const u64 thr = R.thr;
            u64 c[2];
            bool take[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const u32 col = static_cast<u32>(lane + 32 * j);
              const u32 key = src[t * kLeanTopkTileCols + (col ^ (8u * t))];
              c[j] = topk_composite(key, rel + col);
              take[j] = key != 0u && c[j] > thr;
            }
            keep.append(R, cand + (row0 + r) * ld, c, take);
          }
          mbarrier_arrive(&empty[cg * kSlots + slot]);  // (every lane: its reads of the slot)
        }
        if (++slot == kSlots) {
          slot = 0;
          phase ^= 1;
        }
#pragma unroll 1
        for (int r = s; r < kTileRows; r += kSelectors) keep.after_tile(rows[r], cand + (row0 + r) * ld);
      }
#pragma unroll 1
      for (int r = s; r < kTileRows; r += kSelectors) {
        if (parted && rows[r].count > static_cast<u32>(ta.k)) cut.compact(rows[r], cand + (row0 + r) * ld, rows[r].count, static_cast<u32>(ta.k));
        if constexpr (pool) {
          // (BSHD: whole q-tiles, every row of the item is the block's)
          lean_topk_pool_join(cut, rows[r], ta, row0 + r, static_cast<i64>(b) * T::kSeqQ + tok0 + r, lane);
        } else {
          if (lane == 0 && (!T::kThd || row0 + r < a.t_q)) count[row0 + r] = static_cast<i32>(rows[r].count);
          __syncwarp();
        }
        keep.reset(rows[r]);
      }
    }
  }
};

// The planner's schedule (BSHD: compiled in, as for the scores kernel of the same key,
// LeanStaticRuns; THD: the launch's, LeanParamRuns); in a redo launch only the q-tiles of which a
// row failed in the sampled launch (negative count), every role skipping the others alike. A
// sweep is one batch entry (the fused path's blocks of rows).
// BSHD blocks with the split redo: the q-tiles by their slot (LeanTopkArgs::slot_of), those with
// one in the split launch, those without one left in the whole-row launch.
template <class Cfg, class Base, bool kPool = false>
struct LeanTopkRuns {
  Base runs;
  const u8* redo;  // the sampled launch's failed rows (redo launches: LeanTopkArgs::fail), else null
  i64 rows;        // THD: T_q, the rows that have a failed flag (BSHD: unused, q-tiles are whole)
  const i32* slot_of = nullptr;  // BSHD redo launches with the split redo, else null
  bool split = false;            // (with slot_of) the split launch: the q-tiles with a slot
  // the split launch by slots (LeanTopkArgs::tile_of, else null): item r is slot r's q-tile, in
  // round-robin order, so that the chunks of a q-tile go to different CTAs whatever the block's
  // q-tile count (by q-tiles, q-tile q's chunks take positions q + part x q-tiles, which fall on
  // one CTA where the q-tiles are a multiple of the grid)
  const i32* tile_of = nullptr;
  __device__ __forceinline__ i32 policy() const { return tile_of != nullptr ? static_cast<i32>(kLeanRoundRobin) : runs.policy(); }
  // kPool, the redo pool (with tile_of: every failed q-tile listed; LeanSplitOrder): a q-tile's
  // chunks at consecutive positions, chunk p % parts of the listed q-tile p / parts at position p,
  // so that round robin puts them on consecutive CTAs and the listed ones come first (the rest of
  // the positions find no q-tile)
  __device__ __forceinline__ void split_pos(i64 pos, i64, i64 parts, i32& part, i64& q) const {
    static_assert(kPool, "LeanTopkRuns: split_pos is the redo pool's");
    q = pos / parts;
    part = static_cast<i32>(pos - q * parts);
  }
  __device__ __forceinline__ bool tile(i64 r, i32& t) const {
    if (tile_of != nullptr) {
      t = tile_of[r];
      return t >= 0;
    }
    if (!runs.tile(r, t)) return false;
    if (slot_of != nullptr) {
      const i32 v = slot_of[t];
      return split ? v >= 0 : v == kLeanTopkRedoWhole;
    }
    if (redo == nullptr) return true;
    constexpr int kRows = LeanTraits<Cfg>::kTokensPerTile;
    bool failed = false;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const i64 row = static_cast<i64>(t) * kRows + i;
      if constexpr (LeanTraits<Cfg>::kThd) failed |= row < rows && redo[row] != 0;
      else failed |= redo[row] != 0;
    }
    return failed;
  }
};

template <class Cfg, class Base>
struct LeanSplitOrder<LeanTopkRuns<Cfg, Base, true>> {
  static constexpr bool value = true;
};
// (the same fact of the work's runs)
template <class Runs>
struct LeanTopkPoolOf<LeanSplitWork<Runs>> : LeanSplitOrder<Runs> {};

// BSHD: the planner's schedule is compiled in, as for the scores kernel of the same key. kProto:
// kLeanTopkSampled serves sampled launches, kLeanTopkExact exact and redo launches (the host
// launches the one of LeanTopkArgs::mode). The parameters are the scores kernel's up to the FP8
// scales (bf16 or E4M3 q / k: the same main loop, head sum and k scale as the scores kernel of the
// block's shape, so the same bits per cell), then the sweep's own.
template <class Cfg, class Sched, int kProto>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_topk_fused_sweep(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                          const DsaScales sc, const __grid_constant__ LeanTopkArgs t) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_topk_fused_sweep: the BSHD kernel of a THD variant");
  const bool redo_launch = kProto == kLeanTopkExact && t.mode == kLeanTopkRedo;
  const u8* redo = redo_launch ? reinterpret_cast<const u8*>(t.fail) : nullptr;
  const i32* slot_of = redo_launch ? reinterpret_cast<const i32*>(t.slot_of) : nullptr;
  lean_body<Cfg, LeanTopkEpilogue<Cfg, kProto>>(q_map, k_map, a, sc, t, LeanTopkRuns<Cfg, LeanStaticRuns<Sched>>{{}, redo, 0, slot_of});
}

// The split redo (kLeanTopkRedoSplit, BSHD; rendered only for calls that take it): the exact
// protocol over lean's split work, the q-tiles with a slot in `parts` chunks (a.num_items: the
// q-tiles times the parts, or with t.tile_of the slots times the parts, the host's), each chunk's
// rows in their own buffers.
template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_topk_fused_redo_split(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                               const DsaScales sc, const __grid_constant__ LeanTopkArgs t) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_topk_fused_redo_split: BSHD only (lean's split work)");
  lean_body<Cfg, LeanTopkEpilogue<Cfg, kLeanTopkExact>>(
      q_map, k_map, a, sc, t,
      LeanTopkRuns<Cfg, LeanStaticRuns<Sched>>{{}, nullptr, 0, reinterpret_cast<const i32*>(t.slot_of), true,
                                               reinterpret_cast<const i32*>(t.tile_of)},
      LeanSplit{t.parts, t.chunk});
}

// The redo pool (kLeanTopkRedoSplit with LeanTopkArgs::pool; rendered instead of
// sm90_topk_fused_redo_split for calls that take it): the same sweep over every failed q-tile's
// chunks (a.num_items: the block's q-tiles times the parts; tile_of lists the failed ones first),
// each CTA's chunk in the CTA's buffers, joined to the rows' at its end (lean_topk_pool_join).
template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_topk_fused_redo_pool(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                              const DsaScales sc, const __grid_constant__ LeanTopkArgs t) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_topk_fused_redo_pool: BSHD only (lean's split work)");
  lean_body<Cfg, LeanTopkEpilogue<Cfg, kLeanTopkExact, true>>(
      q_map, k_map, a, sc, t,
      LeanTopkRuns<Cfg, LeanStaticRuns<Sched>, true>{{}, nullptr, 0, nullptr, true, reinterpret_cast<const i32*>(t.tile_of)},
      LeanSplit{t.parts, t.chunk});
}

// THD blocks of the fused path: a block's sweep is a B 1 problem whose rows' windows the rows
// kernel wrote as ks / ke in the block's key columns (lean's row-windows variant, kRowWindows),
// so the item's rows, spans and KV tiles are those of lean's THD kernel, and the candidates'
// columns are the block's (kv_begin + the item's relative column). The schedule of the block's
// packing is a launch parameter, in sm90_indexer_lean_thd's parameter positions, the sweep's
// arguments in the lse's place. No lse: a THD call's lse is the selection's fp64 two-pass sum,
// which the sweep cannot give (the fused path refuses THD calls with one).
template <class Cfg, int kProto>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_topk_fused_sweep_thd(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                              const __grid_constant__ LeanThdSchedule sched, const DsaScales sc,
                              const __grid_constant__ LeanTopkArgs t) {
  static_assert(LeanTraits<Cfg>::kThd && RowWindowsOf<Cfg>::value, "sm90_topk_fused_sweep_thd: a row-windows THD variant");
  static_assert(!TopkLseOf<Cfg>::value, "sm90_topk_fused_sweep_thd: no lse (THD's is the selection's two-pass sum)");
  const u8* redo = kProto == kLeanTopkExact && t.mode == kLeanTopkRedo ? reinterpret_cast<const u8*>(t.fail) : nullptr;
  lean_body<Cfg, LeanTopkEpilogue<Cfg, kProto>>(q_map, k_map, a, sc, t,
                                                LeanTopkRuns<Cfg, LeanParamRuns>{LeanParamRuns{&sched}, redo, a.t_q});
}

}  // namespace dsa
