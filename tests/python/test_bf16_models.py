"""bf16 models (issue 19): `model.to(torch.bfloat16)` runs on verifuse's bf16 kernels instead of
falling back to eager, on every tier with AVX2: with bf16 instructions (avx512_bf16, AMX) the
kernels compute in bf16 ("native"); without them (AVX2 CPUs, AVX-512 without bf16) they keep bf16
storage and compute in float32 ("widened": the own GEMM's widening variant, oneDNN's float32
convolutions and attention matmuls on widened data, implementations marked "bf16io"), rounding to
bf16 at the same points. Every test here runs on both kinds of tier (`make test` reruns this file
capped to avx2 and avx512); what it expects of the kernels follows the tier (_runs_bf16_kernel).

Tests that count which engine ran compile with autotune=False: the planner's heuristic then decides
(oneDNN or the own GEMM for bf16 linears), where timing on a loaded 2-core machine can hand a tiny
partition to ATen by noise (eager's bf16 kernels are competitive at these sizes on some tiers).

What each test pins down, so that it fails when the feature is off:
- the plan really computes in bf16: the linears run on a bf16 kernel, oneDNN's or the own bf16
  GEMM (profiler events "verifuse::linear@onednn" / "@gemm"), SDPA on the attention kernel ("...@onednn" with
  VERIFUSE_ATTENTION=onednn), the report's partitions say dtype "bf16" with the tier's bf16
  implementation, and the outputs are bf16;
- the results are as close to the exact value as eager's own bf16 computation is. The tolerance is
  derived, not guessed: `reference` is the same model evaluated in float32 (its bf16 weights widened,
  which is exact, and the same inputs widened), i.e. what the bf16 model means without rounding.
  Eager bf16 deviates from it by its own rounding error e_eager; verifuse rounds at different points
  (one rounding per fused linear + post-ops instead of one per op; the same points as ATen's flash
  attention), so its deviation must be of the same size: at most 2 * e_eager (and by the triangle
  inequality it is then within 3 * e_eager of eager bf16 itself).
- float16 models fall back to eager with one warning naming the reason; a bf16 model fed a float32
  input gets eager's own error;
- without bf16 instructions a bf16 model does not fall back (strict), and its partitions name the
  widened kernels (test_bf16_models_run_widened_without_native_bf16, in a process capped to avx2
  when this one has a higher tier).
"""
import copy
import json
import os
import subprocess
import sys
import warnings
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import profile

import verifuse
from tiers import CAPS, TIER, is_native_bf16_impl, lacks, requires

NATIVE = bool(CAPS["onednn_native_bf16"])
# bf16 models run on verifuse's kernels: natively, or widened (float32 arithmetic on bf16 data) on
# any CPU with AVX2.
bf16_kernels = requires("own_avx2", "AVX2 (widened bf16 kernels) or native bf16")


def _runs_bf16_kernel(impl: str) -> bool:
    """The tier's kernel for a bf16 partition: one on bf16 instructions (oneDNN's avx512_core_bf16 or
    AMX ones, the own AVX512-BF16 GEMM) where oneDNN has them, else a widened one (float32
    arithmetic on bf16 data, "bf16io" in its name: "verifuse gemm:avx2_bf16io",
    "verifuse gemm:avx512_bf16io", "brgconv:avx2 f32 on bf16io")."""
    if NATIVE:
        return is_native_bf16_impl(impl)
    return "bf16io" in impl


def _own_bf16_gemm_impl() -> str:
    """The own GEMM's bf16 variant on this tier: vdpbf16ps, or widening 16 or 8 lanes wide."""
    if CAPS["own_avx512_bf16"]:
        return "verifuse gemm:avx512_bf16"
    return "verifuse gemm:avx512_bf16io" if CAPS["own_avx512"] else "verifuse gemm:avx2_bf16io"


