"""Numeric tests of every fusion rule against eager, plus what explain() reports about them.

Tolerances: folding batch norm or a per-channel constant into float32 weights changes rounding
(the report's per-channel bound on the constants is ~2^-23 relative), and oneDNN accumulates in a
different order than ATen; outputs are compared with rtol=1e-4, atol=1e-4 * max(1, max|eager|).
"""
import os
import subprocess
import sys

import pytest
import torch
from torch.profiler import profile
import torch.nn as nn
import torch.nn.functional as F

import verifuse
from verifuse.models import SmallResNet, randomize_batchnorm


def check(model, *inputs, rules=(), no_ops=(), rtol=1e-4, atol=1e-4, **options):
    model = model.eval()
    randomize_batchnorm(model)
    with torch.no_grad():
        expected = model(*inputs)
    report = verifuse.explain(model, *inputs, strict=True, **options)
    compiled = torch.compile(model, backend="verifuse", options={"strict": True, **options})
    with torch.no_grad():
        got = compiled(*inputs)
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol * scale)
    applied = [f["rule"] for f in report.to_dict()["fusions"] if f.get("applied", True)]
    for rule in rules:
        assert rule in applied, f"{rule} not applied; fusions: {applied}\n{report}"
    ops = {op for g in report.graphs for op in g.ops}
    for op in no_ops:
        assert not any(o.startswith(op) for o in ops), f"{op} left in the graph: {sorted(ops)}"
    return report


BN_OPS = ("aten::_native_batch_norm_legit_no_training", "aten::native_batch_norm")


@pytest.mark.parametrize("dims,kw", [
    (1, dict(stride=2, padding=1)),
    (2, dict(stride=1, padding=1)),
    (2, dict(stride=2, padding=2, dilation=2, groups=2, bias=False)),
    (2, dict(padding=0, groups=8)),  # depthwise
    (3, dict(padding=1, bias=False)),
])
def test_conv_bn_fold(dims, kw):
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
    bn = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims]
    model = nn.Sequential(conv(8, 16, 3, **kw), bn(16))
    x = torch.randn(2, 8, *([9] * dims))
    check(model, x, rules=["conv-bn-fold"], no_ops=BN_OPS)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_bn_fold(bias):
    model = nn.Sequential(nn.Linear(32, 24, bias=bias), nn.BatchNorm1d(24), nn.ReLU())
    check(model, torch.randn(5, 32), rules=["linear-bn-fold", "conv-relu-postop"], no_ops=BN_OPS)


def test_linear_nd_input_with_activation():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 8))
    check(model, torch.randn(3, 7, 16), rules=["conv-gelu-tanh-postop"])


def test_standalone_batch_norm_becomes_scale_shift():
    model = nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 4, 3))
    check(model, torch.randn(2, 3, 8, 8), rules=["bn-to-scale-shift"], no_ops=BN_OPS)


ACTIVATIONS = [
    (nn.ReLU(), "conv-relu-postop"),
    (nn.LeakyReLU(0.2), "conv-leaky-relu-postop"),
    (nn.GELU(), "conv-gelu-erf-postop"),
    (nn.GELU(approximate="tanh"), "conv-gelu-tanh-postop"),
    (nn.SiLU(), "conv-silu-postop"),
    (nn.Sigmoid(), "conv-sigmoid-postop"),
    (nn.Tanh(), "conv-tanh-postop"),
    (nn.Hardswish(), "conv-hardswish-postop"),
    (nn.Hardsigmoid(), "conv-hardsigmoid-postop"),
    (nn.ReLU6(), "conv-relu6-postop"),
    (nn.Hardtanh(), "conv-hardtanh-postop"),
    (nn.Hardtanh(-0.5, 2.0), "conv-clamp-postop"),
    (nn.ELU(0.7), "conv-elu-postop"),
]


@pytest.mark.parametrize("act,rule", ACTIVATIONS, ids=[r for _, r in ACTIVATIONS])
def test_conv_activation_post_op(act, rule):
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), act)
    check(model, torch.randn(2, 4, 10, 10) * 3, rules=["conv-bn-fold", rule], no_ops=BN_OPS)


@pytest.mark.parametrize("act,rule", ACTIVATIONS[:6], ids=[r for _, r in ACTIVATIONS[:6]])
def test_linear_activation_post_op(act, rule):
    model = nn.Sequential(nn.Linear(12, 20), act, nn.Linear(20, 4))
    check(model, torch.randn(6, 12) * 3, rules=[rule])


class Residual(nn.Module):
    def __init__(self, scale=1.0, conv_second=False):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.scale = scale
        self.conv_second = conv_second

    def forward(self, x):
        y = self.bn(self.conv(x))
        out = (x + y) if self.conv_second else torch.add(y, x, alpha=self.scale)
        return F.relu(out)


