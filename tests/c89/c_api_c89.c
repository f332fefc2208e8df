/* c_api.h compiles as C89 with -pedantic (issue 12 item 10): built by CTest with -Werror. */
#include <dsa_indexer/c_api.h>

int main(void) {
  dsa_options o;
  dsa_topk_options t;
  dsa_cache_stats s;
  size_t bytes = 0;
  dsa_options_init(&o);
  dsa_topk_options_init(&t);
  if (dsa_kernel_cache_stats_ex(&s, sizeof s) != DSA_STATUS_OK || sizeof s != DSA_CACHE_STATS_V2_SIZE) return 1;
  if (t.k != DSA_TOPK_MAX_K || t.indices != DSA_TOPK_INDICES_LOCAL) return 1;
  /* NULL descriptors: a status, never a crash */
  if (dsa_indexer_topk_workspace_size(NULL, NULL, NULL, NULL, &o, &t, &bytes) != DSA_STATUS_INVALID_ARGUMENT) return 1;
  return o.struct_size == sizeof o && t.struct_size == sizeof t ? 0 : 1;
}
