// Layout reasoning for rules that change the strides of a value their readers see (internal
// header): a rewrite whose result has other strides than the op it replaces (SDPA's output, a
// slice of a concatenated GEMM) is sound only if every reader still works on the new layout. ATen
// compute ops accept any strides; `aten::view` does not (it raises when the sizes cannot be
// expressed with the input's strides), and the graph's views were traced with the old layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"

namespace verifuse::rules::util {

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes);

/// The strides of view(t, newSizes) for t of \p sizes / \p strides, or nullopt where ATen's view
/// raises (at::detail::computeStride, same algorithm).
std::optional<std::vector<int64_t>> viewStrides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                                const std::vector<int64_t>& newSizes);

/// No two elements share memory and the elements fill a dense block (torch's
/// is_non_overlapping_and_dense): clone(memory_format=preserve) keeps such strides.
bool nonOverlappingAndDense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

/// Whether every reader of \p v, followed through the view-like ops it feeds (view, reshape,
/// _unsafe_view, permute, transpose, t, expand, unsqueeze, squeeze, slice, select, alias, detach,
/// preserving clone), still works when \p v has \p strides: every `view` on the way stays a view
/// with those strides; a reader that is a compute op accepts any layout. Refuses (false, reason in
/// *whyNot) a graph output on the way (its strides would change what the caller sees), an unknown
/// or symbolic shape, and view-producing ops it does not model (split, unbind, as_strided, ...).
bool readersAcceptLayout(const ir::Graph& g, ir::ValueId v, const std::vector<int64_t>& strides, std::string* whyNot);

/// Whether every reader of \p v works on any dense layout of it: followed through the views that
/// are defined for any strides (permute, transpose, t, unsqueeze, slice, select, expand, alias,
/// detach), each path ends at a compute op. Refuses a graph output on the way, and `view`,
/// `_unsafe_view`, `reshape`, `clone` and the view ops verifuse does not model (their result or
/// its strides depend on the layout). For a rewrite that changes a value's layout without knowing
/// the new one exactly.
bool readersAcceptAnyLayout(const ir::Graph& g, ir::ValueId v, std::string* whyNot);

}  // namespace verifuse::rules::util
