"""Int8 models (issue 17): PT2E-quantized graphs on verifuse's int8 kernels.

The reference semantics is the quantized graph run by eager PyTorch. verifuse's int8 conv/linear
accumulate exactly in s32 and scale once (sx * sw[o] in float32), where eager convolves the
dequantized float32 values: the two real-valued results differ by float32 rounding only, so a
requantized code differs by at most one quantization step, and only where eager's value lies
within that rounding of a rounding boundary (x.5 steps). Tests check exactly that on the codes,
and against the float32 model (top-1 agreement, max error) for whole PT2E models.
"""
import math
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed ops

import verifuse
from verifuse import _C

from quant_models import CatNet, ConvNet, InvertedResidualNet, LinearNet, quantize_pt2e

qd = torch.ops.quantized_decomposed

# The capability model: oneDNN's int8 kernels sum u8 x s8 products exactly (VNNI, AMX) or in s16 pairs
# that saturate (AVX2, AVX-512 without VNNI). Every test here must hold on both; tests/run_tiers.py
# reruns this file capped to AVX2 and to AVX-512 without VNNI.
from tiers import CAPS, lacks  # noqa: E402

EXACT_ONEDNN = CAPS["onednn_int8_without_saturation"]
needs_saturating_onednn = lacks("onednn_int8_without_saturation",
                                "VNNI (oneDNN's int8 kernels saturate s16 pair sums only below it)")


def ops_of(report):
    return {op for g in report.graphs for op in g.ops}


class QConvCodes(nn.Module):
    """q -> dq -> conv -> relu (or ReLU6, hardtanh) -> q, returning the u8 codes (hand-made, like
    PT2E's pattern)."""

    def __init__(self, cin=8, cout=16, sx=0.03, zx=120, sy=0.02, zy=0, relu=True, stride=1, groups=1):
        super().__init__()
        w = torch.randn(cout, cin // groups, 3, 3)
        scales = w.abs().amax(dim=(1, 2, 3)) / 127
        self.register_buffer("wq", torch.clamp(torch.round(w / scales[:, None, None, None]), -128, 127).to(torch.int8))
        self.register_buffer("ws", scales.to(torch.float32))
        self.register_buffer("wz", torch.zeros(cout, dtype=torch.int64))
        self.register_buffer("b", torch.randn(cout) * 0.1)
        self.sx, self.zx, self.sy, self.zy, self.relu, self.stride, self.groups = sx, zx, sy, zy, relu, stride, groups

    def forward(self, x):
        xq = qd.quantize_per_tensor(x, self.sx, self.zx, 0, 255, torch.uint8)
        xd = qd.dequantize_per_tensor(xq, self.sx, self.zx, 0, 255, torch.uint8)
        wd = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -128, 127, torch.int8)
        y = F.conv2d(xd, wd, self.b, stride=self.stride, padding=1, groups=self.groups)
        if self.relu == "relu6":
            y = F.relu6(y)
        elif self.relu == "hardtanh":
            y = F.hardtanh(y, -0.5, 1.5)
        elif self.relu:
            y = F.relu(y)
        return qd.quantize_per_tensor(y, self.sy, self.zy, 0, 255, torch.uint8)


class QLinearCodes(nn.Module):
    """q -> dq -> linear -> q on s8 codes with a non-zero output zero point."""

    def __init__(self, k=64, n=32, sx=0.02, zx=3, sy=0.05, zy=-5):
        super().__init__()
        w = torch.randn(n, k)
        scales = w.abs().amax(dim=1) / 127
        self.register_buffer("wq", torch.clamp(torch.round(w / scales[:, None]), -128, 127).to(torch.int8))
        self.register_buffer("ws", scales)
        self.register_buffer("wz", torch.zeros(n, dtype=torch.int64))
        self.register_buffer("b", torch.randn(n) * 0.1)
        self.sx, self.zx, self.sy, self.zy = sx, zx, sy, zy

    def forward(self, x):
        xq = qd.quantize_per_tensor(x, self.sx, self.zx, -128, 127, torch.int8)
        xd = qd.dequantize_per_tensor(xq, self.sx, self.zx, -128, 127, torch.int8)
        wd = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -128, 127, torch.int8)
        y = F.linear(xd, wd, self.b)
        return qd.quantize_per_tensor(y, self.sy, self.zy, -128, 127, torch.int8)


