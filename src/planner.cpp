#include "planner.hpp"

#include <algorithm>

#include "util.hpp"

namespace dsa_indexer::detail {

DeviceInfo DeviceInfo::h100() { return DeviceInfo{0, 132, 9, 0, 232448, "NVIDIA H100 80GB HBM3 (planning profile)"}; }
DeviceInfo DeviceInfo::h200() { return DeviceInfo{0, 132, 9, 0, 232448, "NVIDIA H200 (planning profile)"}; }

const char* family_name(Family f) {
  switch (f) {
    case Family::reference: return "sm90_indexer_reference";
    case Family::generic: return "sm90_indexer_generic";
  }
  return "unknown-family";
}

std::string KernelSpec::shape_key() const {
  // "h{heads}.w{dtype}.lse{0|1}.{layout}[.s{stages}]", built without fmt: the in-memory key
  // (memory_key) is made from it on every call.
  std::string k = "h";
  k.reserve(40);
  k += std::to_string(heads);
  k += ".w";
  k += dtype_name(w_dtype);
  k += lse ? ".lse1." : ".lse0.";
  k += layout_name(layout);
  if (family == Family::generic) {
    k += ".s";
    k += std::to_string(kv_stages);
  }
  return k;
}

bool KernelSpec::operator==(const KernelSpec& o) const {
  return family == o.family && heads == o.heads && w_dtype == o.w_dtype && lse == o.lse && layout == o.layout &&
         kv_stages == o.kv_stages && arch == o.arch;
}

int GenericGeometry::smem_bytes(int heads, int kv_stages) {
  // Mirrors GenericSmem in templates/sm90_indexer_generic.cuh; the generated source
  // static_asserts that both agree.
  const int tpw = tokens_per_consumer(heads);
  const int q = kConsumers * 2 * kPackedRowsPerConsumer * 128;
  const int kv = kv_stages * 2 * kKvRows * 128;
  const int w = 2 * 4 * (tokens_per_cta(heads) * heads / 4 + 4) * 4;
  const int info = 2 * (40 + 32 * 48);
  const int lse = kConsumers * 4 * tpw * 2 * 4;
  const int bars = (2 * 2 + 2 * kv_stages + 2 * 2) * 8;
  return q + kv + w + info + lse + bars + 1024;
}

namespace {
constexpr int kDefaultKvStages = 5;
constexpr int kRefThreads = 128;
constexpr int kRefLseThreads = 256;
}  // namespace

Plan make_plan(const Problem& p, const DeviceInfo& dev, Family family) {
  if (dev.cc_major != 9)
    fail_param<UnsupportedConfig>("planner", "device compute capability", "9.x (Hopper, sm_90a)",
                                  fmt::format("{}.{} ({})", dev.cc_major, dev.cc_minor, dev.name));
  if (dev.sm_count < 1) fail_param<UnsupportedConfig>("planner", "device SM count", ">= 1", dev.sm_count);
  Plan plan;
  plan.spec.family = family;
  plan.spec.heads = p.heads;
  plan.spec.w_dtype = p.w_dtype;
  plan.spec.lse = p.has_lse;
  plan.spec.layout = p.layout;
  plan.empty = p.rows == 0;

  if (family == Family::reference) {
    plan.spec.kv_stages = 0;
    plan.grid[0] = static_cast<uint32_t>(std::max<int64_t>(p.rows, 1));
    const int64_t col_blocks = (p.out_cols + kRefThreads - 1) / kRefThreads;
    if (col_blocks > 65535)
      fail_param<UnsupportedConfig>("planner", "reference kernel columns", "<= 65535 * 128", p.out_cols);
    plan.grid[1] = static_cast<uint32_t>(std::max<int64_t>(col_blocks, 1));
    plan.block[0] = kRefThreads;
    plan.smem_bytes = 0;  // static shared memory only
    plan.lse_grid = plan.grid[0];
    if (p.out_cols == 0) plan.empty = true;
    return plan;
  }

  plan.spec.kv_stages = kDefaultKvStages;
  const int smem = GenericGeometry::smem_bytes(p.heads, plan.spec.kv_stages);
  if (smem > dev.max_smem_optin)
    fail_param<UnsupportedConfig>("planner", "device shared memory per block (opt-in)",
                                  fmt::format(">= {} bytes for {}", smem, plan.spec.shape_key()), dev.max_smem_optin);
  plan.smem_bytes = static_cast<uint32_t>(smem);
  plan.block[0] = GenericGeometry::kThreads;
  plan.tokens_per_tile = GenericGeometry::tokens_per_cta(p.heads);
  if (p.layout == Layout::bshd) {
    plan.tiles_per_batch = (p.s_q + plan.tokens_per_tile - 1) / plan.tokens_per_tile;
    plan.num_tiles = plan.tiles_per_batch * p.batch;
  } else {
    plan.tiles_per_batch = (p.t_q + plan.tokens_per_tile - 1) / plan.tokens_per_tile;
    plan.num_tiles = plan.tiles_per_batch;
  }
  plan.grid[0] = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(plan.num_tiles, dev.sm_count)));
  if (plan.num_tiles == 0) plan.empty = true;
  return plan;
}

std::vector<int64_t> cta_tile_order(const Plan& plan, int64_t cta) {
  std::vector<int64_t> tiles;
  for (int64_t lin = cta; lin < plan.num_tiles; lin += plan.grid[0]) tiles.push_back(plan.num_tiles - 1 - lin);
  return tiles;
}

}  // namespace dsa_indexer::detail
