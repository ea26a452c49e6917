#include "verifuse/runtime/plan_set.h"

#include <algorithm>

namespace verifuse::runtime {

PlanSet::PlanSet(std::shared_ptr<const CompiledGraph> first, size_t maxPlans) : maxPlans_(std::max<size_t>(maxPlans, 1)) {
  if (first) plans_.push_back(std::move(first));
}

std::shared_ptr<const CompiledGraph> PlanSet::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.empty() ? nullptr : plans_.front();
}

size_t PlanSet::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

size_t PlanSet::switches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return switches_;
}

void PlanSet::add(std::shared_ptr<const CompiledGraph> plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plans_.insert(plans_.begin(), std::move(plan));
  if (plans_.size() > maxPlans_) plans_.resize(maxPlans_);
  exact_.reset();
}

void PlanSet::setExact(std::shared_ptr<const CompiledGraph> plan) {
  std::lock_guard<std::mutex> lock(mu_);
  exact_ = std::move(plan);
}

StatusOr<std::vector<c10::IValue>> PlanSet::runExact(const std::vector<c10::IValue>& args) {
  std::shared_ptr<const CompiledGraph> exact;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exact = exact_;
  }
  if (!exact) return Status(StatusCode::kNeedsExactPlan, "no exact plan yet");
  StatusOr<std::vector<c10::IValue>> result = exact->run(args);
  const StatusCode code = result.status().code();
  if (code == StatusCode::kStaleWeights || code == StatusCode::kWeightsModified) {
    std::lock_guard<std::mutex> lock(mu_);
    if (exact_ == exact) exact_.reset();  // built for other weights: the caller builds another
    return Status(StatusCode::kNeedsExactPlan, result.status().message());
  }
  return result;
}

StatusOr<std::vector<c10::IValue>> PlanSet::run(const std::vector<c10::IValue>& args) {
  // Each pass either returns or makes progress (a stale plan leaves the front, or the exact plan
  // is taken); the bound only guards against a plan that changes its mind between two checks.
  for (size_t attempt = 0; attempt <= maxPlans_ + 1; ++attempt) {
    std::shared_ptr<const CompiledGraph> plan = current();
    if (!plan) return Status(StatusCode::kStaleWeights, "no plan for these weights");
    // The plans run without the lock: any number of threads may run them at once.
    StatusOr<std::vector<c10::IValue>> result = plan->run(args);
    if (result.isOk()) return result;
    const StatusCode code = result.status().code();
    if (code == StatusCode::kStaleWeights || code == StatusCode::kWeightsModified) {
      std::lock_guard<std::mutex> lock(mu_);
      if (code == StatusCode::kWeightsModified) {
        plans_.erase(std::remove(plans_.begin(), plans_.end(), plan), plans_.end());
      }
      auto kept = std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) {
        return p != plan && p->checkFrozenInputs(args).isOk();
      });
      // None kept: the caller builds one (add), whether the weights were replaced or modified.
      if (kept == plans_.end()) return Status(StatusCode::kStaleWeights, result.status().message());
      std::rotate(plans_.begin(), kept, kept + 1);        // most recently used first
      exact_.reset();
      switches_++;
      continue;
    }
    if (code == StatusCode::kNeedsExactPlan || code == StatusCode::kUnsupported || code == StatusCode::kUnimplemented) {
      StatusOr<std::vector<c10::IValue>> exactResult = runExact(args);
      if (!exactResult.isOk() && exactResult.status().code() == StatusCode::kNeedsExactPlan) {
        return Status(StatusCode::kNeedsExactPlan, result.status().message());
      }
      return exactResult;
    }
    return result;
  }
  return Status(StatusCode::kInternal, "PlanSet: the plans kept changing their answer");
}

}  // namespace verifuse::runtime