class QLinearGeluCodes(QLinearCodes):
    """BERT's feed-forward input side: q -> dq -> linear (3-d input: view, addmm, view back) ->
    gelu -> q, on u8 codes."""

    def __init__(self, approximate="none", **kw):
        super().__init__(**kw)
        self.approximate = approximate

    def forward(self, x):
        xq = qd.quantize_per_tensor(x, self.sx, self.zx, 0, 255, torch.uint8)
        xd = qd.dequantize_per_tensor(xq, self.sx, self.zx, 0, 255, torch.uint8)
        wd = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -128, 127, torch.int8)
        y = F.gelu(F.linear(xd, wd, self.b), approximate=self.approximate)
        return qd.quantize_per_tensor(y, self.sy, self.zy, 0, 255, torch.uint8)


class QResidualCodes(QConvCodes):
    """The X86 quantizer's conv + add + relu pattern: q(relu(conv(dq(x)) + dq(r)))."""

    def __init__(self, relu=True, **kw):
        super().__init__(cin=8, cout=8, **kw)
        self.relu_after = relu

    def forward(self, x):
        xq = qd.quantize_per_tensor(x, self.sx, self.zx, 0, 255, torch.uint8)
        xd = qd.dequantize_per_tensor(xq, self.sx, self.zx, 0, 255, torch.uint8)
        wd = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -128, 127, torch.int8)
        y = F.conv2d(xd, wd, self.b, padding=1) + qd.dequantize_per_tensor(xq, self.sx, self.zx, 0, 255, torch.uint8)
        if self.relu_after:
            y = F.relu(y)
        return qd.quantize_per_tensor(y, self.sy, self.zy, 0, 255, torch.uint8)


def compile_and_compare_codes(model, x):
    model = model.eval()
    with torch.no_grad():
        ref = model(x)
        report = verifuse.explain(model, x, strict=True)
        got = torch.compile(model, backend="verifuse", options={"strict": True})(x)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert got.stride() == ref.stride(), (got.stride(), ref.stride())  # eager's layout (channels-last in, out)
    diff = (got.to(torch.int32) - ref.to(torch.int32)).abs()
    assert diff.max().item() <= 1, f"codes differ by {diff.max().item()} steps"
    exact = (diff == 0).float().mean().item()
    assert exact >= 0.99, f"only {exact:.4f} of the codes are bit-exact"
    return report, exact


