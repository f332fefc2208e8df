#pragma once
// A kernel family as one unit (docs/DESIGN.md, "Kernel families"): the operation it implements,
// its compile-time parameters, its gate, its plan, the family-specific part of its source and
// its launch. The shared machinery (validate, dispatch, codegen, NVRTC, caches, driver) works
// through this interface and the registry below and names no family. Adding a family means one
// `src/families/sm90_indexer_<stem>.cpp`, one `templates/sm90_indexer_<stem>.cuh` and one line
// in families/family_registry.cpp.
#include <string>
#include <vector>

#include "core/kernel_spec.hpp"
#include "core/operation.hpp"
#include "dispatch/planner.hpp"
#include "dsa_indexer/indexer.hpp"

namespace dsa_indexer::detail {

struct LoadedKernel;
struct GeneratedSource;

// The verdict of a family's gate: passed, or the first gate that failed with the expected and
// the actual value (what UnsupportedConfig reports when the family was asked for by name).
struct Gate {
  const char* failed = nullptr;
  std::string expected, actual;
  bool passed() const { return failed == nullptr; }
  static Gate pass() { return Gate{}; }
  static Gate fail(const char* gate, std::string expected, std::string actual);
};

// name(), params() and render() are the KernelSource part: all that codegen and the caches see.
class Family : public KernelSource {
 public:
  virtual const char* option() const = 0;  // the user-facing name: "generic" (CLI, manifests, Python)
  virtual KernelFamily id() const = 0;
  // The one operation the family implements: the dispatcher offers a family only to calls of
  // its operation, whatever its gate would say.
  virtual Operation operation() const = 0;
  // The input precision (q and k dtype) the family computes from: checked by the dispatcher
  // before the gate, so that a family never sees inputs of another precision.
  virtual DType input_dtype() const = 0;
  // Every input precision the family computes from (input_dtype() and, for families with an
  // FP8 main loop, e4m3).
  virtual bool serves_input(DType d) const { return d == input_dtype(); }
  virtual std::string input_dtypes() const;  // "bf16", "bf16 or e4m3": for messages
  // Automatic calls try families by descending priority and take the first whose gate holds;
  // 0: only when asked for by name.
  virtual int auto_priority() const = 0;
  // Automatic calls only: whether the family is the better choice for this problem where its
  // gate holds (a speed or memory policy, not a capability: a call that asks for the family by
  // name skips it). Cheap and pure, like check().
  virtual bool auto_applies(const Problem& p, const DeviceInfo& dev) const {
    (void)p;
    (void)dev;
    return true;
  }
  // Switched off by the escape hatch (DSA_INDEXER_DISABLE_LEAN).
  virtual bool fast_path() const { return false; }
  // Cheap, non-throwing, no CUDA calls: whether the family serves this validated problem.
  virtual Gate check(const Problem& p, const DeviceInfo& dev) const = 0;
  // Exactly the inputs check() reads, as a key (the dispatcher caches verdicts under it).
  virtual std::string gate_key(const Problem& p, const DeviceInfo& dev) const = 0;
  // Pure: the variant, the launch geometry and the schedule (called after check() passed); a
  // per-call schedule only for PlanPurpose::launch.
  virtual Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose) const = 0;
  // The problems of other operations that launch() hands to the dispatcher (the unfused top-k:
  // the score problem of each block), one per distinct shape, built by the same code launch()
  // uses, with the call's pointers (null for a manifest's problem). Warmup manifests and shape
  // recording plan them, so that a warmed call meets no compile inside its launch. Pure, like
  // plan(); none for a family that launches only its own kernels.
  virtual std::vector<Problem> inner_problems(const Problem& p, const DeviceInfo& dev) const {
    (void)p;
    (void)dev;
    return {};
  }
  // The family request an inner problem is dispatched with (launch() and warmup alike): the
  // automatic choice unless the family pins one.
  virtual KernelFamily inner_family(const Problem& inner) const {
    (void)inner;
    return KernelFamily::automatic;
  }
  virtual void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const = 0;
};

// The registry (families/family_registry.cpp): every family, in one list.
const std::vector<const Family*>& families();
// The family that owns a planned variant (every KernelSpec the planner makes is a family's).
inline const Family& family_of(const KernelSpec& spec) { return *static_cast<const Family*>(spec.family); }
// Throws InvalidArgument naming `id` when no family has it (KernelFamily::automatic included).
const Family& family_for(KernelFamily id);
bool family_known(KernelFamily id);

// The plan's family launches its kernels (nothing when the plan is empty).
void launch_forward(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream);
// nullptr when no family has this user-facing name.
const Family* family_by_option(const std::string& option);
// "generic, reference or lean": the user-facing names, for error messages and usage texts.
std::string family_options();

}  // namespace dsa_indexer::detail
