// Links against an installed dsa_indexer through its package config; uses only public headers.
#include <dsa_indexer/c_api.h>
#include <dsa_indexer/indexer.hpp>

#include <cstdio>

int main() {
  dsa_options o;
  dsa_options_init(&o);
  std::printf("dsa-indexer %s, default ratio %lld\n", dsa_indexer::version(), static_cast<long long>(o.ratio));
  try {
    dsa_indexer::indexer_forward({}, {}, {}, {}, {}, nullptr);
  } catch (const dsa_indexer::InvalidArgument& e) {
    std::printf("rejected as expected: %s\n", e.what());
    return 0;
  }
  return 1;
}
