// The oneDNN partitioner: union-find over capable nodes, acyclic merges only, profitable
// partitions only. See partitioner.h for the contract.
#include "verifuse/partition/partitioner.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace verifuse::partition {
namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;

/// The data-flow graph between live nodes, built once: who reads what, who feeds whom.
/// Every list is in graph order, so everything derived from it is deterministic.
struct DataFlow {
  std::vector<NodeId> live;                       // live nodes in graph order
  std::vector<std::vector<ValueId>> reads;        // by NodeId: distinct values read, arg order
  std::vector<std::vector<NodeId>> successors;    // by NodeId: distinct live readers of outputs
  std::vector<std::vector<NodeId>> readers;       // by ValueId: distinct live readers
  std::vector<bool> graphOutput;                  // by ValueId
};

StatusOr<DataFlow> buildDataFlow(const Graph& graph) {
  DataFlow df;
  const size_t numNodes = graph.nodes().size();
  const size_t numValues = graph.numValues();
  df.reads.resize(numNodes);
  df.successors.resize(numNodes);
  df.readers.resize(numValues);
  df.graphOutput.assign(numValues, false);
  std::vector<ValueId> scratch;
  for (const Node& node : graph.nodes()) {
    if (node.erased) continue;
    df.live.push_back(node.id);
    scratch.clear();
    for (const Arg& arg : node.args) arg.collectValues(scratch);
    std::vector<ValueId>& reads = df.reads[static_cast<size_t>(node.id)];
    for (ValueId v : scratch) {
      if (v < 0 || static_cast<size_t>(v) >= numValues) {
        return invalidGraph("node " + std::to_string(node.id) + " reads undefined value %" +
                            std::to_string(v));
      }
      if (std::find(reads.begin(), reads.end(), v) != reads.end()) continue;
      reads.push_back(v);
      df.readers[static_cast<size_t>(v)].push_back(node.id);
      NodeId producer = graph.value(v).producer;
      if (producer < 0) continue;
      if (static_cast<size_t>(producer) >= numNodes || graph.node(producer).erased) {
        return invalidGraph("node " + std::to_string(node.id) + " reads %" + std::to_string(v) +
                            " whose producer is missing or erased");
      }
      std::vector<NodeId>& succ = df.successors[static_cast<size_t>(producer)];
      if (std::find(succ.begin(), succ.end(), node.id) == succ.end()) succ.push_back(node.id);
    }
  }
  scratch.clear();
  for (const Arg& out : graph.outputs()) out.collectValues(scratch);
  for (ValueId v : scratch) {
    if (v < 0 || static_cast<size_t>(v) >= numValues) {
      return invalidGraph("graph output reads undefined value %" + std::to_string(v));
    }
    df.graphOutput[static_cast<size_t>(v)] = true;
  }
  return df;
}

/// Union-find whose representative is the group's smallest NodeId, so the result never depends
/// on union order details such as sizes; groups also list their members for the cycle check.
class Groups {
 public:
  explicit Groups(size_t n) : parent_(n), members_(n) {
    std::iota(parent_.begin(), parent_.end(), 0);
    for (size_t i = 0; i < n; ++i) members_[i] = {static_cast<NodeId>(i)};
  }
  NodeId find(NodeId v) {
    NodeId root = v;
    while (parent_[static_cast<size_t>(root)] != root) root = parent_[static_cast<size_t>(root)];
    while (parent_[static_cast<size_t>(v)] != root) {  // path compression
      NodeId next = parent_[static_cast<size_t>(v)];
      parent_[static_cast<size_t>(v)] = root;
      v = next;
    }
    return root;
  }
  void unite(NodeId a, NodeId b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent_[static_cast<size_t>(b)] = a;
    auto& into = members_[static_cast<size_t>(a)];
    auto& from = members_[static_cast<size_t>(b)];
    into.insert(into.end(), from.begin(), from.end());
    from.clear();
  }
  const std::vector<NodeId>& members(NodeId root) const { return members_[static_cast<size_t>(root)]; }

 private:
  std::vector<NodeId> parent_;
  std::vector<std::vector<NodeId>> members_;
};

/// True if a path leaves group \p from and reaches group \p to through at least one node outside
/// both. Merging the two would then put that outside node both after and before the merged
/// partition: a cycle. Groups are contracted (reaching any member reaches all its successors),
/// which is what "the quotient graph stays acyclic" means.
bool reachesThroughOutside(Groups& groups, const DataFlow& df, NodeId from, NodeId to,
                           std::vector<char>& visited) {
  std::fill(visited.begin(), visited.end(), 0);
  std::vector<NodeId> stack;
  auto pushSuccessorsOf = [&](NodeId root) {
    for (NodeId m : groups.members(root)) {
      for (NodeId s : df.successors[static_cast<size_t>(m)]) {
        NodeId g = groups.find(s);
        if (g == from || g == to || visited[static_cast<size_t>(g)]) continue;
        visited[static_cast<size_t>(g)] = 1;
        stack.push_back(g);
      }
    }
  };
  pushSuccessorsOf(from);
  while (!stack.empty()) {
    NodeId g = stack.back();
    stack.pop_back();
    for (NodeId m : groups.members(g)) {
      for (NodeId s : df.successors[static_cast<size_t>(m)]) {
        if (groups.find(s) == to) return true;
      }
    }
    pushSuccessorsOf(g);
  }
  return false;
}

