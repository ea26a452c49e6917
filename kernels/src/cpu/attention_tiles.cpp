// Baseline-ISA side of the attention tiles (attention_tiles.h): the run-time checks that guard
// every call into attention_tiles_avx512.cpp and attention_tiles_bf16_avx512.cpp.
#include "cpu/attention_tiles.h"

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

bool attentionTilesBf16Available() { return hasAvx512() && hasAvx512Bf16(); }
bool attentionTilesF32Available() { return hasAvx512(); }

}  // namespace verifuse::kernels::cpu
