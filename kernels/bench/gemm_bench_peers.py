"""Reference numbers for verifuse_gemm_bench: the same shapes through MKL (torch.addmm), oneDNN
3.x inside torch (mkldnn linear) and OpenBLAS (numpy.matmul, which packs B on every call).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 0 python kernels/bench/gemm_bench_peers.py
        [--threads 1] [--samples 40] [--only SUBSTRING]

y = x[M,K] · W^T + b with W from nn.Linear ([N, K]); numpy computes x @ W.T (a transposed view,
as nn.Linear's weight would be used) plus b. Same timing rule as the C++ bench: one warm-up call,
then `samples` samples of >= 2 ms each; GFLOP/s at the median (best sample in brackets).
A program, not a test: nothing asserts on these numbers.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.utils.mkldnn

SHAPES = [
    ("base 128x768x768", 128, 768, 768),
    ("base 128x768x3072", 128, 768, 3072),
    ("base 128x3072x768", 128, 3072, 768),
    ("base 64x512x512", 64, 512, 512),
    ("base 1024x768x3072", 1024, 768, 3072),
    ("m128 128x512x2048", 128, 512, 2048),
    ("m128 128x2048x512", 128, 2048, 512),
    ("m128 128x4096x4096", 128, 4096, 4096),
    ("m128 128x2048x2048", 128, 2048, 2048),
    ("gpt2 qkv 64x768x2304", 64, 768, 2304),
    ("gpt2 proj 64x768x768", 64, 768, 768),
    ("gpt2 fc 64x768x3072", 64, 768, 3072),
    ("gpt2 fc2 64x3072x768", 64, 3072, 768),
    ("vit qkv 197x768x2304", 197, 768, 2304),
    ("vit proj 197x768x768", 197, 768, 768),
    ("vit fc 197x768x3072", 197, 768, 3072),
    ("vit fc2 197x3072x768", 197, 3072, 768),
    ("llama qkv 128x512x1536", 128, 512, 1536),
    ("llama o 128x512x512", 128, 512, 512),
    ("llama up 128x512x1408", 128, 512, 1408),
    ("llama down 128x1408x512", 128, 1408, 512),
    ("llama up 64x512x1408", 64, 512, 1408),
    ("llama down 64x1408x512", 64, 1408, 512),
    ("decode 1x768x768", 1, 768, 768),
    ("decode 1x768x3072", 1, 768, 3072),
    ("decode 1x3072x768", 1, 3072, 768),
    ("decode 1x4096x4096", 1, 4096, 4096),
    ("decode 8x768x3072", 8, 768, 3072),
    ("decode 8x4096x4096", 8, 4096, 4096),
    ("decode 1x512x1408", 1, 512, 1408),
    ("decode 8x1408x512", 8, 1408, 512),
]


def time_it(call, samples: int) -> tuple[float, float]:
    call()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        if time.perf_counter() - t0 >= 2e-3 or reps >= 1 << 20:
            break
        reps *= 2
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        ts.append((time.perf_counter() - t0) / reps)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(42)
    print(f"# torch {torch.__version__}, numpy {np.__version__}, threads={args.threads}; GFLOP/s at the "
          "median [best]")
    print(f"{'shape M,K,N':26s} | {'MKL addmm':16s} | {'mkldnn linear':16s} | {'MKL packed':16s} | "
          f"{'numpy/OpenBLAS':16s}")
    for name, m, k, n in SHAPES:
        if args.only and args.only not in name:
            continue
        x = torch.rand(m, k, generator=gen) * 2 - 1
        lin = torch.nn.Linear(k, n).eval()
        w, b = lin.weight.detach(), lin.bias.detach()
        flops = 2.0 * m * k * n
        cells = []
        with torch.no_grad():
            med, best = time_it(lambda: torch.addmm(b, x, w.t()), args.samples)
            cells.append(f"{flops / med / 1e9:6.1f} [{flops / best / 1e9:5.1f}]")
            try:
                mk = torch.utils.mkldnn.to_mkldnn(lin)  # MkldnnLinear: weights prepacked once
                xm = x.to_mkldnn()
                med, best = time_it(lambda: mk(xm), args.samples)
                cells.append(f"{flops / med / 1e9:6.1f} [{flops / best / 1e9:5.1f}]")
            except Exception as e:  # noqa: BLE001 - a missing mkldnn build is just a missing column
                cells.append(f"n/a ({type(e).__name__})")
            try:
                # What inductor's freezing uses for float32 linears when MKL is there: the weight
                # packed once by MKL's sgemm_pack, then sgemm_compute per call.
                packed = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
                med, best = time_it(lambda: torch.ops.mkl._mkl_linear(x, packed, w, b, m), args.samples)
                cells.append(f"{flops / med / 1e9:6.1f} [{flops / best / 1e9:5.1f}]")
            except Exception as e:  # noqa: BLE001 - a build without MKL is just a missing column
                cells.append(f"n/a ({type(e).__name__})")
        xn, wn, bn = x.numpy(), w.numpy(), b.numpy()
        med, best = time_it(lambda: xn @ wn.T + bn, args.samples)
        cells.append(f"{flops / med / 1e9:6.1f} [{flops / best / 1e9:5.1f}]")
        print(f"{name:26s} | " + " | ".join(f"{c:16s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
