// dsa-indexer-nvrtc-helper: runs one NVRTC compile for a parent process that asked for
// DSA_INDEXER_COMPILE_ISOLATION=process (request on stdin, reply on stdout).
#include "jit/compile_isolation.hpp"

int main() { return dsa_indexer::detail::compile_helper_main(0, 1); }
