// The partitioner on graphs where partitioning matters: alternating support, a diamond whose
// naive merge is a cycle, inception-style branches, unprofitable partitions, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "verifuse/ir/graph.h"
#include "verifuse/partition/partitioner.h"

namespace verifuse::partition {
namespace {

using ir::Graph;
using ir::NodeId;
using ir::ValueId;

// aten::cumsum stands for "no oneDNN kernel": everything else used here is capable.
bool capableOp(const ir::Node& n) { return n.op != "aten::cumsum" && n.op != "aten::topk"; }

PartitionOptions defaultOptions() {
  PartitionOptions o;
  o.capable = capableOp;
  o.benefit = [](const ir::Node& n) { return n.op == "aten::convolution" ? 10.0 : 1.0; };
  o.conversionCost = 0.5;
  return o;
}

/// A 3x3 conv of \p in into \p out with weight $w (shape-only constant).
std::string conv(const std::string& out, const std::string& in, const std::string& w = "w") {
  return "  " + out + " : Tensor = aten::convolution(" + in + ", $" + w +
         ", None, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)\n";
}
std::string unary(const std::string& out, const std::string& op, const std::string& in) {
  if (op == "aten::cumsum") return "  " + out + " : Tensor = aten::cumsum(" + in + ", 1, None)\n";
  return "  " + out + " : Tensor = " + op + "(" + in + ")\n";
}
std::string add(const std::string& out, const std::string& a, const std::string& b) {
  return "  " + out + " : Tensor = aten::add.Tensor(" + a + ", " + b + ", 1)\n";
}

Graph parse(const std::string& body, const std::string& inputs = "%x : Tensor",
            const std::string& constants = "  $w : f32[8, 8, 3, 3]\n") {
  std::string text = "graph(" + inputs + ") {\n" + body + "}\nconstants {\n" + constants + "}\n";
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString() << "\n" << text;
  EXPECT_TRUE(ir::verifyGraph(g.value()).isOk());
  return std::move(g).value();
}

PartitionPlan plan(const Graph& g, const PartitionOptions& o = defaultOptions()) {
  auto p = partitionGraph(g, o);
  EXPECT_TRUE(p.isOk()) << p.status().toString();
  return std::move(p).value();
}

std::vector<std::string> opsOf(const Graph& g, const Partition& p) {
  std::vector<std::string> ops;
  for (NodeId n : p.nodes) ops.push_back(g.node(n).qualifiedName());
  return ops;
}

/// The graph of groups (partitions, and each ATen node alone) must be a DAG: Kahn's algorithm
/// consumes every group. Also checks every live node is in exactly one place.
void expectAcyclicAndComplete(const Graph& g, const PartitionPlan& plan) {
  std::map<NodeId, int> group;  // node -> group id (partitions 0..P-1, ATen nodes P..)
  int next = static_cast<int>(plan.partitions.size());
  for (const Partition& p : plan.partitions) {
    for (NodeId n : p.nodes) {
      ASSERT_EQ(plan.partitionOf[static_cast<size_t>(n)], p.id);
      ASSERT_TRUE(group.emplace(n, p.id).second) << "node in two partitions";
    }
  }
  for (NodeId n : plan.atenNodes) {
    ASSERT_EQ(plan.partitionOf[static_cast<size_t>(n)], -1);
    ASSERT_TRUE(group.emplace(n, next++).second) << "ATen node also in a partition";
  }
  ASSERT_EQ(group.size(), g.numLiveNodes());
  std::set<std::pair<int, int>> edges;
  for (const ir::Node& node : g.nodes()) {
    if (node.erased) continue;
    std::vector<ValueId> reads;
    for (const ir::Arg& a : node.args) a.collectValues(reads);
    for (ValueId v : reads) {
      NodeId prod = g.value(v).producer;
      if (prod < 0) continue;
      int a = group.at(prod), b = group.at(node.id);
      if (a != b) edges.insert({a, b});
    }
  }
  std::vector<int> indeg(static_cast<size_t>(next), 0);
  for (auto [a, b] : edges) ++indeg[static_cast<size_t>(b)];
  std::vector<int> ready;
  for (int k = 0; k < next; ++k) if (indeg[static_cast<size_t>(k)] == 0) ready.push_back(k);
  int seen = 0;
  while (!ready.empty()) {
    int k = ready.back();
    ready.pop_back();
    ++seen;
    for (auto [a, b] : edges) {
      if (a == k && --indeg[static_cast<size_t>(b)] == 0) ready.push_back(b);
    }
  }
  EXPECT_EQ(seen, next) << "the graph of partitions has a cycle\n" << describePlan(g, plan);
}

TEST(PartitionerTest, FullyCapableChainIsOnePartitionWithConversionsOnlyAtTheEnds) {
  // conv -> relu -> conv -> add(residual) -> relu: one partition, x in and the result out.
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::relu", "%0") + conv("%2", "%1") +
                  add("%3", "%2", "%x") + unary("%4", "aten::relu", "%3") + "  return (%4)\n");
  PartitionPlan p = plan(g);
  ASSERT_EQ(p.partitions.size(), 1u);
  EXPECT_EQ(p.partitions[0].nodes.size(), 5u);
  EXPECT_EQ(p.partitions[0].inputs.size(), 1u);
  EXPECT_EQ(p.partitions[0].outputs.size(), 1u);
  EXPECT_EQ(p.conversions, 2);
  EXPECT_TRUE(p.atenNodes.empty());
  // Every op its own partition: x twice in, and one reorder on each of the 4 internal edges,
  // plus the graph output.
  auto before = conversionsWithoutPartitioning(g, defaultOptions());
  ASSERT_TRUE(before.isOk());
  EXPECT_EQ(before.value(), 7);
  expectAcyclicAndComplete(g, p);
}

TEST(PartitionerTest, AlternatingSupportedAndUnsupportedOps) {
  // conv | cumsum | relu | cumsum | conv: no two capable nodes touch, so no merge at all.
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::cumsum", "%0") + unary("%2", "aten::relu", "%1") +
                  unary("%3", "aten::cumsum", "%2") + conv("%4", "%3") + "  return (%4)\n");
  PartitionOptions o = defaultOptions();
  o.conversionCost = 0.1;
  PartitionPlan p = plan(g, o);
  ASSERT_EQ(p.partitions.size(), 3u);
  for (const Partition& part : p.partitions) {
    EXPECT_EQ(part.nodes.size(), 1u);
    EXPECT_EQ(part.conversions, 2);  // in and out, each to or from an ATen neighbour
  }
  EXPECT_EQ(p.atenNodes.size(), 2u);
  EXPECT_EQ(p.conversions, 6);
  EXPECT_EQ(p.refusedMerges, 0);
  // With conversions at 1.0 the relu (benefit 1, cost 2) does not pay: it goes back to ATen and
  // the convolutions (benefit 10) stay.
  o.conversionCost = 1.0;
  PartitionPlan q = plan(g, o);
  ASSERT_EQ(q.partitions.size(), 2u);
  EXPECT_EQ(opsOf(g, q.partitions[0]), std::vector<std::string>{"aten::convolution"});
  EXPECT_EQ(opsOf(g, q.partitions[1]), std::vector<std::string>{"aten::convolution"});
  EXPECT_EQ(q.droppedPartitions, 1);
  EXPECT_EQ(q.atenNodes.size(), 3u);
  EXPECT_EQ(q.conversions, 4);
  expectAcyclicAndComplete(g, q);
}

