/* c_api.h compiles as C89 with -pedantic (issue 12 item 10): built by CTest with -Werror. */
#include <dsa_indexer/c_api.h>

int main(void) {
  dsa_options o;
  dsa_cache_stats s;
  dsa_options_init(&o);
  if (dsa_kernel_cache_stats_ex(&s, sizeof s) != DSA_STATUS_OK || sizeof s != DSA_CACHE_STATS_V2_SIZE) return 1;
  return o.struct_size == sizeof o ? 0 : 1;
}