@pytest.mark.parametrize("kw", [dict(), dict(relu=False, zy=100), dict(stride=2, groups=2), dict(zx=0, sx=0.01)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_int8_conv_codes_within_one_step_of_eager(kw, channels_last):
    x = torch.randn(2, 8, 12, 12)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    report, _ = compile_and_compare_codes(QConvCodes(**kw), x)
    ops = ops_of(report)
    assert "verifuse::qconv" in ops, sorted(ops)
    # The whole chain is one int8 op: no float convolution, no requantization left on ATen.
    assert not any(o.startswith("aten::convolution") for o in ops), sorted(ops)
    assert not any(op.startswith("quantized_decomposed::quantize") for op in ops), sorted(ops)
    assert "verifuse::quantize" in ops  # the input's quantize, on the one-pass kernel
    applied = {f["rule"] for f in report.to_dict()["fusions"]}
    assert {"int8-conv-dequant", "int8-requantize"} <= applied, applied


@pytest.mark.parametrize("act,zy", [("relu6", 0), ("hardtanh", 40)])
def test_int8_clamp_postop_codes_within_one_step_of_eager(act, zy):
    # ReLU6 (MobileNetV2) and a general hardtanh: the clamp is oneDNN's clip post-op and the
    # requantization follows it inside the same int8 conv, so no float32 tensor is left.
    report, _ = compile_and_compare_codes(QConvCodes(relu=act, zy=zy, sy=0.01), torch.randn(2, 8, 12, 12) * 3)
    ops = ops_of(report)
    assert not any(o in ops for o in ("aten::hardtanh", "aten::clamp")), sorted(ops)
    assert not any(op.startswith("quantized_decomposed::quantize") for op in ops), sorted(ops)
    applied = [f["rule"] for f in report.to_dict()["fusions"]]
    assert "int8-clamp-postop" in applied and "int8-requantize" in applied, applied


class QMaxPoolCodes(nn.Module):
    """q -> dq -> max_pool2d -> q with the input's parameters (the X86 quantizer's shared spec)."""

    def __init__(self, kernel=3, stride=2, padding=1, ceil_mode=False, dtype=torch.uint8, zp=7):
        super().__init__()
        self.pool = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode)
        lo, hi = (0, 255) if dtype == torch.uint8 else (-128, 127)
        self.q = (0.05, zp, lo, hi, dtype)

    def forward(self, x):
        xq = qd.quantize_per_tensor(x, *self.q)
        y = F.max_pool2d(qd.dequantize_per_tensor(xq, *self.q), **self.pool)
        return qd.quantize_per_tensor(y, *self.q)


@pytest.mark.parametrize("kw", [dict(), dict(ceil_mode=True, padding=0), dict(dtype=torch.int8, zp=-5),
                                dict(kernel=2, stride=2, padding=0)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_int8_maxpool_on_codes_is_bit_exact(kw, channels_last):
    # The max of codes is the code of the max: bit-exact, on oneDNN's u8/s8 pooling (ATen's own
    # channels-last u8 max pooling fails on a 64x112x112 map, so channels-last matters here).
    x = torch.randn(2, 64, 29, 29) * 3
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    model = QMaxPoolCodes(**kw).eval()
    with torch.no_grad():
        ref = model(x)
        report = verifuse.explain(model, x, strict=True)
        got = torch.compile(model, backend="verifuse", options={"strict": True})(x)
    assert torch.equal(got, ref) and got.stride() == ref.stride(), (got.stride(), ref.stride())
    ops = ops_of(report)
    assert "verifuse::qmax_pool" in ops and not any("max_pool2d" in op for op in ops), sorted(ops)
    assert "int8-maxpool-codes" in [f["rule"] for f in report.to_dict()["fusions"]]


@pytest.mark.parametrize("relu", [True, False])
def test_int8_residual_sum_codes_within_one_step_of_eager(relu):
    report, _ = compile_and_compare_codes(QResidualCodes(relu=relu, zy=7), torch.randn(2, 8, 10, 10))
    ops = ops_of(report)
    assert "verifuse::qconv" in ops and not any(o.startswith("aten::add") for o in ops), sorted(ops)
    assert "int8-residual-sum" in {f["rule"] for f in report.to_dict()["fusions"]}


def test_int8_linear_s8_codes_within_one_step_of_eager():
    report, _ = compile_and_compare_codes(QLinearCodes(), torch.randn(16, 64))
    assert "verifuse::qlinear" in ops_of(report)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_int8_gelu_postop_through_view_codes_within_one_step_of_eager(approximate):
    # The gelu is oneDNN's post-op (its erf/tanh approximations differ from ATen's by float32
    # rounding: a code may move one step at a rounding boundary) and the quantize the linear's
    # requantization, both through the view back to [batch, seq, features].
    model = QLinearGeluCodes(approximate=approximate, sx=0.03, zx=120, sy=0.01, zy=20)
    report, _ = compile_and_compare_codes(model, torch.randn(2, 24, 64))
    ops = ops_of(report)
    assert "aten::gelu" not in ops and "verifuse::qlinear" in ops, sorted(ops)
    assert not any("quantize_per_tensor" in op for op in ops), sorted(ops)
    assert [op for op in ops if "quantize" in op] == ["verifuse::quantize"], sorted(ops)  # the input's only
    applied = [f["rule"] for f in report.to_dict()["fusions"]]
    assert "int8-gelu-postop" in applied and "int8-requantize" in applied, applied


def BiasFreeLinearNet():
    return LinearNet(bias=False)


def _pt2e(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_pt2e(model, x)


@pytest.mark.parametrize("make,shape", [(ConvNet, (4, 3, 16, 16)), (LinearNet, (16, 32)), (LinearNet, (4, 6, 32)),
                                        (InvertedResidualNet, (2, 3, 16, 16)), (CatNet, (2, 3, 8, 8)),
                                        (BiasFreeLinearNet, (4, 6, 32))])
def test_pt2e_model_vs_eager_quantized_and_float(make, shape):
    torch.manual_seed(1)
    fmodel = make().eval()
    x = torch.randn(*shape)
    q = _pt2e(fmodel, x)
    with torch.no_grad():
        ref_q = q(x)
        ref_f = fmodel(x)
        report = verifuse.explain(q, x, strict=True)
        got = torch.compile(q, backend="verifuse", options={"strict": True})(x)
    ops = ops_of(report)
    assert any(o in ops for o in ("verifuse::qconv", "verifuse::qlinear")), sorted(ops)
    if make is BiasFreeLinearNet:
        # Bias-free linears lower to aten::mm (T5, Llama): int8 too, no float matmul left.
        ops_all = {op for g in report.graphs for op in g.ops}
        assert "verifuse::qlinear" in ops_all and not ops_all & {"aten::mm", "aten::addmm"}, sorted(ops_all)
    if make is CatNet:
        # The quantizer puts the quantize after the cat (conv -> relu -> cat -> q): each conv takes
        # the requantization and the cat, max pool and flatten read codes; the model input's
        # quantize is the only one left and no float32 conv or pool runs.
        applied = {f["rule"] for f in report.to_dict()["fusions"]}
        assert "int8-requantize-cat" in applied, applied
        assert applied & {"int8-maxpool-codes", "int8-requantize-maxpool"}, applied
        counts = {op: n for g in report.graphs for op, n in g.ops.items()}
        assert counts.get("verifuse::quantize") == 1 and "verifuse::qmax_pool" in counts, counts
        assert not any("convolution" in op or "max_pool2d" in op or "dequantize" in op for op in counts), counts
    if make is InvertedResidualNet:
        # MobileNetV2's pattern: every ReLU6 a clip post-op, every residual add a sum post-op: no
        # float32 conv, clamp or add, and the two quantizes left are the model input's and the
        # pooled value's ([2, 16, 1, 1]; its flatten then views the codes), none between the
        # convolutions.
        assert not ops & {"aten::hardtanh", "aten::clamp", "aten::add", "aten::convolution"}, sorted(ops)
        counts = {op: n for g in report.graphs for op, n in g.ops.items()}
        assert counts.get("verifuse::quantize") == 2 and "quantized_decomposed::quantize_per_tensor" not in counts, counts
    # Against eager's quantized graph: a few codes one step off propagate to the f32 output as a
    # few of the last layer's input steps.
    scale = ref_q.abs().max().item()
    assert (got - ref_q).abs().max().item() <= 0.05 * scale
    # Against the float32 model: top-1 agreement on random inputs.
    agree = (got.argmax(-1) == ref_f.argmax(-1)).float().mean().item()
    agree_eager = (ref_q.argmax(-1) == ref_f.argmax(-1)).float().mean().item()
    assert agree >= agree_eager - 0.25


def test_in_place_update_of_a_quantized_weight_is_seen():
    # The int8 kernels prepack the weight once: after an in-place update of the frozen s8 weight
    # (or its scales) the next call must use the new values, not the stale packed copy.
    model = QConvCodes(relu=False, zy=100).eval()
    x = torch.randn(2, 8, 12, 12)
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse")
        before = compiled(x)
        model.wq.copy_(torch.flip(model.wq, [0]))
        model.ws.mul_(0.5)
        after, ref = compiled(x), model(x)
    assert not torch.equal(before, ref)
    diff = (after.to(torch.int32) - ref.to(torch.int32)).abs()
    assert diff.max().item() <= 1 and (diff == 0).float().mean().item() >= 0.99


def test_int8_instances_are_validated_and_an_underflowing_scale_is_refused():
    # Every applied int8-conv-dequant carries its instance check (the kernel's folded output scales
    # sx*sw[o] and the weight zero points, rechecked on the real constants). A scale product that
    # underflows float32 breaks the proof's assumption sx*sw[o] > 0: that instance is Refuted, the
    # rule does not apply there, and the graph runs eager's composition (eager's result exactly).
    x = torch.randn(2, 8, 12, 12)
    with torch.no_grad():
        report = verifuse.explain(QConvCodes().eval(), x, strict=True)
    folds = [f for f in report.to_dict()["fusions"] if f["rule"] == "int8-conv-dequant"]
    assert folds and all(f["fold"] == "int8_scales" and f["instance"] == "Proved" and f["applied"] for f in folds)
    assert "16 channels" in folds[0]["detail"], folds[0]["detail"]
    tiny = QConvCodes(sx=1e-20).eval()
    tiny.ws.mul_(1e-20)  # sx * sw[o] ~ 1e-42: a float32 denormal
    with torch.no_grad():
        ref = tiny(x)
        report = verifuse.explain(tiny, x)
        got = torch.compile(tiny, backend="verifuse")(x)
    assert torch.equal(got, ref)
    refused = [f for f in report.to_dict()["fusions"] if f["rule"] == "int8-conv-dequant"]
    assert refused and not refused[0]["applied"] and refused[0]["instance"] == "Refuted", refused
    assert "not a positive normal float32" in refused[0]["detail"], refused[0]["detail"]
    assert "verifuse::qconv" not in ops_of(report)


@pytest.mark.parametrize("where", ["activation", "weight"])
@pytest.mark.parametrize("bad", [0.0, float("nan")])
def test_zero_and_nan_scales_fall_back_with_a_reason(bad, where):
    model = QConvCodes(sx=bad) if where == "activation" else QConvCodes()
    if where == "weight":
        model.ws[3] = bad
    model = model.eval()
    x = torch.randn(1, 8, 6, 6)
    compiled = torch.compile(model, backend="verifuse")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ref = model(x)
        except ZeroDivisionError:  # eager's own error (quantize computes 1.0 / scale)
            with pytest.raises(ZeroDivisionError):
                compiled(x)
        else:
            got = compiled(x)
            assert torch.equal(got, ref)
    messages = [str(w.message) for w in caught if "verifuse" in str(w.message)]
    assert any("no integer meaning" in m for m in messages), messages


def test_bad_input_gets_eagers_error():
    # Wrong dtype (quantize asserts float32) and wrong channel count (conv's check): the compiled
    # model raises eager's check. Dynamo re-traces on the new input and meets the check while
    # tracing, so the reference is torch.compile with the "eager" backend: verifuse must raise
    # the same error type with the same message (eager's text, sizes possibly symbolic).
    model = QConvCodes().eval()
    with torch.no_grad():
        for bad in (torch.randint(0, 5, (1, 8, 6, 6)), torch.randn(1, 5, 6, 6)):
            with pytest.raises(Exception):
                model(bad)
            errors = []
            for backend in ("eager", "verifuse"):
                torch._dynamo.reset()
                compiled = torch.compile(model, backend=backend)
                compiled(torch.randn(1, 8, 6, 6))
                with pytest.raises(Exception) as got:
                    compiled(bad)
                errors.append((type(got.value), str(got.value).splitlines()[:2]))
            assert errors[0] == errors[1], errors


@pytest.mark.parametrize("config", ["Int8WeightOnlyConfig", "Int8DynamicActivationInt8WeightConfig"])
def test_torchao_dynamic_configs_run_on_verifuse(config):
    # torchao's weight-only / dynamic-activation int8 configs make tensor subclasses, which
    # aot_autograd desugars into their inner tensors (int8 data, scales): verifuse freezes those
    # (flattened in __tensor_flatten__'s order, as AOT does) and runs the plain ATen graph, with
    # eager's result exactly (the s32 products are exact on both sides). An in-place change of a quantized weight's inner data is seen by the
    # weight guard on the next call.
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import torchao.quantization as tq
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    tq.quantize_(model, getattr(tq, config)())
    x = torch.randn(4, 64)
    with torch.no_grad():
        ref = _with_exact_int_mm(model, x)
        if EXACT_ONEDNN:
            # eager's own _int_mm is exact here; below VNNI torch's bundled oneDNN saturates its
            # s16 pair sums too (torch 2.13: errors of 10^5 in the s32 result), and verifuse keeps
            # _int_mm's exact meaning rather than that.
            assert torch.equal(model(x), ref)
        report = verifuse.explain(model, x, strict=True)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        # The dynamic config's products are integers (exact on both sides); the weight-only one's
        # are float32 sums, in the kernel's order instead of MKL's: a float32 GEMM's freedom.
        same = torch.equal if config == "Int8DynamicActivationInt8WeightConfig" else _float32_gemm_close
        assert same(compiled(x), ref)
        assert not report.to_dict()["fallbacks"] and report.graphs[0].engine == "verifuse"
        ops = ops_of(report)
        if config == "Int8DynamicActivationInt8WeightConfig":
            # Its aten::_int_mm (u8 codes x transposed s8 weight) runs on oneDNN's s32 matmul.
            assert "verifuse::int_mm" in ops and "aten::_int_mm" not in ops, sorted(ops)
        elif CAPS["own_avx2"]:
            # mm(x, permute(W).to(float32)) reads W as s8: no widened float32 copy is folded.
            assert "verifuse::int8_weight_mm" in ops and "aten::_to_copy" not in ops, sorted(ops)
        weight = model[0].weight
        attrs, _ = weight.__tensor_flatten__()
        data = next(getattr(weight, a) for a in attrs if getattr(weight, a).dtype == torch.int8)
        data.copy_(torch.flip(data, [0]))
        assert same(compiled(x), _with_exact_int_mm(model, x))


@pytest.mark.parametrize("mapping", ["SYMMETRIC", "ASYMMETRIC"])
def test_torchao_int4_weight_only_runs_on_verifuse(mapping):
    # torchao's IntxWeightOnlyConfig(int4, PerGroup(32)) (its int4 weight-only path on CPU) keeps
    # the codes in s8 with a scale and zero point per 32 columns of a row; aot_autograd desugars
    # the dequantization into the graph. verifuse reads the codes as packed nibbles
    # (verifuse::int4_weight_mm, rule int4-weight-only-mm): the dequantized weights are eager's
    # float32 numbers, summed in the kernel's order (a float32 GEMM's freedom). From 64 rows on by
    # panels (the kernel's dequantized weights into ATen's GEMM); codes the kernel cannot take run
    # the composition itself.
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from torchao.quantization import IntxWeightOnlyConfig, MappingType, quantize_
        from torchao.quantization.granularity import PerGroup
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 40, bias=False)).eval()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32),
                                          mapping_type=getattr(MappingType, mapping)))
    weight = model[0].weight
    assert weight.target_dtype == torch.int4 and tuple(weight.block_size) == (1, 32)
    if mapping == "ASYMMETRIC":
        assert (weight.zero_point != 0).any()
    report = verifuse.explain(model, torch.randn(3, 64), strict=True)
    assert not report.to_dict()["fallbacks"] and report.graphs[0].engine == "verifuse"
    ops = ops_of(report)
    if CAPS["own_avx2"]:
        assert "verifuse::int4_weight_mm" in ops and "aten::_to_copy" not in ops, sorted(ops)
    compiled = torch.compile(model, backend="verifuse", dynamic=True, options={"strict": True})
    with torch.no_grad():
        for rows in (1, 3, 63, 100, 600):
            x = torch.randn(rows, 64)
            _float32_gemm_close(compiled(x), model(x))
        # A code outside [-8, 7] written in place: the kernel refuses to pack it and the op runs
        # eager's composition (the dequantization of whatever the codes are).
        weight.qdata[5, 7] = 9
        x = torch.randn(2, 64)
        _float32_gemm_close(compiled(x), model(x))
        weight.qdata.copy_(torch.flip(weight.qdata, [0]).clamp(-8, 7))
        _float32_gemm_close(compiled(x), model(x))


