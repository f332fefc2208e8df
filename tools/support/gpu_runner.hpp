#pragma once
// Runs HostProblems on the GPU through the public API, with device memory from the library's
// lazily loaded driver (so test binaries start on machines without one).
#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dsa_indexer/indexer.hpp"
#include "host_problem.hpp"

namespace dsa_support {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, int device = 0);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t n);
  void download(void* dst, size_t n) const;
  void fill_u32(uint32_t v);

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Poison pattern written over outputs before each run: a NaN no kernel produces.
inline constexpr uint32_t kPoison = 0x7fc0dead;

struct DeviceProblem {
  DeviceBuffer q, k, w, out, lse, offsets, cu_q, cu_k, ks, ke;
  DeviceBuffer q_scale, k_scale;  // FP8 only, when given
  std::vector<int32_t> cu_q_host, cu_k_host;  // the host mirrors the options point at
  dsa_indexer::TensorDesc tq, tk, tw, tout;
  dsa_indexer::IndexerOptions opt;
};

// Uploads the inputs, allocates (poisoned) outputs and builds the descriptors.
DeviceProblem upload(const HostProblem& p, int device = 0, bool host_seqlens = true);

// Where each operand of a problem lives (null: not used by the problem).
struct ProblemPointers {
  void *q = nullptr, *k = nullptr, *w = nullptr, *out = nullptr, *lse = nullptr, *offsets = nullptr;
  void *cu_q = nullptr, *cu_k = nullptr, *ks = nullptr, *ke = nullptr, *q_scale = nullptr, *k_scale = nullptr;
};
// The descriptors and options of `p` over operands at `ptr` (what upload() builds over its
// buffers; no driver call, so the unit tests check them against the validator). q and k are
// bf16, or e4m3 (1-byte elements, strides in elements) when p.fp8, with the scales given as
// q_scale (B, S_q, H) / THD (T_q, H) and k_scale (B, S_k, 1) or (B, S_k) / THD (T_k, 1) or (T_k,).
void describe_problem(const HostProblem& p, const ProblemPointers& ptr, DeviceProblem& d, int device = 0,
                      bool host_seqlens = true);

struct GpuResult {
  std::vector<float> scores;
  std::vector<float> lse;
};

// Poisons the outputs, runs the forward on `stream` and downloads the results.
GpuResult run(const HostProblem& p, DeviceProblem& dp, dsa_indexer::KernelFamily family, CUstream stream = nullptr);

bool gpu_available(std::string* why);
void sync_device(int device = 0);

}  // namespace dsa_support
