// Graph edits the rewrite rules need beyond Graph's own API: a constant that is a strided view of
// another constant's buffer (no copy), an extra output on an existing node, and a node inserted at
// a position (Graph::addNode only appends). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "verifuse/ir/graph.h"

namespace verifuse::ir {

/// A new constant that reads \p source's buffer with other sizes and strides (in elements): it
/// shares `data`, `owner`, `ownerKind`, `materialize` and `dtype`, so no data is copied; the
/// executor builds it as `owner.as_strided(sizes, strides, offset of data)`. Named
/// `<source name><suffix>`. Reuses an existing constant with the same name, buffer, sizes and
/// strides (two rules viewing one weight the same way get one constant). Fails when \p sizes and
/// \p strides differ in rank, a stride is negative, or the view reads past the source's extent.
StatusOr<ConstantId> addConstantView(Graph& g, ConstantId source, std::vector<int64_t> sizes,
                                     std::vector<int64_t> strides, const std::string& suffix);

/// Appends a fresh output value of \p type to node \p node (its outputIndex is the old output
/// count); returns its id.
ValueId addNodeOutput(Graph& g, NodeId node, ValueType type);

/// Node ids are positions in the node vector, so a rule cannot insert a node without renumbering
/// every later node (and the pass manager keys near misses, refusals and fusion records by id).
/// Instead a rule places a new node in a free slot: a tombstone (an erased node, kept until
/// compact()) or a dead node (no reader, not a graph output) with exactly one output. The slot's
/// output value is reused for the new node's one output (its old name is cleared, its shape is
/// unknown until the rule sets it); no other node id changes.
bool isFreeSlot(const Graph& g, NodeId slot);
/// The free slot closest before \p before and after \p after (exclusive; -1 for "from the first
/// node"), or -1.
NodeId findFreeSlot(const Graph& g, NodeId after, NodeId before);
/// Places a one-output node in free slot \p slot (see isFreeSlot); returns its output value.
StatusOr<ValueId> placeInSlot(Graph& g, NodeId slot, std::string op, std::string overload, std::vector<Arg> args,
                              ValueType outputType);

}  // namespace verifuse::ir