TEST(PartitionerTest, DiamondWhoseNaiveMergeIsACycleIsSplit) {
  //        conv
  //       /    \
  //   cumsum   relu        merging conv, relu and add would put cumsum (ATen) both after and
  //       \    /           before the partition
  //        add
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::cumsum", "%0") + unary("%2", "aten::relu", "%0") +
                  add("%3", "%2", "%1") + "  return (%3)\n");
  PartitionOptions o = defaultOptions();
  o.conversionCost = 0.1;
  PartitionPlan p = plan(g, o);
  ASSERT_EQ(p.partitions.size(), 2u) << describePlan(g, p);
  EXPECT_EQ(opsOf(g, p.partitions[0]), (std::vector<std::string>{"aten::convolution", "aten::relu"}));
  EXPECT_EQ(opsOf(g, p.partitions[1]), std::vector<std::string>{"aten::add.Tensor"});
  EXPECT_EQ(p.refusedMerges, 1);
  // P0: x in, conv's output out to cumsum (plain); relu's output goes to P1 and is counted there.
  EXPECT_EQ(p.partitions[0].conversions, 2);
  EXPECT_EQ(p.partitions[0].outputs.size(), 2u);
  // P1: relu's and cumsum's outputs in, the graph output out.
  EXPECT_EQ(p.partitions[1].conversions, 3);
  EXPECT_EQ(p.conversions, 5);
  EXPECT_EQ(conversionsWithoutPartitioning(g, o).value(), 6);
  expectAcyclicAndComplete(g, p);
  // With reorders at 0.5 the lone add (benefit 1, three reorders) goes back to ATen, and relu's
  // output now needs a plain copy for it.
  PartitionPlan q = plan(g);
  ASSERT_EQ(q.partitions.size(), 1u);
  EXPECT_EQ(q.droppedPartitions, 1);
  EXPECT_EQ(q.partitions[0].conversions, 3);
  expectAcyclicAndComplete(g, q);
}

