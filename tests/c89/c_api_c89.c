/* c_api.h compiles as C89 with -pedantic (issue 12 item 10): built by CTest with -Werror. */
#include <dsa_indexer/c_api.h>

int main(void) {
  dsa_options o;
  dsa_options_init(&o);
  return o.struct_size == sizeof o ? 0 : 1;
}