def _float32_gemm_close(got, want):
    # Float32 sums of K products in another order: a few ulp of the sum of their magnitudes.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    return True


def _with_exact_int_mm(model, x):
    """model(x) with aten::_int_mm computed exactly (int64, then int32: its contract), whatever the
    CPU: eager's own CPU kernel is torch's oneDNN, which saturates below VNNI."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib.impl("_int_mm", lambda a, b: (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32), "CPU")
    try:
        return model(x)
    finally:
        lib._destroy()


class QuantizeOnly(nn.Module):
    def __init__(self, scale, zp, lo, hi, dtype):
        super().__init__()
        self.args = (scale, zp, lo, hi, dtype)

    def forward(self, x):
        return qd.quantize_per_tensor(x * 1.0, *self.args)


@pytest.mark.parametrize("args", [(0.05, 7, 0, 255, torch.uint8), (0.1, -3, -128, 127, torch.int8),
                                  (0.02, 0, 0, 127, torch.uint8)])
def test_quantize_kernel_is_bit_exact(args):
    # Ties (k + 1/2 steps, round half to even), values far outside the range, infinities.
    scale = args[0]
    steps = torch.arange(-300, 300, dtype=torch.float32)
    # NaN gives code 0 in torch's conversion; the kernel's vector body and masked tail both see
    # every kind of value (2205 elements: 137 full 16-lane steps and a 13-lane tail).
    special = torch.tensor([float("inf"), -float("inf"), 1e30, -1e30, float("nan")])
    x = torch.cat([steps * scale, (steps + 0.5) * scale, special, torch.randn(1000) * 10, special.flip(0)[:1]])
    model = QuantizeOnly(*args).eval()
    with torch.no_grad():
        ref = model(x)
        report = verifuse.explain(model, x, strict=True)
        got = torch.compile(model, backend="verifuse", options={"strict": True})(x)
    assert "verifuse::quantize" in ops_of(report), sorted(ops_of(report))
    assert torch.equal(got, ref)


# ---- saturation: the instances where oneDNN's kernels below VNNI are wrong (issue 39) -------------

def _saturating(kind):
    """A q -> dq -> conv/linear -> q model and an input whose codes hit the extremes where the weights
    are large and of one sign in adjacent pairs (+127, +127, -128, +3, ...): without VNNI, oneDNN's
    s16 pair sums clamp there (255 * 127 * 2 = 64770 > 32767), so its codes would be far off."""
    torch.manual_seed(1)
    if kind.startswith("conv"):
        zx = 128 if kind == "conv-u8-zp128" else 0
        model = QConvCodes(cin=16, cout=8, sx=0.02, zx=zx, sy=1.0, zy=0, relu=False)
        shape = model.wq.shape
        pattern = torch.tensor([127, 127, -128, 3], dtype=torch.int8).repeat(shape.numel() // 4 + 1)[:shape.numel()]
        model.wq.copy_(pattern.view(shape))
        # codes 255 everywhere but a few (zero point 128: x - zx = 127; zero point 0: 255)
        x = torch.full((1, 16, 8, 8), (255 - zx) * 0.02)
        x[:, :, ::3] = -zx * 0.02
    else:
        model = QLinearCodes(k=64, n=16, sx=0.02, zx=-128, sy=1.0, zy=0)
        pattern = torch.tensor([127, 127, -128, 3], dtype=torch.int8).repeat(16 * 64 // 4)
        model.wq.copy_(pattern.view(16, 64))
        x = torch.full((4, 64), 255 * 0.02)  # s8 codes 127 (255 steps above the zero point -128)
        x[:, ::5] = 0.0
    # the output scale spreads eager's exact results over the codes, so a wrong sum shows
    with torch.no_grad():
        xd = qd.dequantize_per_tensor(qd.quantize_per_tensor(x, model.sx, model.zx, *_range(model, kind)), model.sx,
                                      model.zx, *_range(model, kind))
        wd = qd.dequantize_per_channel(model.wq, model.ws, model.wz, 0, -128, 127, torch.int8)
        y = F.conv2d(xd, wd, model.b, padding=1) if kind.startswith("conv") else F.linear(xd, wd, model.b)
    lo, hi = y.min().item(), y.max().item()
    model.sy = (hi - lo) / 250
    model.zy = int(round(-lo / model.sy)) + 2 if kind.startswith("conv") else int(round(-lo / model.sy)) - 126
    return model.eval(), x


def _range(model, kind):
    return (0, 255, torch.uint8) if kind.startswith("conv") else (-128, 127, torch.int8)


def _int8_rows(model, x):
    report = verifuse.explain(model, x, strict=True)
    rows = report.to_dict()["int8_kernels"]
    assert rows, "the int8 op chose no kernel record"
    return report, rows


@pytest.mark.parametrize("kind", ["conv-u8-zp128", "conv-u8-zp0", "linear-s8"])
def test_saturating_instances_get_eagers_codes_and_the_report_says_which_proof_decided(kind):
    model, x = _saturating(kind)
    _, exact = compile_and_compare_codes(model, x)
    report, rows = _int8_rows(model, x)
    for row in rows:
        onednn = row["candidates"][0]
        if EXACT_ONEDNN:
            assert row["variant"] == "onednn:vpdpbusd" and onednn["proof"] == "Proved", row
        else:
            # refused by the proof (not by the probe), with codes and weights that saturate
            assert onednn["variant"] == "onednn:vpmaddubsw" and onednn["proof"] == "Refuted", row
            assert "group (s16, saturating)" in onednn["counterexample"] and "w[" in onednn["counterexample"], onednn
            assert "not tried" in onednn["made"], onednn
            assert row["variant"] == "own:vpmaddwd" and row["candidates"][1]["proof"] == "Proved", row
            assert "avx2_vpmaddwd" in row["impl"], row
    assert "int8 kernels:" in str(report)


@needs_saturating_onednn
@pytest.mark.parametrize("kind", ["conv-u8-zp128", "conv-u8-zp0"])
def test_without_the_checks_the_saturating_kernel_is_silently_wrong(kind):
    # The mutant of the whole mechanism: proof and probe off, oneDNN's vpmaddubsw kernel runs the
    # instance above and its codes are far from eager's. This is what the tests above guard.
    model, x = _saturating(kind)
    _C._set_int8_test_hook("no-checks")
    try:
        with torch.no_grad():
            ref = model(x)
            got = torch.compile(model, backend="verifuse", options={"strict": True})(x)
    finally:
        _C._set_int8_test_hook("")
    assert (got.to(torch.int32) - ref.to(torch.int32)).abs().max().item() > 10


@needs_saturating_onednn
def test_a_variant_declared_exact_that_saturates_is_refused_by_the_probe():
    # A lying declaration (oneDNN's kernels declared vpdpbusd below VNNI) passes the proof; the
    # probe's extreme codes catch the kernel, and the widening kernel runs instead.
    model, x = _saturating("conv-u8-zp128")
    _C._set_int8_test_hook("onednn-declared-exact")
    try:
        _, rows = _int8_rows(model, x)
        compile_and_compare_codes(model, x)
    finally:
        _C._set_int8_test_hook("")
    onednn = rows[0]["candidates"][0]
    assert onednn["variant"] == "onednn:vpdpbusd" and onednn["proof"] == "Proved", onednn
    assert "int8 probe" in onednn["made"], onednn
    assert rows[0]["variant"] == "own:vpmaddwd", rows[0]


def test_without_any_exact_kernel_the_references_are_exact_too():
    # A tier where no int8 kernel qualifies (no VNNI, no AVX2 for the widening kernel): the qconv's
    # reference is the quantized graph's own float ops (eager's values) and int_mm's is an int64
    # product (eager's _int_mm would saturate there). Capped in a child process: the capability
    # model is read once per process.
    import subprocess
    import sys

    code = r'''
import sys, warnings, torch, torch.nn as nn
sys.path.insert(0, "tests/python")
import verifuse
import test_int8 as T
from verifuse.env import capabilities
assert capabilities()["tier"] == "baseline", capabilities()["summary"]
model, x = T._saturating("conv-u8-zp128")
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    T.compile_and_compare_codes(model, x)
    rows = verifuse.explain(model, x, strict=True).to_dict()["int8_kernels"]
assert rows and all(r["variant"] == "" for r in rows), rows
assert any("int8 kernel not used" in str(w.message) for w in caught)
import torchao.quantization as tq
m = nn.Sequential(nn.Linear(64, 32)).eval()
tq.quantize_(m, tq.Int8DynamicActivationInt8WeightConfig())
xl = torch.randn(4, 64) * 10
with torch.no_grad():
    ref = T._with_exact_int_mm(m, xl)
    assert torch.equal(torch.compile(m, backend="verifuse", options={"strict": True})(xl), ref)
    # The op itself on extreme codes of both activation types torchao uses (its dynamic activations
    # are u8): whether eager's _int_mm saturates at this cap differs between CPUs, this does not.
    w = torch.full((8, 64), 127, dtype=torch.int8)
    for a in (torch.full((2, 64), 255, dtype=torch.uint8), torch.full((2, 64), -128, dtype=torch.int8)):
        exact = (a.to(torch.int64) @ w.to(torch.int64).t()).to(torch.int32)
        assert torch.equal(torch.ops.verifuse.int_mm(a, w), exact), a.dtype
print("ok")
'''
    env = dict(os.environ, VERIFUSE_MAX_ISA="baseline", ONEDNN_MAX_CPU_ISA="SSE41", ATEN_CPU_CAPABILITY="default")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:] + out.stderr[-3000:]