TEST(PartitionerTest, CycleThroughALongerOutsidePathIsRefused) {
  // conv -> relu -> cumsum -> sigmoid -> add(conv, sigmoid'): the outside path has two nodes,
  // one of them capable but cut off by the ATen node.
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::relu", "%0") + unary("%2", "aten::cumsum", "%1") +
                  unary("%3", "aten::sigmoid", "%2") + add("%4", "%0", "%3") + "  return (%4)\n");
  PartitionPlan p = plan(g);
  expectAcyclicAndComplete(g, p);
  ASSERT_EQ(p.partitions.size(), 2u) << describePlan(g, p);
  EXPECT_EQ(opsOf(g, p.partitions[0]), (std::vector<std::string>{"aten::convolution", "aten::relu"}));
  EXPECT_EQ(opsOf(g, p.partitions[1]), (std::vector<std::string>{"aten::sigmoid", "aten::add.Tensor"}));
  EXPECT_GE(p.refusedMerges, 1);
}

/// Inception-style block: a stem conv feeding four branches joined by a cat; branch 3 starts
/// with an op oneDNN cannot run.
std::string inceptionBody() {
  return conv("%0", "%x") +                                             // stem
         conv("%1", "%0") +                                             // branch 1: 1 conv
         conv("%2", "%0") + unary("%3", "aten::relu", "%2") + conv("%4", "%3") +  // branch 2
         unary("%5", "aten::cumsum", "%0") + conv("%6", "%5") +         // branch 3: ATen first
         "  %7 : Tensor = aten::max_pool2d(%0, [3, 3], [1, 1], [1, 1], [1, 1], false)\n" +
         conv("%8", "%7") +                                             // branch 4
         "  %9 : Tensor = aten::cat([%1, %4, %6, %8], 1)\n"
         "  return (%9)\n";
}

TEST(PartitionerTest, InceptionBranchesKeepTheJoinOutOfTheStemPartition) {
  Graph g = parse(inceptionBody());
  PartitionPlan p = plan(g);
  expectAcyclicAndComplete(g, p);
  ASSERT_EQ(p.partitions.size(), 2u) << describePlan(g, p);
  // The cat cannot join the stem's partition (stem -> cumsum -> conv -> cat would leave and
  // re-enter it); it joins branch 3's conv instead.
  EXPECT_EQ(p.partitions[0].nodes.size(), 7u);
  EXPECT_EQ(opsOf(g, p.partitions[1]), (std::vector<std::string>{"aten::convolution", "aten::cat"}));
  EXPECT_EQ(p.atenNodes.size(), 1u);
  EXPECT_EQ(g.node(p.atenNodes[0]).op, "aten::cumsum");
  EXPECT_GE(p.refusedMerges, 1);
  EXPECT_LT(p.conversions, conversionsWithoutPartitioning(g, defaultOptions()).value());
}