/// Fills inputs, outputs and conversions of \p p from the node -> partition assignment.
void computeBoundary(const Graph& graph, const DataFlow& df, const std::vector<int32_t>& assignment,
                     const PartitionOptions& options, Partition& p) {
  p.inputs.clear();
  p.outputs.clear();
  p.conversions = 0;
  p.conversionCost = 0.0;
  auto convert = [&](ValueId v) {
    ++p.conversions;
    p.conversionCost += options.conversionCostOf ? options.conversionCostOf(graph.value(v)) : options.conversionCost;
  };
  auto inside = [&](NodeId n) { return n >= 0 && assignment[static_cast<size_t>(n)] == p.id; };
  for (NodeId n : p.nodes) {
    for (ValueId v : df.reads[static_cast<size_t>(n)]) {
      if (inside(graph.value(v).producer)) continue;
      if (std::find(p.inputs.begin(), p.inputs.end(), v) != p.inputs.end()) continue;
      p.inputs.push_back(v);
      if (graph.value(v).type == ir::ValueType::Tensor) convert(v);
    }
  }
  for (NodeId n : p.nodes) {
    for (ValueId v : graph.node(n).outputs) {
      bool usedOutside = df.graphOutput[static_cast<size_t>(v)];
      bool needsPlain = df.graphOutput[static_cast<size_t>(v)];
      for (NodeId r : df.readers[static_cast<size_t>(v)]) {
        if (inside(r)) continue;
        usedOutside = true;
        // A reader in another partition converts on its own input side (counted there).
        if (assignment[static_cast<size_t>(r)] < 0) needsPlain = true;
      }
      if (!usedOutside) continue;
      p.outputs.push_back(v);
      if (needsPlain && graph.value(v).type == ir::ValueType::Tensor) convert(v);
    }
  }
}

/// Builds partitions (numbered by first node) from a root-per-node grouping of capable nodes.
std::vector<Partition> collectPartitions(const DataFlow& df, const std::vector<NodeId>& rootOf,
                                         std::vector<int32_t>& assignment) {
  std::vector<Partition> parts;
  std::vector<int32_t> indexOfRoot(rootOf.size(), -1);
  std::fill(assignment.begin(), assignment.end(), -1);
  for (NodeId n : df.live) {
    NodeId root = rootOf[static_cast<size_t>(n)];
    if (root < 0) continue;
    int32_t& idx = indexOfRoot[static_cast<size_t>(root)];
    if (idx < 0) {
      idx = static_cast<int32_t>(parts.size());
      parts.emplace_back();
      parts.back().id = idx;
    }
    parts[static_cast<size_t>(idx)].nodes.push_back(n);
    assignment[static_cast<size_t>(n)] = idx;
  }
  return parts;
}

/// Per NodeId: the engine class of each live node (0 for ATen, and for erased nodes).
std::vector<int> engineClasses(const Graph& graph, const DataFlow& df, const PartitionOptions& options) {
  std::vector<int> classes(graph.nodes().size(), 0);
  for (NodeId n : df.live) {
    const Node& node = graph.node(n);
    classes[static_cast<size_t>(n)] = options.engineClass ? options.engineClass(node) : (options.capable(node) ? 1 : 0);
  }
  return classes;
}

double nodeBenefit(const PartitionOptions& options, const Node& node) {
  return options.benefit ? options.benefit(node) : 1.0;
}

void finishPlan(const Graph& graph, const DataFlow& df, const PartitionOptions& options,
                const std::vector<int>& classes, std::vector<Partition> parts, std::vector<int32_t> assignment,
                PartitionPlan& plan) {
  plan.conversions = 0;
  for (Partition& p : parts) {
    p.engineClass = classes[static_cast<size_t>(p.nodes.front())];
    computeBoundary(graph, df, assignment, options, p);
    p.benefit = 0.0;
    for (NodeId n : p.nodes) p.benefit += nodeBenefit(options, graph.node(n));
    plan.conversions += p.conversions;
  }
  plan.atenNodes.clear();
  for (NodeId n : df.live) {
    if (assignment[static_cast<size_t>(n)] < 0) plan.atenNodes.push_back(n);
  }
  plan.partitions = std::move(parts);
  plan.partitionOf = std::move(assignment);
}

