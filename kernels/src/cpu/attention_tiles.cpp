// Baseline-ISA side of the bf16 attention tiles (attention_tiles.h): the run-time check that
// guards every call into attention_tiles_bf16_avx512.cpp.
#include "cpu/attention_tiles.h"

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

bool attentionTilesAvailable() { return hasAvx512() && hasAvx512Bf16(); }

}  // namespace verifuse::kernels::cpu