TEST(PartitionerTest, InceptionWhereOneDnnDoesNotPayStaysOnAten) {
  // A cost model saying oneDNN gains little on this shape (e.g. tiny spatial size) against
  // expensive reorders: every partition is dropped and the whole block runs on ATen.
  Graph g = parse(inceptionBody());
  PartitionOptions o = defaultOptions();
  o.benefit = [](const ir::Node&) { return 0.2; };
  o.conversionCost = 1.0;
  PartitionPlan p = plan(g, o);
  EXPECT_TRUE(p.partitions.empty()) << describePlan(g, p);
  EXPECT_EQ(p.atenNodes.size(), g.numLiveNodes());
  EXPECT_EQ(p.droppedPartitions, 2);
  EXPECT_EQ(p.conversions, 0);
  // A negative benefit (ATen measured faster) is dropped even with free conversions.
  o.benefit = [](const ir::Node&) { return -1.0; };
  o.conversionCost = 0.0;
  EXPECT_TRUE(plan(g, o).partitions.empty());
}

TEST(PartitionerTest, SingleCheapNodeIsNotWorthItsConversions) {
  Graph g = parse(unary("%0", "aten::relu", "%x") + unary("%1", "aten::cumsum", "%0") + "  return (%1)\n");
  PartitionOptions o = defaultOptions();
  o.conversionCost = 1.0;  // relu: benefit 1, two reorders
  PartitionPlan p = plan(g, o);
  EXPECT_TRUE(p.partitions.empty());
  EXPECT_EQ(p.droppedPartitions, 1);
  EXPECT_EQ(p.atenNodes, (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(p.partitionOf, (std::vector<int32_t>{-1, -1}));
  // Kept when dropping is off (the "what if" view).
  o.dropUnprofitable = false;
  EXPECT_EQ(plan(g, o).partitions.size(), 1u);
}

TEST(PartitionerTest, DroppingAPartitionIsRecomputedForItsNeighbours) {
  // conv -> cumsum -> relu -> graph out, and conv -> relu2 (P with conv)... the relu after cumsum
  // is dropped; afterwards the remaining partition is costed again and still pays.
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::relu", "%0") + unary("%2", "aten::cumsum", "%1") +
                  unary("%3", "aten::relu", "%2") + "  return (%1, %3)\n");
  PartitionOptions o = defaultOptions();
  o.conversionCost = 1.0;
  PartitionPlan p = plan(g, o);
  ASSERT_EQ(p.partitions.size(), 1u) << describePlan(g, p);
  EXPECT_EQ(opsOf(g, p.partitions[0]), (std::vector<std::string>{"aten::convolution", "aten::relu"}));
  EXPECT_EQ(p.partitions[0].conversions, 2);  // x in; relu out, read by cumsum and the graph output
  EXPECT_DOUBLE_EQ(p.partitions[0].benefit, 11.0);
  EXPECT_DOUBLE_EQ(p.partitions[0].conversionCost, 2.0);
}

TEST(PartitionerTest, PerTensorConversionCostWeighsBigTensors) {
  // relu on a big tensor, then on a small one (after a shape-changing ATen op): with a cost by
  // element count only the small one pays for its conversions.
  Graph g = parse(unary("%0", "aten::relu", "%x") + unary("%1", "aten::cumsum", "%0") +
                      "  %2 : Tensor[1, 2] = aten::view(%1, [1, 2])\n" + unary("%3", "aten::topk", "%2") +
                      unary("%4", "aten::relu", "%3") + "  return (%4)\n",
                  "%x : Tensor[1, 1000]");
  for (ir::ValueId v = 0; v < static_cast<ir::ValueId>(g.numValues()); ++v) {
    ir::Value& value = g.mutableValue(v);
    if (!value.hasShape) value.setShape(value.producer >= 3 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 1000});
  }
  PartitionOptions o = defaultOptions();
  o.conversionCostOf = [](const ir::Value& v) {
    double n = 1;
    for (int64_t d : v.shape) n *= static_cast<double>(d);
    return n / 1000.0;  // 1 per thousand elements
  };
  PartitionPlan p = plan(g, o);
  // The big relu and the view (it reads the big cumsum output) do not pay; the small relu does.
  ASSERT_EQ(p.partitions.size(), 1u) << describePlan(g, p);
  EXPECT_EQ(p.partitions[0].nodes, std::vector<NodeId>{4});
  EXPECT_DOUBLE_EQ(p.partitions[0].conversionCost, 0.004);
  EXPECT_EQ(p.droppedPartitions, 2);
}

