#pragma once
// The planner: a pure function of a validated problem and a device description (no CUDA
// calls), so that it is unit-tested with fake devices. It picks the kernel family and variant,
// the shape key, the launch geometry and the reversed-LPT tile schedule.
#include <cstdint>
#include <string>
#include <vector>

#include "problem.hpp"

namespace dsa_indexer::detail {

struct DeviceInfo {
  int32_t ordinal = 0;
  int32_t sm_count = 0;
  int32_t cc_major = 0;
  int32_t cc_minor = 0;
  int32_t max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  std::string name;

  static DeviceInfo h100();    // fake devices for planning without a GPU (tests, warmup)
  static DeviceInfo h200();
};

enum class Family : int32_t { reference = 0, generic = 1 };
const char* family_name(Family f);  // "sm90_indexer_reference", "sm90_indexer_generic"

// Everything that decides the compiled code of one kernel variant. Shapes, strides, ratio
// and sm_scale are launch arguments and never appear here.
struct KernelSpec {
  Family family = Family::generic;
  int32_t heads = 64;
  DType w_dtype = DType::bf16;
  bool lse = false;
  Layout layout = Layout::bshd;
  int32_t kv_stages = 0;  // generic only: depth of the KV ring
  std::string arch = "sm_90a";

  std::string shape_key() const;  // "h64.wbf16.lse0.bshd.s5"
  bool operator==(const KernelSpec& o) const;
};

// Generic-family geometry (also used by the kernel template through the generated config).
struct GenericGeometry {
  static constexpr int kConsumers = 2;           // consumer warpgroups, each N = 256 packed rows
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kKvRows = 64;             // KV rows per tile (the wgmma M)
  static constexpr int kPackedRowsPerConsumer = 256;
  static int tokens_per_consumer(int heads) { return kPackedRowsPerConsumer / heads; }
  static int tokens_per_cta(int heads) { return kConsumers * tokens_per_consumer(heads); }
  static int smem_bytes(int heads, int kv_stages);
};

struct Plan {
  KernelSpec spec;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t smem_bytes = 0;
  // generic: the static persistent schedule. Tile t = tile_in_batch * batch + b (BSHD) or
  // the t-th run of tokens_per_tile packed rows (THD); CTA c takes linear ids c, c+G, ... and
  // linear id L runs tile num_tiles-1-L, so the last (longest-window) tiles go first.
  int64_t num_tiles = 0;
  int64_t tiles_per_batch = 0;
  int32_t tokens_per_tile = 0;
  // reference: the score kernel's grid is (rows, column blocks); the LSE kernel runs one block
  // per row.
  uint32_t lse_grid = 0;
  bool empty = false;  // nothing to launch (T_q == 0)
};

// Throws UnsupportedConfig naming the device property when the device cannot run the plan.
Plan make_plan(const Problem& p, const DeviceInfo& dev, Family family);

// Tiles CTA `cta` of the plan runs, in order (the same arithmetic as the kernel).
std::vector<int64_t> cta_tile_order(const Plan& plan, int64_t cta);

// Picks the family for an automatic call (the lean fast path will sit in front of generic).
Family choose_family(const Problem& p, KernelFamily requested);

}  // namespace dsa_indexer::detail
