#pragma once
// Real cubins for disk-cache tests that need no kernel family: a one-line kernel compiled by
// NVRTC (no GPU needed), distinct per seed, memoized per process.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>

#include "jit/nvrtc_compiler.hpp"
#include "core/sha256.hpp"

namespace dsa_test {

struct TinyCubin {
  std::string cubin;
  std::string kernel;  // lowered name
};

inline TinyCubin tiny_cubin(const std::string& seed) {
  static std::mutex mu;
  static std::map<std::string, TinyCubin> memo;
  std::lock_guard<std::mutex> lk(mu);
  auto it = memo.find(seed);
  if (it != memo.end()) return it->second;
  const unsigned value = static_cast<unsigned>(std::stoul(dsa_indexer::detail::sha256_hex(seed).substr(0, 7), nullptr, 16));
  const std::string src = fmt::format("__global__ void kernel(unsigned* p) {{ *p = {}u; }}\n", value);
  auto out = dsa_indexer::detail::nvrtc_compile(
      {"tiny.cu", src, {"kernel"}, dsa_indexer::detail::compile_options("sm_90a"), nullptr});
  TinyCubin t{out.cubin, out.lowered_names.at(0)};
  memo.emplace(seed, t);
  return t;
}

}  // namespace dsa_test
