// The compile driver (see compile.h): rules under their proof gates, partitions, plan, report.
#include "verifuse/driver/compile.h"

#include <algorithm>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "driver/environment.h"
#include "runtime/int8_kernel_choice.h"
#include "verifuse/kernels/tuning_db.h"
#include "verifuse/partition/partitioner.h"
#include "verifuse/support/hash.h"
#include "verifuse/support/record_store.h"
#include "verifuse/verify/layer_check.h"
#include "verifuse/verify/catalog.h"
#include "verifuse/verify/proof_cache.h"
#include "verifuse/verify/prover.h"

namespace verifuse::driver {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Rule proofs are schematic: proved once per process (and once per machine with a cache_dir).
class ProofMemo {
 public:
  passes::ProofOutcome prove(const rules::Rule& rule, const std::string& cacheDir) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outcomes_.find(rule.id());
    if (it != outcomes_.end()) {
      passes::ProofOutcome cached = it->second;
      cached.fromCache = true;
      cached.seconds = 0;
      return cached;
    }
    verify::ProveAllOptions options;
    options.maxK = 2;
    options.checkAxioms = false;
    options.prove.timeoutMs = 5000;
    options.prove.cache = cacheLocked(cacheDir);
    const uint64_t queriesBefore = verify::solverQueryCount();
    const auto start = Clock::now();
    verify::RuleResult r = verify::proveRule(rule.proof(), options);
    passes::ProofOutcome out;
    out.rule = rule.id();
    out.verdict = verify::verdictKindName(r.verdict.kind);
    out.message = r.verdict.summary();
    if (!r.verdict.counterexample.empty()) out.message += "; counterexample: " + r.verdict.counterexample.toString();
    for (const auto& m : r.mutants) {
      if (!m.killed()) out.message += "; mutant " + m.name + " NOT refuted (" + m.verdict.summary() + ")";
    }
    out.seconds = secondsSince(start);
    out.fromCache = verify::solverQueryCount() == queriesBefore;
    out.admitted = r.ok();  // Proved, every bounded instance Proved, every mutant Refuted
    outcomes_[rule.id()] = out;
    return out;
  }

  /// The proof cache of \p cacheDir (null without one), for a compile-wide write batch.
  verify::ProofCache* cache(const std::string& cacheDir) {
    std::lock_guard<std::mutex> lock(mu_);
    return cacheLocked(cacheDir);
  }

 private:
  verify::ProofCache* cacheLocked(const std::string& cacheDir) {
    if (cacheDir.empty()) return nullptr;
    auto& cache = caches_[cacheDir];
    if (!cache) cache = std::make_unique<verify::ProofCache>(cacheDir + "/proofs");
    return cache.get();
  }

  std::mutex mu_;
  std::map<std::string, passes::ProofOutcome> outcomes_;
  std::map<std::string, std::unique_ptr<verify::ProofCache>> caches_;
};

ProofMemo& proofMemo() {
  static ProofMemo* memo = new ProofMemo();  // never destroyed: used from any thread until exit
  return *memo;
}

passes::PipelineOptions pipelineOptions(const CompileRequest& request, std::shared_ptr<passes::LayerCheckPolicy> layer) {
  passes::PipelineOptions options;
  options.fuse = request.fuse;
  options.verify = request.verify;
  const std::string cacheDir = request.cacheDir;
  options.proveRule = [cacheDir](const rules::Rule& r) { return proofMemo().prove(r, cacheDir); };
  options.validateInstance = [layer](const ir::Graph& g, const rules::FusionRecord& r) {
    return passes::validateFoldInstanceWithPolicy(g, r, *layer);
  };
  return options;
}

void describeNodes(const runtime::CompiledGraph& plan, CompileReport& report) {
  const auto& engines = plan.nodeEngines();
  const auto& runsOn = plan.nodeRunsOn();
  const auto& partitionOf = plan.nodePartition();
  const auto& timings = plan.nodeTimings();
  std::vector<NodeReport> nodes = describeGraphNodes(plan.graph());
  for (size_t k = 0; k < nodes.size(); ++k) {
    NodeReport& n = nodes[k];
    n.partition = partitionOf[k];
    n.engine = engines[k];
    n.runsOn = runsOn[k];
    n.timings = timings[k];
    report.ops[n.op]++;
    report.nodes.push_back(std::move(n));
  }
}

}  // namespace