def _engine_events(compiled, args, kwargs=None):
    """(outputs, Counter of engine runs by profiler name) for one call; "aten inside an engine":
    ATen attention ops the profiler saw besides, i.e. an engine that handed its inputs to ATen."""
    with profile() as prof:
        out = compiled(*args, **(kwargs or {}))
    events = Counter(e.name for e in prof.events() if "@" in e.name)
    events["aten inside an engine"] = sum(1 for e in prof.events() if e.name == "aten::_scaled_dot_product_flash_attention_for_cpu")
    return out, events


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return _first_tensor(out[0])
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _widen(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 else x


def _check_bf16_accuracy(model, args, kwargs, got):
    """verifuse's deviation from the float32 evaluation of the bf16 model is at most twice eager
    bf16's own (module docstring)."""
    with torch.no_grad():
        eager = _first_tensor(model(*args, **kwargs)).float()
        reference = _first_tensor(copy.deepcopy(model).float()(*[_widen(a) for a in args],
                                                               **{k: _widen(v) for k, v in kwargs.items()})).float()
    got = got.float()
    e_eager = (eager - reference).abs().max().item()
    e_verifuse = (got - reference).abs().max().item()
    assert e_eager > 0, "eager bf16 equal to float32: the model does not exercise bf16 rounding"
    assert e_verifuse <= 2 * e_eager, (e_verifuse, e_eager)
    return e_verifuse, e_eager


class Block(nn.Module):
    """A transformer encoder layer as transformers writes it: q/k/v projections to heads, SDPA with
    an additive bf16 mask, output projection + residual, layer norm, GELU MLP + residual."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), attn_mask=mask)
        x = self.ln1(self.o(a.transpose(1, 2).reshape(b, s, d)) + x)
        return self.ln2(self.down(F.gelu(self.up(x))) + x)


def _block_inputs(b=2, s=24, d=64):
    torch.manual_seed(0)
    x = torch.randn(b, s, d).bfloat16()
    mask = torch.zeros(b, 1, s, s)
    mask[1, :, :, -5:] = torch.finfo(torch.bfloat16).min  # padding of the second sequence, as transformers masks
    return x, mask.bfloat16()


@bf16_kernels
def test_bf16_block_runs_bf16_kernels_with_eager_sized_error(monkeypatch):
    monkeypatch.setenv("VERIFUSE_ATTENTION", "onednn")  # the attention partition without timing
    torch.manual_seed(0)
    model = Block().eval().bfloat16()
    x, mask = _block_inputs()
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
        compiled(x, mask)
        got, events = _engine_events(compiled, (x, mask))
    assert got.dtype == torch.bfloat16
    # bf16 linears: oneDNN's bf16 inner product or the own bf16 GEMM, as the tuner timed them; q, k
    # and v are one GEMM over their concatenated bf16 weights (qkv-concat), then o, up, down
    assert events["verifuse::linear@onednn"] + events["verifuse::linear@gemm"] == 4, events
    if not NATIVE:  # oneDNN's bf16 inner product is reference code here: the widening GEMM runs them
        assert events["verifuse::linear@gemm"] == 4, events
    assert events["aten::_scaled_dot_product_flash_attention_for_cpu@onednn"] == 1, events
    assert events["verifuse::rowwise@rowwise"] == 2, events  # the two layer norms, in bf16
    _check_bf16_accuracy(model, (x, mask), {}, got)


@bf16_kernels
def test_bf16_attention_with_a_padding_mask_expanded_over_the_query_rows(monkeypatch):
    """transformers' padding mask [b, 1, 1, kv] expanded to [b, 1, q, kv] (query-row stride 0): the
    oneDNN attention widens its bf16 row once per block and uses it for every query row."""
    monkeypatch.setenv("VERIFUSE_ATTENTION", "onednn")
    torch.manual_seed(0)
    model = Block().eval().bfloat16()
    x, _ = _block_inputs()
    pad = torch.zeros(2, 1, 1, 24)
    pad[1, ..., -5:] = torch.finfo(torch.bfloat16).min
    pad[0, ..., :3] = -2.5  # a finite additive bias too, different per key
    mask = pad.bfloat16().expand(2, 1, 24, 24)
    assert mask.stride(2) == 0
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x, mask)
        got, events = _engine_events(compiled, (x, mask))
    assert events["aten::_scaled_dot_product_flash_attention_for_cpu@onednn"] == 1, events
    _check_bf16_accuracy(model, (x, mask), {}, got)


class PermutedBiasBlock(nn.Module):
    """T5's attention mask in bf16: a relative-position bias embedded as [q, kv, heads], permuted
    to heads first and masked by where(); its key stride is the number of heads."""

    def __init__(self, s=24, d=64, heads=4):
        super().__init__()
        self.h = heads
        self.bias = nn.Parameter(torch.randn(s, s, heads))
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, keep):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3 * self.h, d // self.h).transpose(1, 2).chunk(3, dim=1)
        bias = self.bias.permute(2, 0, 1).unsqueeze(0)
        mask = torch.where(keep, bias, torch.finfo(x.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@bf16_kernels
def test_bf16_attention_gathers_a_permuted_mask(monkeypatch):
    """The oneDNN attention reads a bf16 mask whose keys are not adjacent (widened per query row)
    instead of handing the call to ATen."""
    monkeypatch.setenv("VERIFUSE_ATTENTION", "onednn")
    torch.manual_seed(0)
    model = PermutedBiasBlock().eval().bfloat16()
    x = torch.randn(2, 24, 64).bfloat16()
    keep = torch.ones(2, 1, 24, 24, dtype=torch.bool)
    keep[1, ..., -5:] = False
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x, keep)
        got, events = _engine_events(compiled, (x, keep))
    assert events["aten::_scaled_dot_product_flash_attention_for_cpu@onednn"] == 1, events
    assert events["aten inside an engine"] == 0, events
    _check_bf16_accuracy(model, (x, keep), {}, got)


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=bf16_kernels)])
def test_residual_sum_accumulates_into_the_dead_intermediate(dtype):
    """down(...) + x, with x the first layer norm's result at its last use: the linear writes its
    sum into x's buffer, no copy of the residual per call, bf16 like float32 (a bf16 residual was
    copied: the check compared the storage with 4 bytes per element). o(a) + x adds the graph input
    x, which the caller still holds: that one is copied, in both dtypes."""
    torch.manual_seed(0)
    model = Block().eval().to(dtype)
    x, mask = (t.to(dtype) for t in _block_inputs())
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        expected = compiled(x, mask).clone()
        with profile(record_shapes=True) as prof:
            got = compiled(x, mask)
    copies = [e for e in prof.events() if e.name == "aten::copy_" and e.input_shapes[:1] == [[2, 24, 64]]]
    assert len(copies) == 1, [(e.name, e.input_shapes) for e in copies]
    assert torch.equal(got, expected)


@bf16_kernels
def test_bf16_linears_run_on_the_own_bf16_gemm(monkeypatch):
    # Linear + GELU and linear + residual forced onto the own GEMM's bf16 variant (vdpbf16ps on
    # AVX512-BF16, the widening float32 one elsewhere; float32 accumulation, one bf16 rounding): its
    # error stays eager-sized. Fails if the bf16 GEMM cannot run them (the linears would fall back
    # to @onednn, or to ATen without native bf16).
    monkeypatch.setenv("VERIFUSE_LINEAR", "gemm")
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(64, 200), nn.Linear(200, 64)

        def forward(self, x):
            return self.down(F.gelu(self.up(x))) + x

    torch.manual_seed(0)
    model = Mlp().eval().bfloat16()
    x = torch.randn(3, 37, 64).bfloat16()
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
        compiled(x)
        got, events = _engine_events(compiled, (x,))
    assert got.dtype == torch.bfloat16
    assert events["verifuse::linear@gemm"] == 2, events
    report = verifuse.explain(Mlp().eval().bfloat16(), x, autotune=False)
    gemms = [p for p in report.to_dict()["partitions"] if p["engine"] == "gemm"]
    assert gemms and all(p["impl"] == _own_bf16_gemm_impl() and p["dtype"] == "bf16" for p in gemms), gemms
    _check_bf16_accuracy(model, (x,), {}, got)
    # Untimed and not forced (the planner's heuristic), a bf16 model's linears take the own bf16 GEMM
    # too, except a partition with a GELU epilogue at K <= 512 (geluOnShortK: oneDNN's is faster
    # there), like this one at K = 64, or with any linear at K <= 384 (oneDNN's bf16 kernel keeps a
    # small lead there without a GELU too). Without bf16 instructions oneDNN has no bf16 kernel to
    # offer: every bf16 linear takes the widening GEMM.
    monkeypatch.delenv("VERIFUSE_LINEAR")
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
        compiled(x)
        _, events = _engine_events(compiled, (x,))
    assert events["verifuse::linear@onednn" if NATIVE else "verifuse::linear@gemm"] == 2, events
    for k_in, engine in ((640, "gemm"), (384, "onednn" if NATIVE else "gemm")):
        mlp = nn.Sequential(nn.Linear(k_in, 640), nn.ReLU(), nn.Linear(640, k_in)).eval().bfloat16()
        xw = torch.randn(3, 37, k_in).bfloat16()
        torch._dynamo.reset()
        with torch.no_grad():
            compiled = torch.compile(mlp, backend="verifuse", options={"strict": True, "autotune": False})
            compiled(xw)
            got, events = _engine_events(compiled, (xw,))
        assert events[f"verifuse::linear@{engine}"] == 2, (k_in, events)
        _check_bf16_accuracy(mlp, (xw,), {}, got)


@bf16_kernels
def test_report_says_bf16_partitions_with_bf16_kernels():
    torch.manual_seed(0)
    model = Block().eval().bfloat16()
    report = verifuse.explain(model, *_block_inputs(), autotune=False)
    linears = [p for p in report.to_dict()["partitions"] if any("verifuse::linear" in op for op in p["ops"])]
    # oneDNN, the own GEMM, or a split between them (the tuner's per-member mix)
    assert linears and all(p["engine"] in ("onednn", "gemm", "split") for p in linears), linears
    assert all(p["dtype"] == "bf16" for p in linears), [p["dtype"] for p in linears]
    # oneDNN's implementation names, and the own GEMM's, carry the data type of the kernels they run
    # (bf16 instructions, or "bf16io": float32 arithmetic on bf16 data)
    assert all(_runs_bf16_kernel(p["impl"]) for p in linears), [p["impl"] for p in linears]
    assert "bf16" in str(report)


@bf16_kernels
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_transformers_bf16_models(name):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, vocab_size=500)
        model = transformers.BertModel(cfg)
    else:  # RMSNorm and rotary upcast to float32 inside the bf16 model: a mixed graph
        cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, intermediate_size=128, vocab_size=500)
        model = transformers.LlamaModel(cfg)
    model = model.eval().to(torch.bfloat16)
    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, -4:] = 0
    kwargs = {"attention_mask": mask}
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
        compiled(ids, **kwargs)
        out, events = _engine_events(compiled, (ids,), kwargs)
    got = _first_tensor(out)
    assert got.dtype == torch.bfloat16
    # 2 layers' projections at least, on oneDNN's bf16 inner product or the own bf16 GEMM
    assert events["verifuse::linear@onednn"] + events["verifuse::linear@gemm"] >= 8, events
    _check_bf16_accuracy(model, (ids,), kwargs, got)


def test_float16_model_falls_back_with_its_reason():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU()).eval().half()
    x = torch.randn(4, 16).half()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = torch.compile(model, backend="verifuse")(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, verifuse.VerifuseFallbackWarning)]
    assert len(messages) == 1 and "float16" in messages[0], messages
    torch.testing.assert_close(got, model(x), rtol=0, atol=0)


@lacks("own_avx2", "AVX2")
def test_bf16_model_without_avx2_or_native_bf16_falls_back_with_its_reason():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU()).eval().bfloat16()
    x = torch.randn(4, 16).bfloat16()
    with pytest.warns(verifuse.VerifuseFallbackWarning, match="AVX2 or native bf16"), torch.no_grad():
        got = torch.compile(model, backend="verifuse")(x)
    torch.testing.assert_close(got, model(x), rtol=0, atol=0)


def test_bf16_model_fed_float32_gets_eagers_error():
    model = nn.Sequential(nn.Linear(16, 8), nn.GELU()).eval().bfloat16()
    x = torch.randn(4, 16)
    with pytest.raises(RuntimeError) as eager, torch.no_grad():
        model(x)
    with pytest.raises(RuntimeError) as compiled, torch.no_grad():
        torch.compile(model, backend="verifuse")(x)
    assert str(eager.value) in str(compiled.value), (str(eager.value), str(compiled.value))


class ConvNet(nn.Module):
    """conv-bn-relu twice with a residual add, pooled, then a linear: ResNet's pattern in miniature."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        y = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn1(self.conv(y)) + y)
        return self.fc(y.mean((2, 3)))


