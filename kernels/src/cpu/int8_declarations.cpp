// The integer arithmetic each int8 kernel variant declares (int8.h, int_arithmetic.h): data only,
// no oneDNN, so the verifier's proofs of every tier's variants build and run anywhere.
#include "verifuse/kernels/int8.h"
#include "verifuse/kernels/int8_widening.h"

namespace verifuse::kernels {

IntDotArithmetic onednnInt8Arithmetic(Int8Type srcType, bool withoutSaturation) {
  // oneDNN's doc/advanced/int8_computations.md: u8 x s8 only; an s8 source is shifted by +128
  // into u8 and the shift compensated from the weights' sums, the zero point likewise.
  IntDotArithmetic a;
  a.source = srcType == Int8Type::kS8 ? IntDotArithmetic::Source::kCodesPlus128 : IntDotArithmetic::Source::kCodes;
  if (withoutSaturation) {
    a.variant = "onednn:vpdpbusd";  // and AMX's tdpbusd: four products into s32, exact
    a.groupSize = 4;
    a.groupBits = 32;
    a.groupSaturates = false;
  } else {
    a.variant = "onednn:vpmaddubsw";  // two products into a saturating s16, then vpmaddwd, vpaddd
    a.groupSize = 2;
    a.groupBits = 16;
    a.groupSaturates = true;
  }
  a.accumulatorBits = 32;
  return a;
}

std::vector<IntDotArithmetic> int8ArithmeticDeclarations() {
  std::vector<IntDotArithmetic> all;
  for (bool withoutSaturation : {true, false}) {
    for (Int8Type src : {Int8Type::kU8, Int8Type::kS8}) all.push_back(onednnInt8Arithmetic(src, withoutSaturation));
  }
  all.push_back(int8WideningArithmetic());
  return all;
}

}  // namespace verifuse::kernels
