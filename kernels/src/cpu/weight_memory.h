// Memory for the constants a kernel streams on every call (packed weights), shared by the own
// GEMM and the oneDNN kernels.
#pragma once

#include <cstddef>

namespace verifuse::kernels::cpu {

/// \p bytes of 64-byte aligned memory, freed with std::free; null when out of memory. A buffer
/// of 2 MiB or more is aligned to 2 MiB and asked to be backed by transparent huge pages
/// (madvise(MADV_HUGEPAGE); only advice: where the kernel has none, 4 KiB pages as before).
/// Why: a GEMM reads its weights once per call, and a model's weights are many times what the
/// second-level TLB maps with 4 KiB pages (3072 entries, 12 MiB on Zen 4), so every 4 KiB of
/// weights costs a page walk (measured: a 64 x 512 x 32000 bf16 GEMM at 2 threads, 360 -> 423
/// GFLOP/s). VERIFUSE_HUGE_PAGES=0 (benchmarking) keeps 4 KiB pages.
void* allocateWeightMemory(size_t bytes);

}  // namespace verifuse::kernels::cpu
