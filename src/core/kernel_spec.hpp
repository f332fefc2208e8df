#pragma once
// What decides the compiled code of one kernel variant: its family and the values of the
// family's compile-time parameters. The family declares its parameters (ParamDesc); the shared
// codegen renders each one by name into the generated config and the shape key, so that no
// shared code has to know which parameters a family has (docs/DESIGN.md, "Keys").
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dsa_indexer::detail {

struct KernelSpec;

// What one variant compiles from (codegen's output).
struct GeneratedSource {
  std::string name;                       // "<family>.<shape key>.cu", for logs and dumps
  std::string text;
  std::vector<std::string> kernels;       // name expressions, in launch order
};

// One compile-time parameter, rendered as `static constexpr <type> <member> = <literal>;`.
struct ParamDesc {
  enum Kind { integer, boolean, choice };
  const char* member;                     // "kHeads"
  Kind kind;
  const char* type;                       // C++ type of the member: "int", "bool", "long long"
  const char* key;                        // shape-key prefix ("h"); nullptr: derived, not in the key
  const char* const* choices = nullptr;   // choice: the key token of each value ("bf16", "f32")
  const char* const* literals = nullptr;  // choice: the C++ literal of each value
  int n_choices = 0;
  // A parameter added to a family after its first variants shipped: value 0 is neither rendered
  // nor in the key, so those variants keep their sources and keys byte for byte (the template
  // reads the member with a default, e.g. dsa::InputOf<Cfg>).
  bool omit_zero = false;
};

// (every family's params() fits: tests/unit/test_codegen.cpp)
constexpr int kMaxSpecParams = 20;

// What the JIT machinery (codegen, the caches) needs of the owner of a variant, and no more: its
// template stem, its parameters and its part of the source. A kernel family
// (dispatch/family.hpp) is one; the machinery never learns which.
class KernelSource {
 public:
  virtual ~KernelSource() = default;
  virtual const char* name() const = 0;  // the template stem, which names the generated file
  virtual const std::vector<ParamDesc>& params() const = 0;
  // Appends the owner's part of the generated source after the shared config: asserts,
  // tables, and the name expressions of its kernels in launch order.
  virtual void render(const KernelSpec& spec, GeneratedSource& out) const = 0;
};

struct KernelSpec {
  const KernelSource* family = nullptr;  // the family that owns the variant
  std::array<int64_t, kMaxSpecParams> values{};  // in the order of family->params()
  uint32_t dynamic_smem = 0;  // dynamic shared memory every kernel of the variant opts in to
  std::string arch = "sm_90a";

  // "h64.wbf16.lse0.bshd.s5": every keyed parameter's prefix and value, joined by '.'. Built
  // without fmt: the in-memory key (memory_key) is made from it on every call.
  std::string shape_key() const;
  // "<template stem>/h64.wbf16.lse0.bshd.s5/sm_90a": the variant on any device (the
  // in-memory key without its device).
  std::string variant_key() const;
  bool operator==(const KernelSpec& o) const;
  bool operator!=(const KernelSpec& o) const { return !(*this == o); }
};

}  // namespace dsa_indexer::detail
