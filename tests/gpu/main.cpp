// GPU tests: need a Hopper device. Without one the binary reports itself skipped (exit 77,
// CTest SKIP_RETURN_CODE) and never passes.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "gpu_runner.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!dsa_support::gpu_available(&why)) {
    std::printf("SKIPPED: no usable Hopper GPU (%s)\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
