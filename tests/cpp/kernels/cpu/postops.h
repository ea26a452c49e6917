// PostOp values for the own kernels' tests. PostOp's factories live in the oneDNN library, which
// these tests do not link.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "verifuse/kernels/ops.h"

namespace verifuse::kernels::testing {

inline PostOp elt(Activation a, float alpha = 0.f, float beta = 0.f) {
  PostOp p;
  p.kind = PostOp::Kind::kEltwise;
  p.act = a;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}
inline PostOp sumOp(float scale) {
  PostOp p;
  p.kind = PostOp::Kind::kSum;
  p.scale = scale;
  return p;
}
inline PostOp binOp(BinaryAlg alg, std::vector<int64_t> dims) {
  PostOp p;
  p.kind = PostOp::Kind::kBinary;
  p.binaryAlg = alg;
  p.binaryDims = std::move(dims);
  return p;
}

}  // namespace verifuse::kernels::testing
