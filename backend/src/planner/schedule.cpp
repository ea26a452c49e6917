// Scheduling: the driver's partitions (less their plan-time members) and every other node become
// units, ordered so that each partition runs as one contiguous block.
#include "planner/planner.h"

#include <algorithm>
#include <set>

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;

namespace {

/// Orders the units so that each partition runs as one contiguous block: Kahn's algorithm over the
/// graph of units (acyclic, since the partitioner only makes acyclic merges), always taking the
/// ready unit whose first node comes earliest, so an unpartitioned graph keeps its order exactly.
StatusOr<std::vector<size_t>> orderUnits(const ir::Graph& graph, const std::vector<Unit>& units,
                                          const std::vector<int32_t>& unitOfNode) {
  const size_t n = units.size();
  std::vector<std::vector<size_t>> succ(n);
  std::vector<int> indegree(n, 0);
  std::vector<ValueId> used;
  for (size_t u = 0; u < n; ++u) {
    std::set<size_t> preds;
    for (size_t k : units[u].nodes) {
      used.clear();
      for (const Arg& a : graph.nodes()[k].args) a.collectValues(used);
      for (ValueId v : used) {
        const ir::NodeId producer = graph.value(v).producer;
        if (producer < 0) continue;
        const int32_t pu = unitOfNode[static_cast<size_t>(producer)];
        if (pu >= 0 && static_cast<size_t>(pu) != u) preds.insert(static_cast<size_t>(pu));
      }
    }
    for (size_t p : preds) {
      succ[p].push_back(u);
      indegree[u]++;
    }
  }
  std::set<std::pair<size_t, size_t>> ready;  // (first node index, unit)
  for (size_t u = 0; u < n; ++u) {
    if (indegree[u] == 0) ready.insert({units[u].nodes.front(), u});
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t u = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(u);
    for (size_t s : succ[u]) {
      if (--indegree[s] == 0) ready.insert({units[s].nodes.front(), s});
    }
  }
  if (order.size() != n) return invalidArgument("partitions form a cycle: they cannot each run as one block");
  return order;
}

}  // namespace

StatusOr<bool> scheduleUnits(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  const CompileOptions& options = b.options;
  const size_t numNodes = graph.nodes().size();
  // Nodes over constants alone run once now (planTimeNodes), outside every partition: a row
  // program the partitioner grouped with per-call work leaves its partition (it reads nothing the
  // partition computes, so scheduling it first keeps the order valid).
  b.unitOfNode.assign(numNodes, -1);
  for (const PartitionSpec& spec : options.partitions) {
    Unit u;
    for (ir::NodeId id : spec.nodes) {
      auto it = b.indexOf.find(id);
      if (it == b.indexOf.end()) return invalidArgument("partition " + std::to_string(spec.id) + " names a node not in the graph");
      if (b.unitOfNode[it->second] >= 0) return invalidArgument("a node is in two partitions");
      if (!runtime::isEngineOp(graph.nodes()[it->second])) {
        return unsupported("partition " + std::to_string(spec.id) + " holds " + graph.nodes()[it->second].qualifiedName() +
                           ": no engine runs it yet");
      }
      if (b.planTime[it->second]) continue;
      b.unitOfNode[it->second] = static_cast<int32_t>(b.units.size());
      u.nodes.push_back(it->second);
    }
    if (u.nodes.empty()) continue;
    std::sort(u.nodes.begin(), u.nodes.end());
    u.partition = static_cast<int32_t>(b.specs.size());
    b.specs.push_back(spec);
    if (u.nodes.size() != spec.nodes.size()) {
      // Members folded away: the partition that runs is a smaller one, under a key of its own.
      PartitionSpec& kept = b.specs.back();
      kept.nodes.clear();
      kept.memberSignatures.clear();
      for (size_t m = 0; m < spec.nodes.size(); ++m) {
        const size_t k = b.indexOf.at(spec.nodes[m]);
        if (b.planTime[k]) continue;
        kept.nodes.push_back(spec.nodes[m]);
        if (m < spec.memberSignatures.size()) kept.memberSignatures.push_back(spec.memberSignatures[m]);
      }
      if (kept.memberSignatures.size() != kept.nodes.size()) kept.memberSignatures.clear();
      kept.signature += " less " + std::to_string(spec.nodes.size() - kept.nodes.size()) + " folded";
    }
    b.units.push_back(std::move(u));
  }
  // A fused node outside all of them is a partition alone.
  for (size_t k = 0; k < numNodes; ++k) {
    if (b.unitOfNode[k] >= 0) continue;
    Unit u;
    u.nodes = {k};
    if (runtime::isEngineOp(graph.nodes()[k]) && !b.planTime[k]) {
      PartitionSpec alone;
      alone.id = static_cast<int32_t>(options.partitions.size() + b.specs.size());
      alone.nodes = {graph.nodes()[k].id};
      alone.engineClass = runtime::engineClassOf(graph.nodes()[k]);
      u.partition = static_cast<int32_t>(b.specs.size());
      b.specs.push_back(alone);
    }
    b.unitOfNode[k] = static_cast<int32_t>(b.units.size());
    b.units.push_back(std::move(u));
  }
  VF_ASSIGN_OR_RETURN(b.unitOrder, orderUnits(graph, b.units, b.unitOfNode));
  b.order.clear();
  for (size_t u : b.unitOrder) b.order.insert(b.order.end(), b.units[u].nodes.begin(), b.units[u].nodes.end());
  for (size_t s = 0; s < b.order.size(); ++s) {
    if (b.order[s] != s) return true;  // a partition's nodes moved together
  }
  return false;
}

}  // namespace verifuse::planner
