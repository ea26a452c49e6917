// Memory for the constants a kernel streams on every call (packed weights), shared by the own
// GEMM and the oneDNN kernels.
#pragma once

#include <cstddef>

namespace verifuse::kernels::cpu {

/// \p bytes of 64-byte aligned memory, released with freeWeightMemory(); null when out of memory.
/// It sits in transparent huge pages (madvise(MADV_HUGEPAGE); only advice: where the kernel gives
/// none, 4 KiB pages as before): a buffer of 2 MiB or more on its own 2 MiB aligned pages (its tail
/// below the last whole 2 MiB keeps 4 KiB pages: no memory is added), a smaller one carved out of
/// a shared 2 MiB chunk that is returned when the last buffer in it is released.
/// Why: a GEMM reads its weights once per call, and a model's weights are many times what the
/// second-level TLB maps with 4 KiB pages (3072 entries, 12 MiB on Zen 4), so every 4 KiB of
/// weights costs a page walk (measured: a 64 x 512 x 32000 bf16 GEMM at 2 threads, 360 -> 423
/// GFLOP/s). VERIFUSE_HUGE_PAGES=0 (benchmarking) gives plain 64-byte aligned allocations.
void* allocateWeightMemory(size_t bytes);

/// Releases what allocateWeightMemory() returned (null is ignored). Thread-safe.
void freeWeightMemory(void* p);

/// Shared 2 MiB chunks currently held for small buffers (tests).
size_t weightMemoryChunkCount();

}  // namespace verifuse::kernels::cpu