std::string formatDouble(double d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", d);
  return buf;
}

/// "n<j>.<i>": output i of the partition's j-th member.
void appendOutputRef(int32_t member, int32_t outputIndex, std::string& out) {
  out += 'n';
  out += std::to_string(member);
  out += '.';
  out += std::to_string(outputIndex);
}

void appendArg(const Graph& graph, const Arg& arg, const std::vector<int32_t>& localNode,
               const Partition& p, std::string& out) {
  switch (arg.kind) {
    case Arg::Kind::None: out += "None"; return;
    case Arg::Kind::Bool: out += arg.i ? "true" : "false"; return;
    case Arg::Kind::Int: out += std::to_string(arg.i); return;
    case Arg::Kind::Double: out += formatDouble(arg.d); return;
    case Arg::Kind::String: out += '"'; out += arg.s; out += '"'; return;
    case Arg::Kind::Device: out += "device:"; out += arg.s; return;
    case Arg::Kind::DTypeTag: out += "dtype:"; out += std::to_string(arg.i); return;
    case Arg::Kind::Layout: out += "layout:"; out += std::to_string(arg.i); return;
    case Arg::Kind::MemoryFormat: out += "memfmt:"; out += std::to_string(arg.i); return;
    case Arg::Kind::Constant: {
      // By shape and dtype, not name: layer1's and layer2's weights of one shape tune alike.
      const auto& constants = graph.constants();
      if (arg.i < 0 || static_cast<size_t>(arg.i) >= constants.size()) {
        out += "const?";
        return;
      }
      const ir::ConstantTensor& c = constants[static_cast<size_t>(arg.i)];
      out += std::string("const:") + ir::dtypeShortName(c.dtype) + "[";
      for (size_t k = 0; k < c.sizes.size(); ++k) {
        if (k) out += ',';
        out += std::to_string(c.sizes[k]);
      }
      out += "]";
      return;
    }
    case Arg::Kind::Value: {
      auto v = static_cast<ValueId>(arg.i);
      NodeId producer = graph.value(v).producer;
      if (producer >= 0 && localNode[static_cast<size_t>(producer)] >= 0) {
        appendOutputRef(localNode[static_cast<size_t>(producer)], graph.value(v).outputIndex, out);
        return;
      }
      auto it = std::find(p.inputs.begin(), p.inputs.end(), v);
      out += "in";
      out += std::to_string(it - p.inputs.begin());
      return;
    }
    case Arg::Kind::List: {
      out += "[";
      for (size_t k = 0; k < arg.list.size(); ++k) {
        if (k) out += ",";
        appendArg(graph, arg.list[k], localNode, p, out);
      }
      out += "]";
      return;
    }
  }
}

std::string valueName(const Graph& graph, ValueId v) {
  const std::string& name = graph.value(v).name;
  std::string out = "%";
  out += name.empty() ? std::to_string(v) : name;
  return out;
}

}  // namespace

StatusOr<PartitionPlan> partitionGraph(const Graph& graph, const PartitionOptions& options) {
  if (!options.capable && !options.engineClass) {
    return invalidArgument("partitionGraph: neither PartitionOptions::capable nor engineClass is set");
  }
  VF_ASSIGN_OR_RETURN(DataFlow df, buildDataFlow(graph));
  const size_t numNodes = graph.nodes().size();

  // capable[n]: the node's engine class (0: stays on ATen alone).
  std::vector<int> capable = engineClasses(graph, df, options);

  PartitionPlan plan;
  Groups groups(numNodes);
  std::vector<char> visited(numNodes, 0);
  // Node order, then argument order: the only iteration orders used, hence determinism.
  for (NodeId n : df.live) {
    if (!capable[static_cast<size_t>(n)]) continue;
    for (ValueId v : df.reads[static_cast<size_t>(n)]) {
      NodeId producer = graph.value(v).producer;
      if (producer < 0 || capable[static_cast<size_t>(producer)] != capable[static_cast<size_t>(n)]) continue;
      NodeId a = groups.find(producer);
      NodeId b = groups.find(n);
      if (a == b) continue;
      // The quotient graph is acyclic before the merge, so only one direction can have a path;
      // checking both keeps the test independent of that invariant.
      if (reachesThroughOutside(groups, df, a, b, visited) ||
          reachesThroughOutside(groups, df, b, a, visited)) {
        ++plan.refusedMerges;
        continue;
      }
      groups.unite(a, b);
    }
  }

  std::vector<NodeId> rootOf(numNodes, -1);
  for (NodeId n : df.live) {
    if (capable[static_cast<size_t>(n)]) rootOf[static_cast<size_t>(n)] = groups.find(n);
  }

  // Drop unprofitable partitions until none is left: dropping one turns its nodes into ATen
  // readers, which can make a neighbour's output need a plain copy and so cost more.
  std::vector<int32_t> assignment(numNodes, -1);
  while (true) {
    std::vector<Partition> parts = collectPartitions(df, rootOf, assignment);
    bool dropped = false;
    if (options.dropUnprofitable) {
      for (Partition& p : parts) {
        computeBoundary(graph, df, assignment, options, p);
        double benefit = 0.0;
        for (NodeId n : p.nodes) benefit += nodeBenefit(options, graph.node(n));
        if (benefit <= p.conversionCost) {
          for (NodeId n : p.nodes) rootOf[static_cast<size_t>(n)] = -1;
          ++plan.droppedPartitions;
          dropped = true;
        }
      }
    }
    if (dropped) continue;
    finishPlan(graph, df, options, capable, std::move(parts), std::move(assignment), plan);
    return plan;
  }
}

