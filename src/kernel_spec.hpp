#pragma once
// What decides the compiled code of one kernel variant: its family and the values of the
// family's compile-time parameters. The family declares its parameters (ParamDesc); the shared
// codegen renders each one by name into the generated config and the shape key, so that no
// shared code has to know which parameters a family has (docs/DESIGN.md, "Keys").
#include <array>
#include <cstdint>
#include <string>

namespace dsa_indexer::detail {

class Family;

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
};

constexpr int kMaxSpecParams = 8;

struct KernelSpec {
  const Family* family = nullptr;
  std::array<int64_t, kMaxSpecParams> values{};  // in the order of family->params()
  uint32_t dynamic_smem = 0;  // dynamic shared memory every kernel of the variant opts in to
  std::string arch = "sm_90a";

  // "h64.wbf16.lse0.bshd.s5": every keyed parameter's prefix and value, joined by '.'. Built
  // without fmt: the in-memory key (memory_key) is made from it on every call.
  std::string shape_key() const;
  // "sm90_indexer_generic/h64.wbf16.lse0.bshd.s5/sm_90a": the variant on any device (the
  // in-memory key without its device).
  std::string variant_key() const;
  bool operator==(const KernelSpec& o) const;
  bool operator!=(const KernelSpec& o) const { return !(*this == o); }
};

}  // namespace dsa_indexer::detail
