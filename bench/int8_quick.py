"""Quick int8 check (issue 17): a PT2E-quantized model (torchao X86InductorQuantizer) on verifuse's
int8 kernels against the float32 model on verifuse, one process, a few runs: not the peer
benchmark (bench/README.md), a minute-scale sanity measurement.

    PYTHONPATH=backend/python:bench python bench/int8_quick.py --model resnet50 --batch 1 --threads 1
    PYTHONPATH=backend/python:bench python bench/int8_quick.py --model bert --layers 12 --threads 1
    PYTHONPATH=backend/python:bench python bench/int8_quick.py --model bert --flow torchao-dynamic

--flow torchao-dynamic quantizes the linears with torchao's Int8DynamicActivationInt8WeightConfig
(per-token dynamic u8 activations, per-channel s8 weights: tensor subclasses, no PT2E graph) and
times eager, inductor (freezing on, torchao's own target) and verifuse on that model, alternated.

resnet50 needs torchvision (`make bench-deps` installs it privately; verifuse_bench.vendor finds it).
Inputs are channels-last for the conv model (as inductor's and verifuse's conv paths prefer; the
int8 conv then writes channels-last like eager and needs no reorders).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from quant_models import quantize_pt2e  # noqa: E402

import verifuse  # noqa: E402


class BertLayer(nn.Module):
    """BERT-base encoder layer: QKV, SDPA, output projection, FFN 768 -> 3072 -> 768, layer norms."""

    def __init__(self, d: int = 768, heads: int = 12):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, s, d)))
        return self.n2(x + self.f2(F.gelu(self.f1(x))))


def timed(fn, x, runs: int) -> float:
    with torch.no_grad():
        fn(x)
        fn(x)
        t = time.perf_counter()
        for _ in range(runs):
            fn(x)
    return (time.perf_counter() - t) / runs * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("resnet50", "bert"), default="resnet50")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--flow", choices=("pt2e", "torchao-dynamic"), default="pt2e")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "resnet50":
        from verifuse_bench import vendor
        from verifuse_bench.quant import untie_resnet_relus

        vendor.ensure_torchvision()
        import torchvision

        model = torchvision.models.resnet50().eval()
        untie_resnet_relus(model)
        x = torch.randn(args.batch, 3, 224, 224).contiguous(memory_format=torch.channels_last)
    else:
        model = nn.Sequential(*[BertLayer() for _ in range(args.layers)]).eval()
        x = torch.randn(args.batch, args.seq, 768)
    if args.flow == "torchao-dynamic":
        return torchao_dynamic(model, x, args)
    quantized = quantize_pt2e(model, x)
    with torch.no_grad():
        f32 = torch.compile(model, backend="verifuse")
        int8 = torch.compile(quantized, backend="verifuse")
        ref_f, ref_q, got = model(x), quantized(x), int8(x)
    ops = {op for g in verifuse.explain(quantized, x).graphs for op in g.ops}
    t_f, t_q = timed(f32, x, args.runs), timed(int8, x, args.runs)
    print(f"{args.model} batch {args.batch} threads {args.threads}: verifuse f32 {t_f:.1f} ms, "
          f"verifuse int8 {t_q:.1f} ms, {t_f / t_q:.2f}x")
    print(f"  int8 ops: {sorted(o for o in ops if o.startswith('verifuse::q'))}")
    print(f"  vs eager quantized: max |diff| {(got - ref_q).abs().max().item():.4g} (output max {ref_q.abs().max().item():.4g})")
    print(f"  vs float32: max |diff| {(got - ref_f).abs().max().item():.4g}, top-1 agreement "
          f"{(got.flatten(0, -2).argmax(-1) == ref_f.flatten(0, -2).argmax(-1)).float().mean().item():.3f} "
          f"(eager quantized: {(ref_q.flatten(0, -2).argmax(-1) == ref_f.flatten(0, -2).argmax(-1)).float().mean().item():.3f})")


def torchao_dynamic(model: nn.Module, x: torch.Tensor, args) -> None:
    import contextlib
    import copy
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import torchao.quantization as tq
    quantized = copy.deepcopy(model)
    tq.quantize_(quantized, tq.Int8DynamicActivationInt8WeightConfig())
    with torch.no_grad():
        ref_f, ref_q = model(x), quantized(x)
        ours = torch.compile(quantized, backend="verifuse")
        got = ours(x)
        import torch._inductor.config as inductor_config

        with inductor_config.patch(freezing=True):
            inductor = torch.compile(copy.deepcopy(quantized), backend="inductor")
            got_inductor = inductor(x)
        times = {"eager": [], "inductor": [], "verifuse": []}
        fns = {"eager": quantized, "inductor": inductor, "verifuse": ours}
        for _ in range(3):  # alternated rounds, medians
            for name, fn in fns.items():
                times[name].append(timed(fn, x, args.runs))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    ops = sorted({op for g in verifuse.explain(quantized, x).graphs for op in g.ops if "int" in op})
    print(f"{args.model} torchao Int8DynamicActivationInt8Weight batch {args.batch} threads {args.threads}: "
          f"eager {med['eager']:.2f} ms, inductor {med['inductor']:.2f} ms, verifuse {med['verifuse']:.2f} ms "
          f"(verifuse vs inductor {med['inductor'] / med['verifuse']:.2f}x)")
    print(f"  int ops: {ops}")
    print(f"  vs eager int8: max |diff| verifuse {(got - ref_q).abs().max().item():.3g}, inductor "
          f"{(got_inductor - ref_q).abs().max().item():.3g}; eager int8 vs float32 {(ref_q - ref_f).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