def _conv_net():
    torch.manual_seed(0)
    model = ConvNet()
    for bn in (model.bn0, model.bn1):  # non-trivial running statistics, so the folds change weights
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.2, 0.2)
    return model.eval().bfloat16()


@bf16_kernels
def test_bf16_cnn_folds_batch_norm_and_runs_bf16_convolutions():
    model = _conv_net()
    x = torch.randn(2, 3, 20, 20).bfloat16()
    report = verifuse.explain(model, x)
    folds = [f for f in report.to_dict()["fusions"] if f["rule"] == "conv-bn-fold"]
    assert len(folds) == 2 and all(f["verdict"] == "Proved" for f in folds), folds
    # The instance check states the bf16 rounding of the folded weights the kernel packs.
    assert all("bf16 kernel: each folded value rounded to bf16 within 2^-8" in f["detail"] for f in folds), folds
    convs = [p for p in report.to_dict()["partitions"] if any("verifuse::conv" in op for op in p["ops"])]
    assert convs and all(p["dtype"] == "bf16" and _runs_bf16_kernel(p["impl"]) for p in convs if p["engine"] == "onednn")
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
        compiled(x)
        got, events = _engine_events(compiled, (x,))
    assert got.dtype == torch.bfloat16
    assert events["verifuse::conv@onednn"] == 2, events
    _check_bf16_accuracy(model, (x,), {}, got)


