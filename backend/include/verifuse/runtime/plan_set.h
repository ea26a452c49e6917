// The plans one compiled graph keeps and the policy that picks among them, decided by the plans'
// Status codes (never by their text): one plan per set of frozen weights, most recently used
// first (copies of one model share Dynamo's graph and pass their own weights), and the exact
// (unfused, ATen-only) plan for inputs the fused ops hand back (NaN/Inf: kNeedsExactPlan).
// Building a plan needs the Python lowering, so the caller builds and hands plans in (add,
// setExact) when run() asks for one; everything else is decided here.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "verifuse/runtime/executor.h"

namespace verifuse::runtime {

class PlanSet {
 public:
  PlanSet(std::shared_ptr<const CompiledGraph> first, size_t maxPlans);

  /// Runs the current plan on \p args. Frozen weights that are not its own: a kept plan built for
  /// them becomes current and runs (a plan whose weights were modified in place can never match
  /// again and is dropped); none kept returns kStaleWeights, and the caller adds one and runs
  /// again. Inputs the plan hands back (kNeedsExactPlan, kUnsupported, kUnimplemented) run on the
  /// exact plan; none set (or its weights went stale) returns kNeedsExactPlan, and the caller sets
  /// one and runs again. Any other status is the call's own error (eager's message).
  StatusOr<std::vector<c10::IValue>> run(const std::vector<c10::IValue>& args);

  /// A plan built for the weights of the call that asked for it: it becomes current, the least
  /// recently used beyond maxPlans is dropped, and so is the exact plan (built for other weights).
  void add(std::shared_ptr<const CompiledGraph> plan);
  void setExact(std::shared_ptr<const CompiledGraph> plan);
  /// Runs the exact plan alone (the call run() handed back with kNeedsExactPlan, once the caller
  /// set one: the fused plan already failed on these inputs); kNeedsExactPlan when none is set or
  /// its weights went stale.
  StatusOr<std::vector<c10::IValue>> runExact(const std::vector<c10::IValue>& args);
  /// The plan the next call tries first (null once the only plan was dropped, until add()).
  std::shared_ptr<const CompiledGraph> current() const;
  size_t size() const;
  /// Calls that switched to a kept plan instead of asking for a new one.
  size_t switches() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const CompiledGraph>> plans_;  // most recently used first
  std::shared_ptr<const CompiledGraph> exact_;
  size_t maxPlans_;
  size_t switches_ = 0;
};

}  // namespace verifuse::runtime