TEST(PartitionerTest, NonTensorInputsAreBoundaryInputsButNotConversions) {
  Graph g = parse("  %0 : Tensor = aten::view(%x, [%s0, 8])\n" + unary("%1", "aten::relu", "%0") +
                      "  return (%1)\n",
                  "%s0 : Int, %x : Tensor");
  PartitionPlan p = plan(g);
  ASSERT_EQ(p.partitions.size(), 1u);
  EXPECT_EQ(p.partitions[0].inputs.size(), 2u);  // x and s0
  EXPECT_EQ(p.partitions[0].conversions, 2);     // x in, result out; s0 is a number
}

TEST(PartitionerTest, DeterministicAcrossRunsAndRenumbering) {
  Graph g = parse(inceptionBody());
  PartitionPlan a = plan(g);
  PartitionPlan b = plan(g);
  EXPECT_EQ(describePlan(g, a), describePlan(g, b));
  EXPECT_EQ(a.partitionOf, b.partitionOf);

  // The same graph behind an unrelated leading input and node: every NodeId and ValueId shifts.
  Graph h = parse("  %u : Tensor = aten::cumsum(%y, 0, None)\n" + inceptionBody(), "%y : Tensor, %x : Tensor");
  PartitionPlan c = plan(h);
  ASSERT_EQ(c.partitions.size(), a.partitions.size());
  for (size_t k = 0; k < a.partitions.size(); ++k) {
    EXPECT_EQ(opsOf(h, c.partitions[k]), opsOf(g, a.partitions[k]));
    EXPECT_EQ(partitionSignature(h, c.partitions[k]), partitionSignature(g, a.partitions[k]));
    EXPECT_EQ(c.partitions[k].conversions, a.partitions[k].conversions);
  }
  EXPECT_EQ(c.conversions, a.conversions);

  // Print and parse back (values renumbered by the printer): the same plan text.
  auto reparsed = ir::parseGraph(ir::printGraph(h));
  ASSERT_TRUE(reparsed.isOk());
  EXPECT_EQ(describePlan(reparsed.value(), plan(reparsed.value())), describePlan(h, c));
}

TEST(PartitionerTest, SignatureIgnoresConstantNamesButNotShapesOrAttributes) {
  // Two identical conv+relu blocks with differently named weights, and a third with a stride.
  Graph g = parse(conv("%0", "%x", "w1") + unary("%1", "aten::relu", "%0") + unary("%2", "aten::cumsum", "%1") +
                      conv("%3", "%2", "w2") + unary("%4", "aten::relu", "%3") + unary("%5", "aten::cumsum", "%4") +
                      "  %6 : Tensor = aten::convolution(%5, $w2, None, [2, 2], [1, 1], [1, 1], false, [0, 0], 1)\n"
                      "  return (%6)\n",
                  "%x : Tensor", "  $w1 : f32[8, 8, 3, 3]\n  $w2 : f32[8, 8, 3, 3]\n");
  PartitionPlan p = plan(g);
  ASSERT_EQ(p.partitions.size(), 3u);
  std::string s0 = partitionSignature(g, p.partitions[0]);
  EXPECT_EQ(s0, partitionSignature(g, p.partitions[1]));
  EXPECT_NE(s0, partitionSignature(g, p.partitions[2]));
  EXPECT_NE(s0.find("const:f32[8,8,3,3]"), std::string::npos) << s0;
  EXPECT_NE(s0.find("aten::relu(n0.0)"), std::string::npos) << s0;
}