@bf16_kernels
def test_bf16_fold_outside_bf16_range_is_refused():
    """A batch norm whose scale pushes folded weights past bf16's largest value (3.39e38): the
    bf16 rounding bound does not hold there, so the fold is Refuted and not applied."""
    model = _conv_net()
    model.bn0.eps = 0.0
    model.bn0.running_var.fill_(1e-20)  # s = gamma / sqrt(var) ~ 1e10
    model.stem.weight.data.fill_(1e30)  # folded: ~1e40, above bf16's range
    x = torch.randn(1, 3, 8, 8).bfloat16()
    report = verifuse.explain(model, x)
    folds = [f for f in report.to_dict()["fusions"] if f["rule"] == "conv-bn-fold"]
    verdicts = sorted(f["verdict"] for f in folds)
    assert verdicts == ["Proved", "Refuted (instance)"], verdicts
    refused = next(f for f in folds if f["verdict"] != "Proved")
    assert "outside bf16's normal range" in refused["detail"], refused


class LayerScaled(nn.Module):
    """ConvNeXt's block end: a linear, then the layer scale (a per-channel parameter) times it."""

    def __init__(self, d=64):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.gamma = nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        return self.gamma * self.fc(x) + x


@bf16_kernels
def test_bf16_layer_scale_folds_into_the_bf16_linear():
    """A bf16 model's own bf16 scale tensor keeps eager's result bf16, like a number, so it folds
    into the weights (one bf16 rounding, stated by the instance check); a float32 scale would make
    eager's result float32 (type promotion), so that fold is refused with the reason."""
    torch.manual_seed(0)
    model = LayerScaled().eval().bfloat16()
    x = torch.randn(2, 9, 64).bfloat16()
    report = verifuse.explain(model, x).to_dict()
    folds = [f for f in report["fusions"] if f["rule"] == "per-channel-mul-fold"]
    assert len(folds) == 1 and folds[0]["verdict"] == "Proved", folds
    assert "bf16 kernel: each folded value rounded to bf16 within 2^-8" in folds[0]["detail"], folds
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x)
        got, events = _engine_events(compiled, (x,))
    assert got.dtype == torch.bfloat16
    assert not any(k.startswith("aten::mul") for k in events), events
    _check_bf16_accuracy(model, (x,), {}, got)

    class Float32Scale(LayerScaled):
        def forward(self, x):
            return self.g32 * self.fc(x)

    mixed = Float32Scale().eval().bfloat16()
    mixed.register_buffer("g32", torch.rand(64) + 0.5)  # after .bfloat16(): stays float32
    report = verifuse.explain(mixed, x).to_dict()
    assert not [f for f in report["fusions"] if f["rule"] == "per-channel-mul-fold"], report["fusions"]
    assert any(m["rule"] == "per-channel-mul-fold" and "promotes to float32" in m["reason"] for m in report["near_misses"]), report["near_misses"]
    with torch.no_grad():
        got = torch.compile(mixed, backend="verifuse", options={"strict": True})(x)
    assert got.dtype == torch.float32


