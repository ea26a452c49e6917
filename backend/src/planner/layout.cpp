// Layout: which values the plan hands over channels-last (a convolution whose readers all take
// any memory format leaves its result so, element-wise ops and pools keep it), max pools that run
// on a channels-last copy, and the conversions each partition pays at its edges.
#include "planner/planner.h"

#include "verifuse/rules/rules.h"

#include <set>

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;

/// True if every reader of \p v accepts any memory format (so a convolution may leave it
/// channels-last): other convolutions, pooling and element-wise ops. Views need eager's strides,
/// and graph outputs keep eager's layout.
bool layoutAgnosticReaders(const ir::Graph& g, ValueId v, int depth) {
  static const std::set<std::string> agnostic = {
      "aten::max_pool2d_with_indices", "aten::max_pool2d", "aten::avg_pool2d",
      "aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d", "aten::mean.dim", "aten::add.Tensor",
      "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::relu", "aten::addcmul",
      "aten::sigmoid", "aten::hardswish", "aten::hardsigmoid", "aten::hardtanh", "aten::clamp", "aten::silu",
      "aten::gelu", "aten::tanh", "aten::leaky_relu", "aten::elu", "aten::max_pool3d_with_indices",
      "aten::avg_pool3d", "aten::_adaptive_avg_pool3d", "aten::clamp_min", "aten::clamp_max",
      // cat's result is channels-last when all its inputs are (DenseNet's feature concatenations:
      // without it each conv result went back to NCHW for the cat and the next conv copied it
      // forward again), dense NCHW otherwise; its values do not depend on the layouts.
      "aten::cat"};
  // Element-wise ops, pooling and the row engine keep their input's memory format, so their
  // outputs must in turn reach only layout-agnostic readers; so must a permute's (a permuted
  // channels-last tensor is a dense tensor in another dim order: ConvNeXt's
  // permute(0, 2, 3, 1) -> layer norm -> linears -> permute(0, 3, 1, 2) -> residual add). A
  // convolution re-decides for its own output and a linear writes a fresh dense result, whether
  // it reads v as its input (made contiguous) or as its residual (copied into the output, or
  // accumulated in place when its strides are the output's: ConvNeXt's blocks after
  // add-below-permute, whose residual is the previous block's input permuted back to NHWC).
  if (g.isGraphOutput(v) || depth > 64) return false;
  for (ir::NodeId user : g.users(v)) {
    const ir::Node& n = g.node(user);
    if (n.op == "verifuse::conv" || n.op == "verifuse::linear") continue;
    if (!agnostic.count(n.qualifiedName()) && n.op != "verifuse::rowwise" && n.op != "aten::permute") return false;
    for (ValueId out : n.outputs) {
      if (g.value(out).type != ir::ValueType::Tensor) continue;
      // max_pool2d_with_indices' indices: unused or read like any tensor.
      if (!layoutAgnosticReaders(g, out, depth + 1)) return false;
    }
  }
  return true;
}

