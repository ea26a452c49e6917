// Tuning: one decision per partition, in execution order. A partition the tuner may time runs on
// every engine all its members can run, on random inputs of its real shapes and layouts (made
// only when a candidate really runs: the tuning database or a saved plan answers most keys), and
// keeps the fastest — or a mix of per-member engines when that pays by splitMargin. The others
// keep the engine engine_selection.cpp gave them.
#include "planner/planner.h"

#include "verifuse/kernels/tuning_db.h"
#include "verifuse/rules/rules.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <span>
#include <thread>

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;
using runtime::ArgSlot;
using runtime::engineName;
using runtime::FusedOp;
using runtime::kRowwiseOp;
using runtime::PartitionDecision;

namespace {

/// The value a partition input \p id is a view of, when it is made from one through a short chain
/// of the plan's own ATen view steps (split, view, transpose, ...) whose other arguments are
/// fixed: the chain's nodes go to \p chain, nearest first. nullopt when \p id is not such a view.
std::optional<ValueId> viewChainRoot(const ir::Graph& graph, const std::map<ir::NodeId, size_t>& indexOf,
                                     const std::vector<size_t>& stepOf, const runtime::CompiledGraph::Impl& impl, ValueId id,
                                     std::vector<size_t>& chain) {
  static const std::set<std::string> kViews = {
      "aten::view",       "aten::_unsafe_view", "aten::reshape",          "aten::transpose.int", "aten::permute",
      "aten::slice.Tensor", "aten::split.Tensor", "aten::split_with_sizes", "aten::select.int",    "aten::unsqueeze",
      "aten::squeeze.dim", "aten::expand",       "aten::t",                "aten::alias",         "aten::unbind.int"};
  // (qualified names: "aten::view" is the default overload, "aten::slice.Tensor" another)
  constexpr size_t kMaxChain = 8;
  chain.clear();
  ValueId cur = id;
  // Sizes, dims and offsets known now, not values of the call (nor inside a list).
  std::function<bool(const Arg&)> fixed = [&](const Arg& a) {
    if (a.isValue() || a.isConstant()) return false;
    for (const Arg& e : a.list) {
      if (!fixed(e)) return false;
    }
    return true;
  };
  while (chain.size() < kMaxChain) {
    const ir::Value& v = graph.value(cur);
    auto it = indexOf.find(v.producer);
    if (v.producer < 0 || it == indexOf.end()) break;
    const size_t k = it->second;
    const ir::Node& n = graph.nodes()[k];
    if (!kViews.count(n.qualifiedName()) || stepOf[k] == SIZE_MAX || n.args.empty() || !ir::selfOperand(n).isValue()) break;
    const runtime::Step& step = impl.steps[stepOf[k]];
    if (step.fused || step.builtin || !step.op) break;
    bool fixedRest = true;  // every operand but the viewed tensor
    for (const ir::Arg& a : std::span<const ir::Arg>(n.args).subspan(1)) fixedRest = fixedRest && fixed(a);
    if (!fixedRest) break;
    chain.push_back(k);
    cur = static_cast<ValueId>(ir::selfOperand(n).i);
  }
  if (chain.empty() || !graph.value(cur).hasStaticShape()) return std::nullopt;
  // The root is made dense, so it must be dense in the model too: a graph input (taken dense,
  // as every timing input always was) or a verifuse op's output (its kernels write dense
  // tensors). Not an ATen op's: SDPA returns [b, h, s, d] laid out as [b, s, h, d], which a dense
  // root would turn into a view the model's own view step cannot take.
  const ir::NodeId rootProducer = graph.value(cur).producer;
  if (rootProducer >= 0) {
    auto it = indexOf.find(rootProducer);
    if (it == indexOf.end()) return std::nullopt;
    const ir::Node& n = graph.nodes()[it->second];
    if (!rules::isFusedOp(n) && n.op != kRowwiseOp) return std::nullopt;
  }
  return cur;
}

}  // namespace