class RmsNormSiluMul(nn.Module):
    """Llama's bf16 RMSNorm (a float32 island: upcast, pow/mean/rsqrt, downcast, times the bf16
    weight) and its silu(a) * b: chains the row engine runs in one pass."""

    def __init__(self, d=64):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x, b):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = self.weight * h.to(torch.bfloat16)
        return F.silu(y) * b


@bf16_kernels
def test_bf16_row_chains_round_where_eager_rounds():
    """The row program rounds each bf16 op's result to bf16 where eager does (and keeps the float32
    island in float32), so it reproduces eager bf16 up to float32 rounding inside each op: at most one
    bf16 ulp apart, not merely within the derived tolerance."""
    torch.manual_seed(0)
    model = RmsNormSiluMul().eval().bfloat16()
    x, b = torch.randn(4, 16, 64).bfloat16(), torch.randn(4, 16, 64).bfloat16()
    with torch.no_grad():
        expected = model(x, b)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x, b)
        got, events = _engine_events(compiled, (x, b))
    assert got.dtype == torch.bfloat16
    # One pass: the float32 island's x.float() ** 2 is not a chain of its own ahead of the mean
    # (that split stored two float32 rows between two passes).
    assert events["verifuse::rowwise@rowwise"] == 1, events
    ulp = torch.finfo(torch.bfloat16).eps * expected.float().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
    assert ((got.float() - expected.float()).abs() <= ulp).all()


