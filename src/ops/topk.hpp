#pragma once
// The top-k operation (include/dsa_indexer/topk.hpp): its validation and its call.
#include <cstddef>

#include "dsa_indexer/topk.hpp"
#include "ops/validate.hpp"

namespace dsa_indexer::detail {

// Every check of an indexer_topk call (the score operation's inputs, then k, the outputs, the
// index convention, the workspace and aliasing); launches nothing. Throws InvalidArgument /
// UnsupportedConfig naming the parameter.
Problem validate_topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                      const IndexerOptions& opt, const TopkOptions& topk, const MetadataReader& read);

void topk(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
          const IndexerOptions& opt, const TopkOptions& topk, CUstream stream);
std::size_t topk_workspace_size(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& indices,
                                const IndexerOptions& opt, const TopkOptions& topk);

}  // namespace dsa_indexer::detail