StatusOr<bool> assignLayouts(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  runtime::CompiledGraph::Impl& impl = b.impl;
  b.channelsLast.assign(graph.numValues(), false);
  std::vector<bool>& channelsLast = b.channelsLast;
  bool changed = false;
  for (runtime::Step& step : impl.steps) {
    const ir::Node& n = graph.nodes()[step.node];
    if (step.fused) {
      // A convolution leaves its result channels-last when every reader takes any layout; linears,
      // row programs and attention write dense results.
      if (n.op == rules::kConvOp) {
        const bool cl = b.anyLayoutOut[step.node] && graph.value(n.outputs[0]).shape.size() >= 4;
        channelsLast[static_cast<size_t>(n.outputs[0])] = cl;
        changed = changed || cl;
      }
      continue;
    }
    if (step.op && n.qualifiedName() == "aten::max_pool2d_with_indices" && n.outputs.size() == 2 &&
        ir::operand(n, ir::MaxPool2dWithIndices::self).isValue() &&
        graph.value(static_cast<ValueId>(ir::operand(n, ir::MaxPool2dWithIndices::self).i)).shape.size() == 4) {
      step.pool.channelsLast = true;
      impl.stats.channelsLastPools++;
      const ValueId values = n.outputs[0], indices = n.outputs[1];
      step.pool.keepValuesChannelsLast = !graph.users(values).empty() && layoutAgnosticReaders(graph, values);
      step.pool.indicesRead = b.isOutput[static_cast<size_t>(indices)] || !graph.users(indices).empty();
      changed = true;
    }
    // Element-wise ops and pooling keep their first input's memory format; a permute of a
    // 4-D value turns channels-last NCHW into dense NHWC (0, 2, 3, 1) and back (0, 3, 1, 2).
    if (n.op == "aten::permute" && ir::hasOperands<ir::Permute>(n) && ir::operand(n, ir::Permute::self).isValue() &&
        !n.outputs.empty()) {
      const ValueId in = static_cast<ValueId>(ir::operand(n, ir::Permute::self).i);
      const bool inCl = channelsLast[static_cast<size_t>(in)];
      auto dims = ir::operand(n, ir::Permute::dims).asIntList();
      const bool toNchw = dims.isOk() && *dims == std::vector<int64_t>{0, 3, 1, 2};
      // (A channels-last value permuted to NHWC is dense: not channels-last.)
      channelsLast[static_cast<size_t>(n.outputs[0])] = toNchw && !inCl && graph.value(in).shape.size() == 4;
    } else if (!n.outputs.empty()) {
      // The first tensor argument of the result's shape (addcmul(shift, x, scale) follows x),
      // else the first argument (pooling).
      const Arg* from = !n.args.empty() && ir::selfOperand(n).isValue() ? &ir::selfOperand(n) : nullptr;
      for (const Arg& a : n.args) {
        if (a.isValue() && graph.value(static_cast<ValueId>(a.i)).shape == graph.value(n.outputs[0]).shape) {
          from = &a;
          break;
        }
      }
      if (from) {
        channelsLast[static_cast<size_t>(n.outputs[0])] = channelsLast[static_cast<size_t>(from->i)] &&
                                                         !b.isOutput[static_cast<size_t>(n.outputs[0])];
      }
    }
    if (step.pool.keepValuesChannelsLast) channelsLast[static_cast<size_t>(n.outputs[0])] = true;
  }
  return changed;
}

StatusOr<bool> recordEdgeConversions(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  runtime::CompiledGraph::Impl& impl = b.impl;
  bool any = false;
  for (size_t di = 0; di < impl.partitions.size(); ++di) {
    runtime::PartitionDecision& d = impl.partitions[di];
    const Unit& unit = b.units[b.unitOfDecision[di]];
    bool anyConv = false;
    for (size_t k : unit.nodes) {
      const ir::Node& n = graph.nodes()[k];
      if (n.op != rules::kConvOp) continue;
      const ValueId input = static_cast<ValueId>(ir::operand(n, ir::FusedConv::x).i);
      if (graph.value(input).shape.size() < 4) continue;
      anyConv = true;
      // Conversions are per tensor, recorded with what they move (explain draws exactly these).
      auto convert = [&](ValueId v, bool input) {
        const ir::Value& t = graph.value(v);
        runtime::EdgeConversion c;
        c.value = v;
        c.node = n.id;
        c.input = input;
        c.kind = input ? "layout: plain -> channels_last" : "layout: channels_last -> plain";
        if (t.hasStaticShape()) {
          int64_t numel = 1;
          for (const int64_t dim : t.shape) numel *= dim;
          c.bytes = numel * static_cast<int64_t>(c10::elementSize(
                                runtime::toScalarType(t.dtype == ir::DType::Undefined ? ir::DType::Float32 : t.dtype)));
        }
        d.conversions.push_back(std::move(c));
      };
      if (!b.channelsLast[static_cast<size_t>(input)]) {
        d.inputConversions++;
        convert(input, true);
      }
      if (!b.channelsLast[static_cast<size_t>(n.outputs[0])]) {
        d.outputConversions++;
        convert(n.outputs[0], false);
      }
    }
    d.layout = anyConv ? "channels_last" : "plain";
    impl.stats.conversions += static_cast<size_t>(d.inputConversions + d.outputConversions);
    any = any || !d.conversions.empty();
  }
  return any;
}

}  // namespace verifuse::planner
