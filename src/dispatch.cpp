#include "planner.hpp"

namespace dsa_indexer::detail {

// The dispatcher. The lean fast path (DESIGN section 2) will be gated here in front of the
// generic family; until it exists every automatic call goes to generic, which serves the whole
// contract. The reference family is only ever chosen explicitly.
Family choose_family(const Problem& /*p*/, KernelFamily requested) {
  switch (requested) {
    case KernelFamily::reference: return Family::reference;
    case KernelFamily::generic:
    case KernelFamily::automatic: return Family::generic;
  }
  return Family::generic;
}

}  // namespace dsa_indexer::detail