StatusOr<int32_t> conversionsWithoutPartitioning(const Graph& graph, const PartitionOptions& options) {
  if (!options.capable && !options.engineClass) {
    return invalidArgument("conversionsWithoutPartitioning: neither capable nor engineClass is set");
  }
  VF_ASSIGN_OR_RETURN(DataFlow df, buildDataFlow(graph));
  std::vector<int> classes = engineClasses(graph, df, options);
  std::vector<NodeId> rootOf(graph.nodes().size(), -1);
  for (NodeId n : df.live) {
    if (classes[static_cast<size_t>(n)]) rootOf[static_cast<size_t>(n)] = n;
  }
  std::vector<int32_t> assignment(graph.nodes().size(), -1);
  std::vector<Partition> parts = collectPartitions(df, rootOf, assignment);
  int32_t total = 0;
  for (Partition& p : parts) {
    computeBoundary(graph, df, assignment, options, p);
    total += p.conversions;
  }
  return total;
}

std::string partitionSignature(const Graph& graph, const Partition& partition) {
  std::vector<int32_t> localNode(graph.nodes().size(), -1);
  for (size_t j = 0; j < partition.nodes.size(); ++j) {
    localNode[static_cast<size_t>(partition.nodes[j])] = static_cast<int32_t>(j);
  }
  std::string out;
  for (size_t j = 0; j < partition.nodes.size(); ++j) {
    const Node& node = graph.node(partition.nodes[j]);
    if (j) out += ";";
    out += node.qualifiedName() + "(";
    const char* separator = "";
    for (const ir::Arg& a : node.args) {
      out += separator;
      separator = ",";
      appendArg(graph, a, localNode, partition, out);
    }
    out += ")";
  }
  out += "->";
  for (size_t k = 0; k < partition.outputs.size(); ++k) {
    const ir::Value& v = graph.value(partition.outputs[k]);
    if (k) out += ",";
    appendOutputRef(localNode[static_cast<size_t>(v.producer)], v.outputIndex, out);
  }
  return out;
}

std::string nodeSignature(const Graph& graph, NodeId node) {
  Partition p;
  p.nodes = {node};
  std::vector<ValueId> read;
  for (const Arg& a : graph.node(node).args) a.collectValues(read);
  for (ValueId v : read) {
    if (std::find(p.inputs.begin(), p.inputs.end(), v) == p.inputs.end()) p.inputs.push_back(v);
  }
  p.outputs = graph.node(node).outputs;
  return partitionSignature(graph, p);
}

StatusOr<std::vector<std::vector<int64_t>>> partitionInputShapes(const Graph& graph,
                                                                 const Partition& partition) {
  std::vector<std::vector<int64_t>> shapes;
  for (ValueId v : partition.inputs) {
    const ir::Value& value = graph.value(v);
    if (value.type != ir::ValueType::Tensor) continue;
    if (!value.hasStaticShape()) {
      return unsupported("partition " + std::to_string(partition.id) + ": input " + valueName(graph, v) +
                         " has no static shape");
    }
    shapes.push_back(value.shape);
  }
  return shapes;
}

std::string describePlan(const Graph& graph, const PartitionPlan& plan) {
  std::ostringstream os;
  for (const Partition& p : plan.partitions) {
    os << "P" << p.id << ":";
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      os << (k ? ", " : " ") << "n" << p.nodes[k] << " " << graph.node(p.nodes[k]).qualifiedName();
    }
    os << " | in";
    for (ValueId v : p.inputs) os << " " << valueName(graph, v);
    os << " | out";
    for (ValueId v : p.outputs) os << " " << valueName(graph, v);
    os << " | conversions " << p.conversions << "\n";
  }
  os << "aten:";
  for (NodeId n : plan.atenNodes) os << " n" << n << " " << graph.node(n).qualifiedName();
  os << "\nconversions " << plan.conversions << "\n";
  return os.str();
}

}  // namespace verifuse::partition