StatusOr<bool> decidePartitions(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  const CompileOptions& options = b.options;
  runtime::CompiledGraph::Impl& impl = b.impl;
  const std::vector<bool>& channelsLast = b.channelsLast;
  const std::vector<size_t>& stepOf = b.stepOf;
  bool timedAny = false;
  for (size_t u : b.unitOrder) {
    const Unit& unit = b.units[u];
    if (unit.partition < 0) continue;
    const PartitionSpec& spec = b.specs[static_cast<size_t>(unit.partition)];
    const PartitionFacts& facts = b.facts[static_cast<size_t>(unit.partition)];
    PartitionDecision d;
    d.id = spec.id;
    for (size_t k : unit.nodes) d.nodes.push_back(graph.nodes()[k].id);
    std::vector<FusedOp*> members;
    for (size_t k : unit.nodes) members.push_back(b.fusedOf[k]);
    std::vector<Engine> candidates;
    for (Engine e : runtime::allEngines()) {
      bool all = true;
      for (FusedOp* op : members) all = all && op->canRun(e);
      if (all) candidates.push_back(e);
    }
    if (!facts.timed || candidates.size() < 2) {
      d.engine = engineName(members.front()->engine());
      if (candidates.size() < 2) d.how = "heuristic: one candidate engine";
      else if (!facts.staticShapes) d.how = "heuristic: dynamic shapes";
      else if (facts.forced) {
        const bool attention = unit.nodes.size() == 1 && runtime::isAttentionEngineOp(graph.nodes()[unit.nodes[0]]);
        d.how = attention ? "heuristic: VERIFUSE_ATTENTION=" + options.forcedAttention
                          : "heuristic: VERIFUSE_LINEAR=" + options.forcedLinear;
      }
      else if (!b.tuning) d.how = options.autotune ? "heuristic: no tuning database" : "heuristic: autotune off";
      else if (facts.fewRowLinears) d.how = "heuristic: linear of at most 4 rows (streams its weights)";
      else d.how = "heuristic: too big to time (" + std::to_string(static_cast<int64_t>(facts.macs)) + " MACs)";
      if (candidates.size() < 2 && options.releaseWeights) {
        for (FusedOp* op : members) op->releaseWeights();
      }
    } else {
      // Time the whole partition on each candidate with random inputs of its real shapes. The
      // inputs are made only when a candidate really runs: a decision the tuning database holds
      // needs none (random tensors and a partition run per compile were most of a warm plan).
      const size_t begin = stepOf[unit.nodes.front()];
      size_t end = begin;
      for (size_t k : unit.nodes) end = std::max(end, stepOf[k] + 1);
      std::vector<bool> isFolded(graph.numValues(), false);
      for (const auto& entry : impl.folded) isFolded[static_cast<size_t>(entry.first)] = true;
      std::vector<ValueId> randomInputs;
      std::vector<std::vector<int64_t>> inputShapes;
      // Which inputs arrive channels-last, or as views: a convolution's timing depends on it (a
      // plain input costs oneDNN a conversion that ATen's kernel does not pay), and attention's
      // on q/k/v's strides, so it is part of the key. Keys of partitions whose inputs are all
      // dense stay what they were.
      std::string inputLayouts;
      // 'v': made through the model's view steps (its strides, see partitionInputs).
      std::vector<size_t> viewChain;
      auto layoutLetter = [&](ValueId v) {
        if (channelsLast[static_cast<size_t>(v)] && graph.value(v).shape.size() >= 4) return 'c';
        return viewChainRoot(graph, b.indexOf, stepOf, impl, v, viewChain) ? 'v' : 'd';
      };
      auto layoutTag = [](const std::string& letters) {
        return letters.find_first_not_of('d') == std::string::npos ? std::string() : " inputs:" + letters;
      };
      std::set<ValueId> produced;
      for (size_t st = begin; st < end; ++st) {
        for (const ArgSlot& a : impl.steps[st].args) {
          if (a.kind != ArgSlot::Kind::Value || produced.count(a.value) || isFolded[static_cast<size_t>(a.value)]) continue;
          produced.insert(a.value);  // read twice, one input
          randomInputs.push_back(a.value);
          inputShapes.push_back(graph.value(a.value).shape);
          inputLayouts += layoutLetter(a.value);
        }
        for (ValueId out : impl.steps[st].outputs) produced.insert(out);
      }
      std::vector<c10::IValue> slots;  // the partition's start values: folded ones, random inputs
      auto partitionInputs = [&]() -> const std::vector<c10::IValue>& {
        if (!slots.empty()) return slots;
        impl.stats.tuningInputsMade++;
        slots.resize(graph.numValues());
        for (const auto& [v, value] : impl.folded) slots[static_cast<size_t>(v)] = value;
        auto randomOf = [&](ValueId id) {
          const ir::Value& v = graph.value(id);
          // A bf16 model's activations are bf16; everything else is timed on float32 as before.
          const at::ScalarType type = v.dtype == ir::DType::BFloat16 ? at::kBFloat16 : at::kFloat;
          at::Tensor t = at::randn(v.shape, at::TensorOptions().dtype(type));
          if (channelsLast[static_cast<size_t>(id)] && v.shape.size() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
          if (channelsLast[static_cast<size_t>(id)] && v.shape.size() == 5) t = t.contiguous(at::MemoryFormat::ChannelsLast3d);
          return t;
        };
        for (ValueId id : randomInputs) {
          if (!slots[static_cast<size_t>(id)].isNone()) continue;  // made by an earlier input's view chain
          // An input the model hands over through views (SDPA's q, k and v: a projection's output
          // split per head and transposed) is made the same way, from a random root through the
          // plan's own view steps, so it has the model's strides: the engines do not pay the same
          // for strided rows (AVX2, [1,12,128,64]: the attention engine 4% ahead of ATen's kernel
          // on dense q/k/v, 3-5% behind on transposed views of a split input).
          std::vector<size_t> chain;
          if (auto root = viewChainRoot(graph, b.indexOf, stepOf, impl, id, chain)) {
            if (slots[static_cast<size_t>(*root)].isNone()) slots[static_cast<size_t>(*root)] = randomOf(*root);
            bool ok = true;
            for (auto it = chain.rbegin(); it != chain.rend() && ok; ++it) {
              ok = runtime::runSteps(impl, stepOf[*it], stepOf[*it] + 1, slots, false, std::nullopt, /*keepValues=*/true).isOk();
            }
            const c10::IValue& made = slots[static_cast<size_t>(id)];
            if (ok && made.isTensor() && made.toTensor().sizes().vec() == graph.value(id).shape) {
              impl.stats.tuningInputsThroughViews++;
              continue;
            }
          }
          slots[static_cast<size_t>(id)] = randomOf(id);
        }
        return slots;
      };
      const double penaltyMs = options.tuningPenaltyMs;
      // Runs steps [from, to) on engine e from the random inputs (or, for one member, from the
      // values a whole-partition run left in `values`).
      std::vector<c10::IValue> values;
      auto runRange = [&](size_t from, size_t to, Engine e, const std::vector<c10::IValue>& start,
                          std::vector<c10::IValue>* keep) -> Status {
        std::vector<c10::IValue> scratch = start;
        try {
          VF_RETURN_IF_ERROR(runtime::runSteps(impl, from, to, scratch, false, e, /*keepValues=*/keep != nullptr));
        } catch (const std::exception& ex) {
          return unimplemented(std::string("partition failed on ") + engineName(e) + ": " + ex.what());
        }
        if (e == Engine::kOnednn && penaltyMs > 0) {
          size_t fusedRuns = 0;
          for (size_t st = from; st < to; ++st) fusedRuns += impl.steps[st].fused ? 1 : 0;
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(penaltyMs * static_cast<double>(fusedRuns)));
        }
        if (keep) *keep = std::move(scratch);
        return Status::ok();
      };
      // `start` hands the values a timing run starts from (made on first use; null: none).
      using StartValues = std::function<const std::vector<c10::IValue>*()>;
      auto tune = [&](const std::string& signature, const std::vector<std::vector<int64_t>>& shapes,
                      const std::vector<Engine>& engines, size_t from, size_t to,
                      const StartValues& start) -> StatusOr<kernels::TuningDecision> {
        std::vector<kernels::Candidate> cands;
        for (Engine e : engines) {
          cands.push_back({engineName(e), [&, e, from, to]() -> Status {
                             const std::vector<c10::IValue>* values = start();
                             if (values == nullptr) return unimplemented("the partition's run before its members failed");
                             return runRange(from, to, e, *values, nullptr);
                           }});
        }
        auto key = kernels::TuningKey::forThisMachine(signature, shapes, options.bf16 ? "bf16" : "f32",
                                                      at::get_num_threads());
        return runtime::tuneOrReplay(runtime::TuningSources::of(options), key, signature.substr(0, 80), cands, 1, options.tuneRepeats);
      };
      auto parseEngine = [](const std::string& name) {
        for (Engine e : runtime::allEngines()) {
          if (name == engineName(e)) return e;
        }
        return Engine::kAten;
      };
      const int64_t timingsAtStart = kernels::timingCallCount();
      auto decision = tune((spec.signature.empty() ? std::string("partition") : spec.signature) + layoutTag(inputLayouts),
                           inputShapes, candidates, begin, end, [&] { return &partitionInputs(); });
      Engine chosen = facts.heuristic;
      if (!decision.isOk()) {
        d.how = "heuristic: tuning failed (" + decision.status().toString() + ")";
        if (std::find(candidates.begin(), candidates.end(), chosen) == candidates.end()) chosen = candidates.front();
      } else {
        chosen = parseEngine(decision->chosen);
        for (const auto& [name, ms] : decision->medianMs) {
          if (ms >= 0) d.candidateMs[name] = ms;
        }
        d.how = kernels::timingCallCount() > timingsAtStart ? "tuned" : "tuning-db";
        // Split when a mix pays: each member alone on each engine it can run (from the values a
        // whole-partition run produced), its best summed over the members.
        if (members.size() > 1 && spec.memberSignatures.size() == members.size()) {
          bool ranWhole = false;
          auto memberInputs = [&]() -> const std::vector<c10::IValue>* {
            if (!ranWhole) {
              ranWhole = true;
              (void)runRange(begin, end, chosen, partitionInputs(), &values);
            }
            return values.empty() ? nullptr : &values;
          };
          double mixMs = 0;
          std::vector<Engine> best(members.size(), chosen);
          bool complete = true;
          for (size_t j = 0; j < members.size() && complete; ++j) {
            const size_t st = stepOf[unit.nodes[j]];
            std::vector<std::vector<int64_t>> shapes;
            std::vector<Engine> engines;
            std::string memberLayouts;
            for (const ArgSlot& a : impl.steps[st].args) {
              if (a.kind != ArgSlot::Kind::Value) continue;
              shapes.push_back(graph.value(a.value).shape);
              memberLayouts += layoutLetter(a.value);
            }
            for (Engine e : runtime::allEngines()) {
              if (members[j]->canRun(e)) engines.push_back(e);
            }
            auto mine = tune(spec.memberSignatures[j] + layoutTag(memberLayouts), shapes, engines, st, st + 1, memberInputs);
            if (!mine.isOk()) {
              complete = false;
              break;
            }
            best[j] = parseEngine(mine->chosen);
            mixMs += mine->msOf(mine->chosen);
            for (const auto& [name, ms] : mine->medianMs) {
              if (ms >= 0) impl.nodeTimings[unit.nodes[j]][name] = ms;
            }
          }
          const double wholeMs = decision->msOf(decision->chosen);
          bool mixed = false;
          for (Engine e : best) mixed = mixed || e != best.front();
          if (complete && mixed && wholeMs > 0 && mixMs < wholeMs * (1.0 - options.splitMargin)) {
            d.split = true;
            d.splitMs = mixMs;
            for (size_t j = 0; j < members.size(); ++j) members[j]->setEngine(best[j]);
          }
        }
      }
      if (!d.split) {
        for (FusedOp* op : members) op->setEngine(chosen);
      }
      d.engine = d.split ? "split" : engineName(chosen);
      if (options.releaseWeights) {
        for (FusedOp* op : members) op->releaseWeights();
      }
    }
    timedAny = timedAny || d.how == "tuned";
    // What the report shows of it.
    for (size_t k : unit.nodes) d.macs += estimateMacs(graph, graph.nodes()[k]);
    for (size_t k : unit.nodes) {
      const ir::Node& n = graph.nodes()[k];
      if (n.outputs.empty()) continue;
      const ir::DType t = graph.value(n.outputs[0]).dtype;
      const std::string name = t == ir::DType::Undefined ? "f32" : ir::dtypeShortName(t);  // text graphs: f32
      d.dtype = d.dtype.empty() || d.dtype == name ? name : "mixed";
    }
    std::vector<std::string> runsOn;  // each engine once, in member order
    for (FusedOp* op : members) {
      const std::string on = op->runsOn();
      if (std::find(runsOn.begin(), runsOn.end(), on) == runsOn.end()) {
        d.runsOn += (runsOn.empty() ? "" : " + ") + on;
        runsOn.push_back(on);
      }
      if (d.impl.empty() && op->engine() != Engine::kAten) d.impl = op->implInfo();
      d.weightCopyBytes += op->weightCopyBytes();
      d.sharedWeightCopyBytes += op->sharedWeightCopyBytes();
      const std::string layout = op->weightLayout();
      if (layout.empty()) continue;
      d.weightLayout = d.weightLayout.empty() || d.weightLayout == layout ? layout : "mixed";
    }
    impl.stats.weightCopyBytes += d.weightCopyBytes;
    impl.stats.sharedWeightCopyBytes += d.sharedWeightCopyBytes;
    const int32_t index = static_cast<int32_t>(impl.partitions.size());
    for (size_t k : unit.nodes) {
      impl.nodePartition[k] = index;
      impl.nodeEngines[k] = engineName(b.fusedOf[k]->engine());
      impl.nodeRunsOn[k] = b.fusedOf[k]->runsOn();
    }
    b.unitOfDecision.push_back(u);
    impl.partitions.push_back(std::move(d));
  }
  impl.stats.partitions = impl.partitions.size();
  return timedAny;
}

}  // namespace verifuse::planner