# ---- without bf16 instructions: widened, not eager -----------------------------------------------

def _widened_run():
    """A bf16 transformer block and a bf16 CNN on a tier without bf16 instructions: compiled under
    strict (no fallback), their linears on the own GEMM's widening variant, convolutions and
    attention on oneDNN's float32 kernels over bf16 data, each partition naming that kernel, results
    within the derived tolerance. Runs in the calling process, which must be such a tier."""
    assert not NATIVE and CAPS["own_avx2"], CAPS["summary"]
    os.environ["VERIFUSE_ATTENTION"] = "onednn"  # the attention partition without timing
    try:
        result = {"tier": TIER}
        torch.manual_seed(0)
        model = Block().eval().bfloat16()
        x, mask = _block_inputs()
        with warnings.catch_warnings():
            warnings.simplefilter("error", verifuse.VerifuseFallbackWarning)
            with torch.no_grad():
                compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
                compiled(x, mask)
                got, events = _engine_events(compiled, (x, mask))
            assert got.dtype == torch.bfloat16
            assert events["verifuse::linear@gemm"] == 4 and events["verifuse::linear@onednn"] == 0, events
            assert events["aten::_scaled_dot_product_flash_attention_for_cpu@onednn"] == 1, events
            assert events["aten inside an engine"] == 0, events
            result["block_error"] = _check_bf16_accuracy(model, (x, mask), {}, got)
            report = verifuse.explain(Block().eval().bfloat16(), x, mask, autotune=False).to_dict()
            assert not report["fallbacks"], report["fallbacks"]
            # (the attention kernel is made at its first call: explain() has no implementation to
            # name; attention_test.cpp holds the widened kernel to its reference)
            impls = {p["impl"] for p in report["partitions"] if p["engine"] in ("gemm", "onednn") and p["impl"]}
            assert impls == {_own_bf16_gemm_impl()}, impls
            result["block_impls"] = sorted(impls)

            cnn = _conv_net()
            xc = torch.randn(2, 3, 20, 20).bfloat16()
            torch._dynamo.reset()
            with torch.no_grad():
                compiled = torch.compile(cnn, backend="verifuse", options={"strict": True, "autotune": False})
                compiled(xc)
                got, events = _engine_events(compiled, (xc,))
            assert got.dtype == torch.bfloat16
            assert events["verifuse::conv@onednn"] == 2, events
            result["cnn_error"] = _check_bf16_accuracy(cnn, (xc,), {}, got)
            report = verifuse.explain(_conv_net(), xc, autotune=False).to_dict()
            assert not report["fallbacks"], report["fallbacks"]
            convs = [p for p in report["partitions"] if any("verifuse::conv" in op for op in p["ops"])]
            assert convs and all(p["engine"] == "onednn" and p["impl"].endswith("f32 on bf16io") for p in convs), convs
            result["cnn_impls"] = sorted({p["impl"] for p in convs})
        return result
    finally:
        del os.environ["VERIFUSE_ATTENTION"]


@bf16_kernels
def test_bf16_models_run_widened_without_native_bf16():
    """Run where this process has no bf16 instructions; from a native tier, in a child process
    capped to avx2 (the capability model is read once per process), eager capped alike."""
    if not NATIVE:
        result = _widened_run()
    else:
        env = dict(os.environ, VERIFUSE_MAX_ISA="avx2", ONEDNN_MAX_CPU_ISA="AVX2", ATEN_CPU_CAPABILITY="avx2")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.abspath(__file__)),
                                                        env.get("PYTHONPATH", "")) if p)
        code = "import json, test_bf16_models as t; print('RESULT ' + json.dumps(t._widened_run()))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-6000:]
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
        result = json.loads(line[len("RESULT "):])
        assert result["tier"] == "avx2", result
    assert result["block_impls"] in (["verifuse gemm:avx2_bf16io"], ["verifuse gemm:avx512_bf16io"]), result
