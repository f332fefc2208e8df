#pragma once
// A kernel family as one unit (docs/DESIGN.md, "Kernel families"): its compile-time
// parameters, its gate, its plan, the family-specific part of its source and its launch. The
// shared machinery (validate, dispatch, codegen, NVRTC, caches, driver) works through this
// interface and the registry below and names no family. Adding a family means one
// `src/sm90_indexer_<stem>.cpp`, one `templates/sm90_indexer_<stem>.cuh` and one line in
// family_registry.cpp.
#include <string>
#include <vector>

#include "dsa_indexer/indexer.hpp"
#include "kernel_spec.hpp"
#include "planner.hpp"

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

class Family {
 public:
  virtual ~Family() = default;
  virtual const char* name() const = 0;    // template stem: "sm90_indexer_generic"
  virtual const char* option() const = 0;  // the user-facing name: "generic" (CLI, manifests, Python)
  virtual KernelFamily id() const = 0;
  // Automatic calls try families by descending priority and take the first whose gate holds;
  // 0: only when asked for by name.
  virtual int auto_priority() const = 0;
  // Switched off by the escape hatch (DSA_INDEXER_DISABLE_LEAN).
  virtual bool fast_path() const { return false; }
  virtual const std::vector<ParamDesc>& params() const = 0;
  // Cheap, non-throwing, no CUDA calls: whether the family serves this validated problem.
  virtual Gate check(const Problem& p, const DeviceInfo& dev) const = 0;
  // Exactly the inputs check() reads, as a key (the dispatcher caches verdicts under it).
  virtual std::string gate_key(const Problem& p, const DeviceInfo& dev) const = 0;
  // Pure: the variant, the launch geometry and the schedule (called after check() passed); a
  // per-call schedule only for PlanPurpose::launch.
  virtual Plan plan(const Problem& p, const DeviceInfo& dev, PlanPurpose purpose) const = 0;
  // Appends the family's part of the generated source after the shared config: asserts,
  // tables, and the name expressions of its kernels in launch order.
  virtual void render(const KernelSpec& spec, GeneratedSource& out) const = 0;
  virtual void launch(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream) const = 0;
};

// The registry (family_registry.cpp): every family, in one list.
const std::vector<const Family*>& families();
// Throws InvalidArgument naming `id` when no family has it (KernelFamily::automatic included).
const Family& family_for(KernelFamily id);
bool family_known(KernelFamily id);
// nullptr when no family has this user-facing name.
const Family* family_by_option(const std::string& option);
// "generic, reference or lean": the user-facing names, for error messages and usage texts.
std::string family_options();

}  // namespace dsa_indexer::detail