@pytest.mark.parametrize("scale,conv_second", [(1.0, False), (0.5, False), (1.0, True)])
def test_residual_add_then_relu(scale, conv_second):
    check(Residual(scale, conv_second), torch.randn(2, 8, 6, 6),
          rules=["conv-bn-fold", "residual-add-sum-postop", "residual-add-relu"], no_ops=BN_OPS + ("aten::add",))


class ChannelAffine(nn.Module):
    def __init__(self, wrong_axis=False):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        shape = (1, 1, 6) if wrong_axis else (6, 1, 1)
        self.register_buffer("scale", torch.rand(*shape) + 0.5)
        self.register_buffer("shift", torch.randn(1, 6, 1, 1))

    def forward(self, x):
        return F.hardswish((self.conv(x) * self.scale + self.shift) / 3.0)


def test_per_channel_constants_fold_into_the_weights():
    check(ChannelAffine(), torch.randn(2, 3, 8, 8),
          rules=["per-channel-mul-fold", "per-channel-add-fold", "per-channel-div-fold", "conv-hardswish-postop"],
          no_ops=("aten::mul", "aten::add", "aten::div"))


def test_scale_on_the_wrong_axis_is_not_folded():
    report = check(ChannelAffine(wrong_axis=True), torch.randn(2, 3, 8, 8))
    applied = [f["rule"] for f in report.to_dict()["fusions"]]
    assert "per-channel-mul-fold" not in applied


def test_small_resnet_has_no_batch_norm_left_and_every_fusion_is_proved():
    model = SmallResNet()
    report = check(model, torch.randn(2, 3, 32, 32), rules=["conv-bn-fold", "conv-relu-postop",
                                                             "residual-add-sum-postop"], no_ops=BN_OPS)
    d = report.to_dict()
    assert all(f["proof"] == "Proved" for f in d["fusions"]), d["fusions"]
    folds = [f for f in d["fusions"] if f["fold"] != "none"]
    assert folds and all(f["instance"] == "Proved" and f["max_error_bound"] > 0 for f in folds)
    assert all(p["verdict"] == "Proved" for p in d["proofs"])
    assert "relu" not in {op.split("::")[-1] for g in report.graphs for op in g.ops}
    text = str(report)
    assert "conv-bn-fold" in text


def test_small_layers_get_the_end_to_end_z3_check_within_the_budget():
    # Three folds of different sizes against the 4,096-weight limit of the end-to-end check.
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8 * 36, 16),
                          nn.BatchNorm1d(16), nn.Linear(16, 512), nn.BatchNorm1d(512))
    x = torch.randn(2, 3, 8, 8)
    report = check(model, x, rules=["conv-bn-fold", "linear-bn-fold"])
    folds = [f for f in report.to_dict()["fusions"] if f["fold"] != "none"]
    verdicts = [(f["nodes"][0], f["layer_check"]) for f in folds]
    # conv (216 weights): Proved; linear 288->16 (4,608 weights): over the 4,096-weight limit;
    # linear 16->512 (8,192): over the limit.
    assert [v for _, v in verdicts] == ["Proved", "skipped", "skipped"], verdicts
    assert "4608 weights > 4096" in folds[1]["layer_check_detail"]
    assert all(f["instance"] == "Proved" and f["applied"] for f in folds)
    assert "layer-check=Proved" in str(report)
    # layer_check_weights=0 turns it off (the per-element instance check still runs).
    off = verifuse.explain(model, x, strict=True, layer_check_weights=0).to_dict()["fusions"]
    assert all(f["layer_check"] == "skipped" and f["instance"] == "Proved" for f in off if f["fold"] != "none")
    with pytest.raises(verifuse.OptionsError, match="layer_check_weights"):
        verifuse.explain(model, x, layer_check_weights="all")


def test_verify_off_still_fuses_but_says_not_verified():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    report = check(model, torch.randn(1, 3, 8, 8), verify="off", rules=["conv-bn-fold"])
    assert {f["proof"] for f in report.to_dict()["fusions"]} == {"not-verified"}


def test_bfloat16_option_runs_and_stays_close():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                          nn.Linear(16 * 8 * 8, 10))
    # bf16 has an 8-bit mantissa: results agree with float32 to ~1e-2 relative.
    check(model, torch.randn(2, 3, 8, 8), dtype="bfloat16", rtol=5e-2, atol=5e-2)