std::vector<NodeReport> describeGraphNodes(const ir::Graph& g) {
  std::vector<NodeReport> nodes;
  nodes.reserve(g.nodes().size());
  for (const ir::Node& node : g.nodes()) {
    NodeReport n;
    n.id = node.id;
    n.op = node.qualifiedName();
    std::vector<ir::ValueId> used;
    for (const ir::Arg& a : node.args) a.collectValues(used);
    for (ir::ValueId v : used) {  // each producer once (an edge of the picture)
      const ir::NodeId producer = g.value(v).producer;
      NodeInputReport in{producer, producer >= 0 ? std::string() : g.value(v).name};
      const bool seen = std::any_of(n.inputs.begin(), n.inputs.end(), [&in](const NodeInputReport& o) {
        return o.producer == in.producer && o.graphInput == in.graphInput;
      });
      if (!seen) n.inputs.push_back(std::move(in));
    }
    if (rules::isFusedOp(node)) n.fusion = ir::namedOperand(node, "post_ops")->s;  // the post-op list's text
    for (ir::ValueId out : node.outputs) n.graphOutput = n.graphOutput || g.isGraphOutput(out);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

namespace {

/// The plan cache's record store in cacheDir (support/README.md): key planCacheKey, payload
/// SavedPlan::encode. Bump with SavedPlan::kFormat.
constexpr const char* kPlanStore = "plans-v1";

/// One saved-plan replay or recording in progress: the hooks of one compileOnce.
struct PlanTrace {
  const SavedPlan* replay = nullptr;  ///< answer from here
  SavedPlan* record = nullptr;        ///< and/or write here
  size_t nextInstance = 0;
  std::string miss;                   ///< the first divergence from `replay`
};

/// The pipeline, partitions and plan of one graph (compile() adds the saved-plan logic around it).
StatusOr<CompiledModel> compileOnce(ir::Graph graph, const CompileRequest& request, PlanTrace& trace) {
  CompileReport report;
  auto layerPolicy = std::make_shared<passes::LayerCheckPolicy>();
  layerPolicy->weightBudget = request.layerCheckWeights < 0 ? INT64_MAX : request.layerCheckWeights;
  passes::PipelineOptions options = pipelineOptions(request, layerPolicy);
  if (trace.replay) {
    // Every verdict from the record: no Z3 query, no numeric recomputation.
    options.proveRule = [&trace](const rules::Rule& r) {
      auto it = trace.replay->proofs.find(r.id());
      if (it == trace.replay->proofs.end()) {
        if (trace.miss.empty()) trace.miss = "rule " + r.id() + " matched but has no verdict in the saved plan";
        passes::ProofOutcome refused;
        refused.rule = r.id();
        refused.verdict = "Unknown";
        refused.message = "not in the saved plan";
        return refused;
      }
      return it->second;
    };
    options.validateInstance = [&trace](const ir::Graph&, const rules::FusionRecord& f) {
      if (trace.nextInstance >= trace.replay->instances.size() ||
          trace.replay->instances[trace.nextInstance].first != f.rule) {
        if (trace.miss.empty()) trace.miss = "instance check of " + f.rule + " is not in the saved plan";
        rules::InstanceCheck refused;
        refused.verdict = "Unknown";
        refused.detail = "not in the saved plan";
        return refused;
      }
      return trace.replay->instances[trace.nextInstance++].second;
    };
  }
  if (trace.record) {
    auto prove = options.proveRule;
    options.proveRule = [prove, &trace](const rules::Rule& r) {
      passes::ProofOutcome o = prove(r);
      trace.record->proofs[r.id()] = o;
      return o;
    };
    if (options.validateInstance) {
      auto validate = options.validateInstance;
      options.validateInstance = [validate, &trace](const ir::Graph& g, const rules::FusionRecord& f) {
        rules::InstanceCheck c = validate(g, f);
        trace.record->instances.emplace_back(f.rule, c);
        return c;
      };
    }
  }
  if (request.plantedBug) {
    VF_ASSIGN_OR_RETURN(rules::Rule planted, rules::plantedBugRule());
    options.extraRules.push_back(std::move(planted));
  }

  // 1. Canonicalize and fuse under the proof gates (new verdicts written once, together).
  auto t0 = Clock::now();
  StatusOr<passes::PipelineResult> ran = [&] {
    verify::ProofCache::Batch batch(proofMemo().cache(request.cacheDir));
    return passes::runPipeline(graph, options);
  }();
  VF_ASSIGN_OR_RETURN(passes::PipelineResult pipeline, std::move(ran));
  report.pipelineSeconds = secondsSince(t0);
  report.fusions = std::move(pipeline.fusions);
  report.proofs = std::move(pipeline.proofs);
  report.rulesMatched = pipeline.rulesMatched;
  report.rulesApplied = pipeline.rulesApplied;
  report.rulesRefused = pipeline.rulesRefused;
  report.passChanges = std::move(pipeline.passChanges);
  report.rewrites = std::move(pipeline.rewrites);
  report.nearMisses = std::move(pipeline.nearMisses);
  report.nearMissesOmitted = pipeline.nearMissesOmitted;

  // The int8 ops choose their kernels at their first run, each only where its declared arithmetic
  // is proved exact; the lemmas behind that proof are the same for every layer: prove them now,
  // through this compile's proof cache (the install proved them already), not during a user's call.
  for (const ir::Node& n : graph.nodes()) {
    if (!n.erased && runtime::isInt8KernelOp(n.op)) {
      runtime::proveInt8VariantLemmas(proofMemo().cache(request.cacheDir));
      break;
    }
  }

  // 2. Partition: union-find over nodes of one engine class, acyclic merges only.
  t0 = Clock::now();
  graph.compact();
  const EnginePolicy engines = engineFromEnvironment(request.engines);
  runtime::CompileOptions plan;
  plan.useOnednn = engines != EnginePolicy::kAten;
  plan.bf16 = request.bf16;
  plan.autotune = request.autotune && engines == EnginePolicy::kAuto;
  plan.releaseWeights = plan.useOnednn && request.fuse;
  plan.linearWeights = request.linearWeights;
  plan.writtenBackInputs = request.writtenBack;
  applyPlannerEnvironment(plan);
  partition::PartitionOptions po;
  po.engineClass = runtime::engineClassOf;
  po.dropUnprofitable = false;  // whether a partition pays is measured by the planner, not guessed
  VF_ASSIGN_OR_RETURN(partition::PartitionPlan parts, partition::partitionGraph(graph, po));
  for (const partition::Partition& p : parts.partitions) {
    runtime::PartitionSpec spec;
    spec.id = p.id;
    spec.nodes = p.nodes;
    spec.engineClass = p.engineClass;
    spec.signature = partition::partitionSignature(graph, p);
    if (p.nodes.size() > 1) {
      for (ir::NodeId n : p.nodes) spec.memberSignatures.push_back(partition::nodeSignature(graph, n));
    }
    plan.partitions.push_back(std::move(spec));
  }

  // 3. Plan: one engine per partition (tuned when it can be), kernels, prepacked weights.
  std::unique_ptr<kernels::TuningDb> tuningDb;
  if (plan.autotune && !request.cacheDir.empty()) {
    auto db = kernels::TuningDb::open(request.cacheDir);
    if (db.isOk()) tuningDb = std::move(db).value();
    else report.tuningDb = db.status().toString();  // unusable cache dir: the heuristic decides
  }
  plan.tuningDb = tuningDb.get();
  if (trace.replay && plan.autotune && trace.replay->tuned) {
    plan.tuningDb = nullptr;  // the record answers; nothing is timed or looked up
    plan.replayTunings = &trace.replay->tunings;
    plan.replayMiss = &trace.miss;
  }
  if (trace.record) {
    trace.record->tuned = plan.tuningDb != nullptr || plan.replayTunings != nullptr;
    plan.recordTunings = &trace.record->tunings;
  }
  VF_ASSIGN_OR_RETURN(std::shared_ptr<const runtime::CompiledGraph> compiled,
                      runtime::compileGraph(std::move(graph), request.inputArgIndex, request.frozen, request.numArgs, plan));
  report.planSeconds = secondsSince(t0);
  if (tuningDb) {
    (void)tuningDb->flush();  // a failed write only costs a re-tune next time
    auto ts = tuningDb->stats();
    report.tuningDb = tuningDb->path();
    report.tuningDbHits = ts.hits;
    report.tuningDbRebuilt = ts.rebuilt ? ts.rebuildReason : std::string();
  }

  report.partitions = compiled->partitions();
  report.timingsRun = compiled->timingsRun();
  report.stats = compiled->stats();
  report.reorders = static_cast<int>(report.stats.conversions);
  for (const ir::Node& n : compiled->graph().nodes()) {
    // Without partitions every convolution would convert its input and its output.
    if (n.op == rules::kConvOp && compiled->graph().value(n.outputs[0]).shape.size() >= 4) report.reordersBefore += 2;
  }
  describeNodes(*compiled, report);
  // 4. Dynamic shapes: the assumptions the planned graph relies on, decided against Dynamo's guards.
  if (request.shapeFacts.dynamic) {
    report.shapes = shape_guards::analyzeShapeGuards(compiled->graph(), request.inputArgIndex, request.shapeFacts);
  }
  if (trace.record) trace.record->optimizedIr = ir::printGraph(compiled->graph());
  return CompiledModel{std::move(compiled), std::move(report), nullptr};
}

/// The constants a plan was validated for: the frozen weights and every other tensor the lowered
/// graph holds (lifted constants: a fold may read them too), in id order.
std::vector<ir::ConstantId> fingerprintedConstants(const ir::Graph& graph) {
  std::vector<ir::ConstantId> ids;
  for (size_t k = 0; k < graph.constants().size(); ++k) ids.push_back(static_cast<ir::ConstantId>(k));
  return ids;
}

/// The plan cache's key: everything the plan depends on. Equal keys <=> same lowered graph, same
/// weights, same options and environment (FNV-1a 64 over length-framed parts).
std::string planCacheKey(const std::string& environment, const ir::Graph& graph, const std::vector<WeightPrint>& weights) {
  uint64_t h = support::kFnv1a64Offset;
  auto part = [&h](const std::string& s) {
    h = support::fnv1a64(std::to_string(s.size()) + ":", h);
    h = support::fnv1a64(s, h);
  };
  part(environment);
  part(ir::printGraph(graph));
  for (const WeightPrint& w : weights) part(w.name + "=" + w.print);
  return support::hex16(h);
}

/// While a process compiles a plan the cache does not have, others compiling the same graph wait
/// for it (an flock per key under cacheDir/plans-v1.locks), then replay its plan: replicas that
/// start together do the solver and tuner work once. Released on destruction or process death.
/// Best effort: a lock that cannot be taken within \p timeoutSeconds (or at all) is not waited for.
class CompileLock {
 public:
  CompileLock(const std::string& cacheDir, const std::string& key, int timeoutSeconds) {
    const std::string dir = cacheDir + "/" + kPlanStore + ".locks";
    ::mkdir(dir.c_str(), 0755);
    fd_ = ::open((dir + "/" + key + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    const auto end = Clock::now() + std::chrono::seconds(timeoutSeconds);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      waited_ = true;
      if (Clock::now() > end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~CompileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
  }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;
  bool waited() const { return waited_; }

 private:
  int fd_ = -1;
  bool waited_ = false;
};

uint64_t z3Queries() { return verify::solverQueryCount() + verify::layerCheckQueryCount(); }

}  // namespace

StatusOr<CompiledModel> compile(ir::Graph graph, const CompileRequest& request) {
  const uint64_t queriesBefore = z3Queries();
  // Saved plans cover static shapes: the shape-guard analysis of dynamic graphs asks Z3 each time.
  const bool savable = !request.environment.empty() && !request.shapeFacts.dynamic && request.fuse;
  std::string note;
  if (!request.environment.empty() && !savable && request.fuse) note = "dynamic shapes: plan not saved or cached";
  if (request.replay && !savable) {
    note = "saved plan refused, compiled from scratch: " +
           (request.environment.empty() ? std::string("no environment given") : note);
  }
  std::string environment;
  std::vector<WeightPrint> weights;
  std::string cacheKey;
  std::unique_ptr<support::RecordStore> store;
  std::unique_ptr<CompileLock> lock;  // held from a cache miss until this plan is stored
  std::shared_ptr<const SavedPlan> replay;
  std::string source;
  if (savable) {
    environment = environmentKey() + ";" + request.environment;
    VF_ASSIGN_OR_RETURN(weights, fingerprintWeights(graph, fingerprintedConstants(graph)));
  }
  if (savable && (request.replay || (request.planCache && !request.cacheDir.empty()))) {
    if (request.replay) {
      replay = request.replay;
      source = "saved-plan";
    } else {
      cacheKey = planCacheKey(environment, graph, weights);
      auto opened = support::RecordStore::open(request.cacheDir, kPlanStore);
      if (opened.isOk()) {
        store = std::move(opened).value();
        if (!store->contains(cacheKey)) {
          lock = std::make_unique<CompileLock>(request.cacheDir, cacheKey, 600);
          if (lock->waited()) (void)store->reload();  // the other process may have stored it
        }
        if (auto hit = store->get(cacheKey)) {
          auto decoded = SavedPlan::decode(hit->payload);
          if (decoded.isOk()) {
            replay = std::make_shared<const SavedPlan>(std::move(decoded).value());
            source = "plan-cache";
          } else {
            note = "plan cache entry ignored: " + decoded.status().message();
          }
        }
      } else {
        note = "plan cache unusable: " + opened.status().toString();
      }
    }
  }
  if (replay) {
    Status fits = replay->environment == environment
                      ? checkWeights(replay->weights, weights)
                      : invalidArgument("it was made in another environment (verifuse build, torch, oneDNN, Z3, CPU or "
                                        "options differ): saved '" + replay->environment.substr(0, 300) + "', here '" +
                                        environment.substr(0, 300) + "'");
    if (fits.isOk()) {
      PlanTrace trace;
      trace.replay = replay.get();
      StatusOr<CompiledModel> replayed = compileOnce(graph, request, trace);  // a copy: kept for a retry
      if (replayed.isOk() && trace.miss.empty() && trace.nextInstance != replay->instances.size()) {
        trace.miss = "the saved plan has instance checks this compile did not make";
      }
      if (replayed.isOk() && trace.miss.empty() && ir::printGraph(replayed->plan->graph()) != replay->optimizedIr) {
        trace.miss = "the optimized graph differs from the saved one";
      }
      if (replayed.isOk() && trace.miss.empty()) {
        replayed->saved = replay;
        replayed->report.planSource = source;
        replayed->report.planNote = note;
        replayed->report.solverQueries = static_cast<int64_t>(z3Queries() - queriesBefore);
        return replayed;
      }
      fits = invalidArgument(replayed.isOk() ? trace.miss : replayed.status().toString());
    }
    note = (source == "plan-cache" ? "plan cache entry refused, compiled from scratch: "
                                   : "saved plan refused, compiled from scratch: ") + fits.message();
  }
  PlanTrace trace;
  auto record = savable ? std::make_shared<SavedPlan>() : nullptr;
  trace.record = record.get();
  VF_ASSIGN_OR_RETURN(CompiledModel fresh, compileOnce(std::move(graph), request, trace));
  if (record) {
    record->environment = environment;
    record->weights = weights;
    fresh.saved = record;
  }
  if (store && record) {
    store->put(cacheKey, record->encode());
    Status flushed = store->flush();
    if (!flushed.isOk()) note += (note.empty() ? "" : "; ") + std::string("plan not cached: ") + flushed.toString();
  }
  fresh.report.planNote = note;
  fresh.report.solverQueries = static_cast<int64_t>(z3Queries() - queriesBefore);
  return fresh;
}

}  // namespace verifuse::driver