TEST(PartitionerTest, InputShapesForTuningKeys) {
  Graph g = parse(conv("%0", "%x") + add("%1", "%0", "%y") + "  return (%1)\n",
                  "%x : Tensor[1, 8, 5, 5], %y : Tensor[1, 8, 5, 5]");
  PartitionPlan p = plan(g);
  ASSERT_EQ(p.partitions.size(), 1u);
  auto shapes = partitionInputShapes(g, p.partitions[0]);
  ASSERT_TRUE(shapes.isOk()) << shapes.status().toString();
  EXPECT_EQ(shapes.value(), (std::vector<std::vector<int64_t>>{{1, 8, 5, 5}, {1, 8, 5, 5}}));
  // Unknown shapes are refused, not keyed as if they were known.
  Graph h = parse(conv("%0", "%x") + "  return (%0)\n");
  auto unknown = partitionInputShapes(h, plan(h).partitions[0]);
  ASSERT_FALSE(unknown.isOk());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnsupported);
}

TEST(PartitionerTest, ErasedNodesAreIgnored) {
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::cumsum", "%0") + unary("%2", "aten::relu", "%0") +
                  "  return (%2)\n");
  g.eraseNode(1);  // the cumsum has no users: a dead tombstone
  PartitionPlan p = plan(g);
  ASSERT_EQ(p.partitions.size(), 1u);
  EXPECT_EQ(p.partitions[0].nodes, (std::vector<NodeId>{0, 2}));
  EXPECT_TRUE(p.atenNodes.empty());
  EXPECT_EQ(p.partitionOf[1], -1);
}

TEST(PartitionerTest, MissingCapabilityPredicateIsAnError) {
  Graph g = parse(unary("%0", "aten::relu", "%x") + "  return (%0)\n");
  PartitionOptions o;
  auto p = partitionGraph(g, o);
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(conversionsWithoutPartitioning(g, o).isOk());
}

TEST(PartitionerTest, EngineClassesNeverMerge) {
  // conv -> relu -> conv -> sigmoid -> sigmoid: convs are class 1, the element-wise ops class 2.
  // Neighbours of different classes stay apart (each partition gets one engine); same-class
  // neighbours merge as before, and the class is recorded on the partition.
  Graph g = parse(conv("%0", "%x") + unary("%1", "aten::relu", "%0") + conv("%2", "%1") +
                  unary("%3", "aten::sigmoid", "%2") + unary("%4", "aten::sigmoid", "%3") + "  return (%4)\n");
  PartitionOptions o = defaultOptions();
  o.capable = nullptr;
  o.engineClass = [](const ir::Node& n) { return n.op == "aten::convolution" ? 1 : 2; };
  o.dropUnprofitable = false;
  PartitionPlan p = plan(g, o);
  ASSERT_EQ(p.partitions.size(), 4u);
  EXPECT_EQ(opsOf(g, p.partitions[0]), std::vector<std::string>{"aten::convolution"});
  EXPECT_EQ(p.partitions[0].engineClass, 1);
  EXPECT_EQ(opsOf(g, p.partitions[1]), std::vector<std::string>{"aten::relu"});
  EXPECT_EQ(p.partitions[1].engineClass, 2);
  EXPECT_EQ(opsOf(g, p.partitions[3]), (std::vector<std::string>{"aten::sigmoid", "aten::sigmoid"}));
  EXPECT_EQ(p.partitions[3].engineClass, 2);
  expectAcyclicAndComplete(g, p);
  // Class 0 keeps a node out of every partition.
  o.engineClass = [](const ir::Node& n) { return n.op == "aten::relu" ? 0 : 1; };
  PartitionPlan q = plan(g, o);
  EXPECT_EQ(q.partitionOf[1], -1);
  EXPECT_EQ(q.atenNodes, std::vector<NodeId>{1});
}

TEST(PartitionerTest, ManyBlocksStayLinearEnough) {
  // 300 conv/relu/cumsum blocks: the cycle check is a search per merge; this keeps it honest.
  std::string body;
  std::string prev = "%x";
  for (int k = 0; k < 300; ++k) {
    std::string a = "%a" + std::to_string(k), b = "%b" + std::to_string(k), c = "%c" + std::to_string(k);
    body += conv(a, prev) + unary(b, "aten::relu", a) + unary(c, "aten::cumsum", b);
    prev = c;
  }
  body += "  return (" + prev + ")\n";
  Graph g = parse(body);
  PartitionPlan p = plan(g);
  EXPECT_EQ(p.partitions.size(), 300u);
  EXPECT_EQ(p.conversions, 600);
}

}  // namespace
}  // namespace verifuse::partition