def test_weights_updated_after_compile_are_refolded():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    randomize_batchnorm(model)
    compiled = torch.compile(model, backend="verifuse", options={"strict": True})
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        compiled(x)
        model[1].running_var.mul_(4.0)  # the folded weights are now stale
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_planted_bug_is_refused_at_compile_time_and_the_model_still_matches_eager():
    code = r"""
import torch, torch.nn as nn, verifuse
from verifuse.models import randomize_batchnorm
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
randomize_batchnorm(model)
with torch.no_grad():
    model[1].running_var.fill_(1e-3)  # tiny variances: dropping eps would change the result
x = torch.randn(2, 3, 10, 10)
report = verifuse.explain(model, x, strict=True)
d = report.to_dict()
planted = [p for p in d["proofs"] if p["rule"].startswith("test-planted")]
assert planted and planted[0]["verdict"] == "Refuted" and not planted[0]["admitted"], d["proofs"]
assert "counterexample" in planted[0]["message"] and "eps" in planted[0]["message"], planted[0]["message"]
assert not any(f["rule"].startswith("test-planted") and f["applied"] for f in d["fusions"])
assert any(f["rule"] == "conv-bn-fold" for f in d["fusions"])
compiled = torch.compile(model, backend="verifuse", options={"strict": True})
with torch.no_grad():
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
print("OK")
"""
    env = dict(os.environ, VERIFUSE_TEST_PLANTED_BUG="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


class _AudioStem(nn.Module):
    """Whisper's encoder stem: two 1-D convs with GELU, then [N, C, L] -> [N, L, C]."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(16, 32, 3, padding=1)
        self.conv2 = nn.Conv1d(32, 32, 3, stride=2, padding=1)

    def forward(self, x):
        y = F.gelu(self.conv1(x))
        z = F.gelu(self.conv2(y))
        return z.permute(0, 2, 1), self.conv1(x) + y


def test_conv1d_runs_on_the_direct_channels_last_kernel():
    # oneDNN's plain (ncw) 1-D convolution is its im2col + GEMM fallback, 2-4x slower than the
    # direct nwc kernel; the result must still come back in eager's layout.
    model = _AudioStem().eval()
    x = torch.randn(1, 16, 300)
    with torch.no_grad():
        expected = model(x)
        # The heuristic engine (oneDNN for convolutions): with timing, ATen's kernel can win a
        # 0.02 ms tie on a loaded machine, and which one it is is not what this test is about.
        report = verifuse.explain(model, x, strict=True, autotune=False)
        got = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})(x)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
        assert g.stride() == e.stride()
    convs = [p for p in report.to_dict()["partitions"] if "verifuse::conv" in p["ops"]]
    assert convs and all(p["engine"] == "onednn" for p in convs), convs
    assert not any("gemm" in (p.get("impl") or "") for p in convs), convs


@pytest.mark.parametrize("k,engine", [(384, "onednn"), (1024, "gemm")])
def test_untimed_gelu_linear_engine_follows_k(k, engine):
    # Without timing, a linear + GELU with K <= 512 runs on oneDNN (its GELU is far cheaper than
    # the own GEMM's few-ulp one, which shows at short K) and longer ones on the own GEMM.
    model = nn.Sequential(nn.Linear(k, 256), nn.GELU()).eval()
    x = torch.randn(64, k)
    report = check(model, x, autotune=False)
    linears = [p for p in report.to_dict()["partitions"] if "verifuse::linear" in p["ops"]]
    assert linears and all(p["engine"] == engine for p in linears), linears


class _MaskEveryLayer(nn.Module):
    # As transformers writes it: each layer turns the boolean mask into an additive one.
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))

    def forward(self, x, keep):
        for layer in self.layers:
            additive = torch.where(keep, 0.0, torch.finfo(x.dtype).min)
            x = torch.tanh(layer(x) + additive)
        return x


def test_mask_built_in_every_layer_is_computed_once():
    model = _MaskEveryLayer().eval()
    x = torch.randn(2, 8, 16)
    keep = torch.rand(2, 8, 16) > 0.3
    report = check(model, x, keep)
    assert report.graphs[0].rewrites.get("common-subexpression", 0) >= 2, report.graphs[0].rewrites
    assert report.graphs[0].ops.get("aten::where", 0) + report.graphs[0].ops.get("aten::where.self", 0) == 1, \
        report.graphs[0].ops


class _GrowingCache(nn.Module):
    # transformers' DynamicCache: an empty start, the past concatenated onto it, then the new step.
    def forward(self, past, new):
        keys = torch.cat([torch.tensor([]), past], dim=-2)
        return torch.cat([keys, new], dim=-2) * 2


def test_empty_start_of_a_cache_is_not_copied():
    model = _GrowingCache().eval()
    past, new = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 1, 8)
    report = check(model, past, new)
    graph = report.graphs[0]
    assert graph.rewrites.get("cat-skip-empty") == 1, graph.rewrites
    assert graph.ops.get("aten::cat") == 1, graph.ops


class _ConvNextBlocks(nn.Module):
    # ConvNeXt's block: depthwise conv on the NCHW residual stream, permuted to NHWC for the norm
    # and the pointwise linears, permuted back for the residual add.
    def __init__(self, c=32, blocks=2):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.dw = nn.ModuleList(nn.Conv2d(c, c, 7, padding=3, groups=c) for _ in range(blocks))
        self.norm = nn.ModuleList(nn.LayerNorm(c) for _ in range(blocks))
        self.up = nn.ModuleList(nn.Linear(c, 4 * c) for _ in range(blocks))
        self.down = nn.ModuleList(nn.Linear(4 * c, c) for _ in range(blocks))
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        for dw, norm, up, down in zip(self.dw, self.norm, self.up, self.down):
            y = dw(x).permute(0, 2, 3, 1)
            y = down(F.gelu(up(norm(y))))
            x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean((-2, -1)))


def test_permuted_channels_last_stream_needs_no_conversions():
    # The convolutions write channels-last because every reader takes any layout (the permute to
    # NHWC makes it dense rows for the norm, the residual adds keep it, the pooled features go to
    # a linear): no layout conversion at any convolution but the stem's input image.
    torch.manual_seed(0)
    model = _ConvNextBlocks().eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        report = verifuse.explain(model, x, strict=True)
        got = torch.compile(model, backend="verifuse", options={"strict": True})(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert got.stride() == expected.stride()
    convs = [p for p in report.to_dict()["partitions"] if "verifuse::conv" in p["ops"]]
    assert convs, report.to_dict()["partitions"]
    assert sum(p["input_conversions"] for p in convs) == 1, convs  # the stem's input image
    assert all(p["output_conversions"] == 0 for p in convs), convs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_convnext_residual_adds_become_the_linears_residuals(dtype):
    # add(x, permute(linear)) -> permute(add(permute(x)^-1, linear)) (add-below-permute), then the
    # sum post-op: no residual add left as its own op, eager's values (bf16: within bf16 rounding).
    torch.manual_seed(0)
    model = _ConvNextBlocks(blocks=3).eval()
    x = torch.randn(2, 3, 32, 32)
    options = {"strict": True, "dtype": dtype}
    with torch.no_grad():
        expected = model(x)
        report = verifuse.explain(model, x, **options)
        got = torch.compile(model, backend="verifuse", options=options)(x)
    tolerance = 1e-4 if dtype == "float32" else 5e-2
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)
    (graph,) = report.graphs
    assert graph.rewrites.get("add-below-permute") == 3, graph.rewrites
    assert graph.rewrites.get("residual-add-sum-postop") == 3, graph.rewrites
    assert "aten::add.Tensor" not in graph.ops, graph.ops


class _DenseBlocks(nn.Module):
    # DenseNet's dense layers after a max-pooled stem: the features concatenated so far, batch norm
    # and ReLU, a 1x1 and a 3x3 convolution whose result joins the concatenation.
    def __init__(self, c=16, growth=8, layers=3):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.norms = nn.ModuleList(nn.BatchNorm2d(c + i * growth) for i in range(layers))
        self.narrow = nn.ModuleList(nn.Conv2d(c + i * growth, 2 * growth, 1) for i in range(layers))
        self.grow = nn.ModuleList(nn.Conv2d(2 * growth, growth, 3, padding=1) for _ in range(layers))
        self.transition = nn.Conv2d(c + layers * growth, c, 1)
        for bn in self.norms:
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        features = [self.pool(self.stem(x))]
        for bn, narrow, grow in zip(self.norms, self.narrow, self.grow):
            y = torch.cat(features, 1)
            features.append(grow(F.relu(narrow(F.relu(bn(y))))))
        return self.transition(torch.cat(features, 1)).mean((-2, -1))


def test_concatenated_features_stay_channels_last():
    # The max pool runs on a channels-last copy of its NCHW input and keeps that layout (its
    # readers, a cat and the element-wise ops after it, take any layout); the cats of
    # channels-last features are channels-last, so no convolution result goes back to NCHW for a
    # cat (before: one copy per dense layer, and the next convolution converted it forward again).
    # NOTE: the report's conversion counts still take a cat's result for NCHW (its layout tags are
    # decided before tuning, when a convolution's engine, and so its output layout, is not known).
    torch.manual_seed(0)
    model = _DenseBlocks().eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x)
        with profile(record_shapes=True) as prof:
            got = compiled(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert got.stride() == expected.stride()
    # Two layout copies per call: the input image to channels-last (the stem) and the transition's
    # result back to NCHW (its mean is the graph output). Before: one more per dense layer.
    copies = [e.input_shapes[0] for e in prof.events() if e.name == "aten::contiguous"]
    assert copies == [[1, 3, 32, 32], [1, 16, 8, 8]], copies
