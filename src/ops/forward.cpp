// The scores operation's call: validate -> pointer checks -> dispatch -> plan -> kernel (cache,
// compile mode) -> launch (docs/DESIGN.md, "The pipeline"), and the checks every operation's
// call shares.
#include "ops/forward.hpp"

#include "core/env.hpp"
#include "core/util.hpp"
#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "jit/runtime.hpp"
#include "ops/compile_mode.hpp"

namespace dsa_indexer::detail {


// Every pointer the kernels dereference must be device memory of the call's device (or managed
// memory): a host pointer would fault inside the kernel instead of raising here.
void check_pointer(const void* ptr, const char* name, int device) {
  if (!ptr) return;
  Driver& d = Driver::get();
  unsigned int mem_type = 0;
  int ordinal = -1;
  unsigned int managed = 0;
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* data[3] = {&mem_type, &ordinal, &managed};
  CUresult r = d.cuPointerGetAttributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS || (mem_type != CU_MEMORYTYPE_DEVICE && !managed))
    fail_param<InvalidArgument>("indexer_forward", fmt::format("{}.data", name),
                                fmt::format("device memory of device {}", device),
                                fmt::format("{} ({})", ptr, r != CUDA_SUCCESS ? "unknown to the driver" : mem_type == CU_MEMORYTYPE_HOST ? "host memory" : "not device memory"));
  if (!managed && ordinal != device)
    fail_param<InvalidArgument>("indexer_forward", fmt::format("{}.data", name),
                                fmt::format("memory of device {}", device), fmt::format("memory of device {}", ordinal));
}

void check_stream(CUstream stream, int device) {
  if (!stream) return;
  Driver& d = Driver::get();
  CUcontext ctx = nullptr;
  CUresult r = d.cuStreamGetCtx(stream, &ctx);
  if (r != CUDA_SUCCESS)
    fail_param<InvalidArgument>("indexer_forward", "stream", "a valid CUstream", fmt::format("{} (cuStreamGetCtx error {})", static_cast<void*>(stream), static_cast<int>(r)));
  if (ctx != primary_context(device))
    fail_param<InvalidArgument>("indexer_forward", "stream", fmt::format("a stream of device {}'s primary context", device),
                                "a stream of another context");
}

void check_problem_pointers(const Problem& p) {
  const struct {
    const void* ptr;
    const char* name;
  } ptrs[] = {{p.q, "q"}, {p.k, "k"}, {p.w, "w"}, {p.out, "scores"}, {p.lse, "lse"}, {p.offsets, "q_causal_offsets"},
              {p.cu_q, "cu_seqlens_q"}, {p.cu_k, "cu_seqlens_k"}, {p.ks, "ks"}, {p.ke, "ke"}};
  for (const auto& e : ptrs) check_pointer(e.ptr, e.name, p.device);
}

MetadataReader device_reader(int device, CUstream stream) {
  // validate() calls it only after the arrays' descriptors passed their checks.
  return [device, stream](const void* dptr, int32_t* host, std::size_t n) {
    ScopedContext ctx(device);
    check_pointer(dptr, "cu_seqlens", device);
    check_stream(stream, device);
    Driver& d = Driver::get();
    d.check(d.cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(dptr), n * sizeof(int32_t), stream),
            "cuMemcpyDtoHAsync(cu_seqlens)");
    d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize(cu_seqlens)");
  };
}

void forward(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& scores,
             const IndexerOptions& opt, CUstream stream) {
  Problem p = validate(q, k, w, scores, opt, device_reader(q.device, stream));
  const DeviceInfo& dev = device_info(p.device);
  ScopedContext ctx(p.device);
  check_stream(stream, p.device);
  if (opt.check_pointers) check_problem_pointers(p);

  const Family& family = choose_family(p, dev, opt.family, env().disable_lean);
  Plan plan = make_plan(p, dev, family);
  if (plan.empty) return;
  std::shared_ptr<LoadedKernel> kernel = kernel_for_call(p, dev, opt.family, plan);  // may re-plan (async mode)
  launch_forward(p, plan, *kernel, stream);
}

}  // namespace dsa_indexer::detail
