// The oneDNN partitioner: groups oneDNN-capable nodes into partitions whose tensors stay in the
// primitive's (blocked) layout, so layout conversions happen only at partition boundaries.
//
// Like the MKLDNN pass of torch.fx's optimize_for_inference (union-find over the nodes between
// to_mkldnn/to_dense), but: merges are refused when they would make the graph of partitions
// cyclic (a path that leaves a partition and comes back in could not be scheduled), iteration is
// by node order only (the same graph always gives the same plan), and a partition is kept only
// when its estimated benefit pays for its boundary conversions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/support/status.h"

namespace verifuse::partition {

/// What the partitioner needs to know about nodes; the caller owns the cost model.
struct PartitionOptions {
  /// True if \p node can run as a oneDNN kernel. Required unless engineClass is set.
  std::function<bool(const ir::Node&)> capable;
  /// Engine class of \p node: 0 = not partitioned (runs on ATen alone), otherwise nodes are
  /// merged only with neighbours of the same class (a conv chain never swallows an attention op
  /// or a row-engine chain: each partition gets one engine). When set, it replaces capable
  /// (capable(n) == engineClass(n) != 0).
  std::function<int(const ir::Node&)> engineClass;
  /// Estimated gain (ms, or any unit shared with conversionCost) of running \p node on oneDNN
  /// instead of ATen. Unset: every capable node is worth 1.
  std::function<double(const ir::Node&)> benefit;
  /// Cost of one layout conversion (reorder) of one boundary tensor, in benefit's unit.
  double conversionCost = 0.0;
  /// Optional per-tensor cost (e.g. bytes from Value::shape / memory bandwidth); when set it
  /// replaces conversionCost for every converted tensor.
  std::function<double(const ir::Value&)> conversionCostOf;
  /// Drop partitions whose benefit does not exceed their conversion cost (their nodes run on
  /// ATen). Off: keep every partition (for tests and for reporting "before" numbers).
  bool dropUnprofitable = true;
};

/// One group of nodes that runs on oneDNN with activations kept in oneDNN's layout.
struct Partition {
  /// Dense index in PartitionPlan::partitions (numbered in order of the first node).
  int32_t id = 0;
  /// PartitionOptions::engineClass of its nodes (1 when only capable was given).
  int engineClass = 1;
  /// Member nodes in graph (topological) order.
  std::vector<ir::NodeId> nodes;
  /// Values read by member nodes and defined outside the partition (graph inputs, ATen nodes,
  /// other partitions), in first-use order. Constants are not values: their weights are
  /// prepacked at compile time and never converted at run time.
  std::vector<ir::ValueId> inputs;
  /// Values defined by member nodes and read outside (ATen nodes, other partitions, graph
  /// outputs), in definition order.
  std::vector<ir::ValueId> outputs;
  /// Layout conversions this partition causes per run: one per Tensor input, plus one per Tensor
  /// output that some ATen node or the graph's output reads (it must be plain there). An output
  /// read only by another partition is converted once, on that partition's input side.
  int32_t conversions = 0;
  /// Sum of PartitionOptions::benefit over the nodes.
  double benefit = 0.0;
  /// Cost of the conversions: conversions * PartitionOptions::conversionCost, or the sum of
  /// conversionCostOf over the converted tensors.
  double conversionCost = 0.0;
};

/// The result: partitions plus the nodes left to ATen.
struct PartitionPlan {
  std::vector<Partition> partitions;
  /// Live nodes not in any partition, in graph order (incapable ones and those of dropped
  /// partitions).
  std::vector<ir::NodeId> atenNodes;
  /// Indexed by NodeId: the partition id, or -1 for ATen (and erased nodes).
  std::vector<int32_t> partitionOf;
  /// Sum of Partition::conversions.
  int32_t conversions = 0;
  /// Partitions formed by union-find and then dropped as unprofitable.
  int32_t droppedPartitions = 0;
  /// Merges refused because the merged partition would have closed a cycle.
  int32_t refusedMerges = 0;
};

/// Partitions \p graph. Union-find over capable nodes joined by data edges (visited in node order,
/// inputs in argument order); a merge is refused when some path leaves one side and re-enters the
/// other through a node outside both. Then unprofitable partitions are dropped, repeatedly, since
/// dropping one can change its neighbours' boundaries. Errors: kInvalidArgument without
/// options.capable, kInvalidGraph when a node reads a value nobody defines.
StatusOr<PartitionPlan> partitionGraph(const ir::Graph& graph, const PartitionOptions& options);

/// Layout conversions per run if every capable node were its own partition (no partitioning, the
/// "before" number of reports), counted with the same rule as Partition::conversions.
StatusOr<int32_t> conversionsWithoutPartitioning(const ir::Graph& graph,
                                                 const PartitionOptions& options);

/// A hash-stable description of a partition's structure: member ops with their non-value
/// arguments (ints, lists, constant shapes and dtypes), and value arguments named by position
/// (partition input k, or member j's output i), so that the same subgraph has the same signature
/// in any graph and after renumbering. A tuning-database key component.
std::string partitionSignature(const ir::Graph& graph, const Partition& partition);

/// partitionSignature of the one-node partition holding only \p node: the tuning key of a member
/// timed on its own (the planner's split decision).
std::string nodeSignature(const ir::Graph& graph, ir::NodeId node);

/// Static shapes of \p partition's Tensor inputs, in input order: the shape half of a tuning-DB
/// key. Errors: kUnsupported when an input's shape is unknown or symbolic (-1), since a
/// decision timed on one size must not be reused for another; callers then use their heuristic.
StatusOr<std::vector<std::vector<int64_t>>> partitionInputShapes(const ir::Graph& graph,
                                                                 const Partition& partition);

/// Human-readable plan: one line per partition ("P0 [onednn] n0 aten::convolution, n1 aten::relu
/// | in 1 out 1 conv 2"), then the ATen nodes. Stable, for logs and golden tests.
std::string describePlan(const ir::Graph& graph, const PartitionPlan& plan);

}  // namespace verifuse::partition
