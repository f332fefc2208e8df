#pragma once
// sm90_indexer_generic: the wgmma + TMA family that serves the whole contract, compiled once
// per (H, W dtype, LSE, layout, KV stages); every shape is a launch argument.
#include "dispatch/family.hpp"

namespace dsa_indexer::detail {

// Geometry of the generic kernel; the template derives the same numbers from the generated
// config (GenericTraits) and the generated source static_asserts the shared-memory size.
struct GenericGeometry {
  static constexpr int kConsumers = 2;           // consumer warpgroups, each N = 256 packed rows
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kKvRows = 64;             // KV rows per tile (the wgmma M)
  static constexpr int kPackedRowsPerConsumer = 256;
  static constexpr int kDefaultKvStages = 5;
  static int tokens_per_consumer(int heads) { return kPackedRowsPerConsumer / heads; }
  static int tokens_per_cta(int heads) { return kConsumers * tokens_per_consumer(heads); }
  static int smem_bytes(int heads, int kv_stages, DType qk = DType::bf16);
};

const Family& generic_family();
KernelSpec generic_spec(int heads, DType w, bool lse, Layout layout, int kv_stages = GenericGeometry::kDefaultKvStages,
                        DType qk = DType::bf16, bool window_start = false);
// Tiles CTA `cta` of a generic plan runs, in order (the same arithmetic as the kernel): linear
// ids cta, cta + G, ...; linear id L runs tile num_tiles - 1 - L.
std::vector<int64_t> generic_cta_tiles(const Plan& plan, int64_t cta);

}  // namespace dsa_indexer::detail
