// What an integer dot-product kernel variant computes, step by step, as data: the declaration that
// the verifier proves exact (verifier/include/verifuse/verify/int_dot.h) for an instance's real
// weights and the input's code range, before the variant may run. No oneDNN, no Z3, no LibTorch.
//
// Every int8 kernel variant computes, per output element,
//   acc = sum_k (x_k - zx) * w_k          exactly, in the mathematical integers
// only if none of its steps clamps or wraps. The steps, in the order a variant performs them:
//   1. source: the values that enter the products: the codes as they are (the zero point is
//      subtracted from the finished s32 sum: "compensation"), the s8 codes shifted by +128 into
//      u8 (oneDNN's s8 source, also compensated), or x - zx computed exactly before the products;
//   2. group: groupSize adjacent products of the reduction summed into a groupBits-wide signed
//      value, clamped to its range when groupSaturates (vpmaddubsw: 2 products into s16), else
//      exact (vpmaddwd: 2 s16 products into s32; vpdpbusd / AMX: 4 u8 x s8 products into s32);
//   3. accumulate: the group results summed into an accumulatorBits-wide signed integer.
// Which products form a group is the kernel's reduction order, which for oneDNN's kernels depends
// on its weight layout; a proof must therefore hold for every grouping of one output element's
// products (the verifier's bounds take the worst groupSize weights of each output channel).
#pragma once

#include <string>

namespace verifuse::kernels {

struct IntDotArithmetic {
  /// Stable name of the variant, for reports and proof-cache keys ("onednn:vpdpbusd", ...).
  std::string variant;
  enum class Source {
    kCodes,                ///< the codes as they are (u8 0..255 or s8 -128..127), compensated after the sum
    kCodesPlus128,         ///< s8 codes + 128 as u8 (0..255), compensated after the sum
    kCodesMinusZeroPoint,  ///< x - zx, exact (s16), before the products: no compensation
  };
  Source source = Source::kCodes;
  int groupSize = 1;            ///< products summed by the first step
  int groupBits = 32;           ///< width of the first step's signed result
  bool groupSaturates = false;  ///< the first step clamps to [-2^(groupBits-1), 2^(groupBits-1) - 1]
  int accumulatorBits = 32;     ///< width of the running signed sum of the group results
};

}  // namespace verifuse::kernels
