"""int8 runs (``--dtype int8``, issue 17): the PT2E-quantized model every backend gets.

The float32 model is built as for any run (random weights, seed), then quantized once per
configuration with torchao's PT2E flow, the same as tests/python/quant_models.py: export with
``torch.export``, ``prepare_pt2e`` with ``X86InductorQuantizer`` (its default config: static
per-tensor u8 activations, per-channel symmetric s8 weights), calibration on a few random inputs
from the model's own input generator (other seeds than the benchmark input), ``convert_pt2e``.
The result is a GraphModule of ``quantized_decomposed`` quantize/dequantize ops around float
conv/linear/add/relu; run by eager PyTorch it is the reference semantics, and every backend gets a
deep copy of that same GraphModule.

Image inputs (4-D float) are channels-last for every backend and for the float32 model (inductor's
and verifuse's int8 conv paths prefer it; the values are the same).
"""

from __future__ import annotations

import contextlib
import io
import time
import types
from typing import Any

import torch
import torch.nn as nn

from .suites import BenchModel, Inputs

CALIBRATION_INPUTS = 4  # random inputs the observers see (seeds seed+1 .. seed+4)
CALIBRATION_SEED_OFFSET = 1
TOP1_EXTRA_INPUTS = 3  # classifiers: extra random inputs (seeds seed+101..) for top-1 agreement
TOP1_SEED_OFFSET = 101
QUANT_NAMESPACE = "quantized_decomposed"


def import_torchao():
    # torchao prints "Failed to load ..." for its CUDA extensions on a CPU machine; harmless.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    return prepare_pt2e, convert_pt2e, xiq


def channels_last(inputs: Inputs) -> Inputs:
    """4-D floating-point tensors channels-last (same values); everything else as it is."""
    def cl(v):
        if isinstance(v, torch.Tensor) and v.dim() == 4 and v.is_floating_point():
            return v.contiguous(memory_format=torch.channels_last)
        return v

    return Inputs(tuple(cl(a) for a in inputs.args), {k: cl(v) for k, v in inputs.kwargs.items()})


def untie_resnet_relus(model: nn.Module) -> int:
    """ResNet blocks (torchvision layout: the own suite's and torchvision's) call one ReLU module
    two or three times; the X86 quantizer's conv-add-relu pattern then sees one partition with
    several outputs and raises ("Input partition has more than one output node"). Gives every
    call its own ReLU module. Returns the blocks changed."""
    def bottleneck_forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)

    def basic_forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)

    n = 0
    for block in model.modules():
        kind = type(block).__name__
        if kind not in ("Bottleneck", "BasicBlock") or not hasattr(block, "relu"):
            continue
        for k in (1, 2, 3):
            setattr(block, f"relu{k}", nn.ReLU())
        block.forward = types.MethodType(bottleneck_forward if kind == "Bottleneck" else basic_forward, block)
        n += 1
    return n


def quantized_ops(gm: torch.nn.Module) -> dict[str, int]:
    """``quantized_decomposed`` ops in the graph (evidence that a backend got the quantized model)."""
    ops: dict[str, int] = {}
    graph = getattr(gm, "graph", None)
    if graph is None:
        return ops
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target).startswith(QUANT_NAMESPACE + "."):
            name = str(node.target)
            ops[name] = ops.get(name, 0) + 1
    return ops


_WEIGHT_OPS = ("aten.linear.", "aten.conv1d.", "aten.conv2d.", "aten.conv3d.", "aten.convolution.", "aten.addmm.",
               "aten.mm.", "aten.matmul.", "aten.bmm.", "aten.conv_transpose")


def weight_layers(gm: torch.nn.Module) -> dict[str, int]:
    """Layers with a weight (conv / linear / addmm / mm with a constant operand) in the converted
    graph: how many read a dequantized int8 weight and how many stayed float (the quantizer did not
    annotate them: e.g. GPT-2's Conv1D is an addmm, not a linear)."""
    quantized = floating = 0
    float_ops: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not str(node.target).startswith(_WEIGHT_OPS):
            continue
        ins = [a for a in node.args if isinstance(a, torch.fx.Node)]
        if any(str(a.target).startswith(QUANT_NAMESPACE + ".dequantize_per_channel") for a in ins):
            quantized += 1
        elif any(a.op == "get_attr" for a in ins):
            floating += 1
            float_ops[str(node.target)] = float_ops.get(str(node.target), 0) + 1
    return {"int8_weights": quantized, "float_weights": floating, "float_weight_ops": float_ops}


def quantize_int8(bm: BenchModel, model: nn.Module, inputs: Inputs, batch: int, seed: int
                  ) -> tuple[torch.fx.GraphModule, Inputs, dict[str, Any]]:
    """(the quantized GraphModule, the benchmark inputs as every backend gets them, info).
    ``model`` (the float32 model) is changed only by :func:`untie_resnet_relus` (same function)."""
    prepare_pt2e, convert_pt2e, xiq = import_torchao()
    t0 = time.perf_counter()
    info: dict[str, Any] = {"flow": "torch.export -> prepare_pt2e(X86InductorQuantizer) -> calibrate -> convert_pt2e",
                            "quantizer": "X86InductorQuantizer, get_default_x86_inductor_quantization_config() "
                                         "(static per-tensor u8 activations, per-channel symmetric s8 weights)",
                            "calibration_seeds": [seed + CALIBRATION_SEED_OFFSET + i for i in range(CALIBRATION_INPUTS)]}
    untied = untie_resnet_relus(model)
    if untied:
        info["untied_resnet_relus"] = untied
    inputs = channels_last(inputs)
    info["channels_last_inputs"] = any(isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_floating_point()
                                       for t in inputs.tensors())
    model = model.eval()
    with torch.no_grad():
        exported = torch.export.export(model, inputs.args, inputs.kwargs).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for s in info["calibration_seeds"]:
            c = channels_last(bm.make_inputs(batch, s))
            prepared(*c.args, **c.kwargs)
    gm = convert_pt2e(prepared)
    info["quantized_ops"] = quantized_ops(gm)
    info["weight_layers"] = weight_layers(gm)
    info["quantize_s"] = time.perf_counter() - t0
    if not info["quantized_ops"]:
        raise RuntimeError("int8: the quantizer annotated nothing in this model (no quantized_decomposed ops)")
    wl = info["weight_layers"]
    if not wl["int8_weights"]:
        # e.g. GPT-2: its Conv1D layers are addmm, which X86InductorQuantizer does not annotate; an
        # "int8" result would be the float model with a few quantize/dequantize pairs
        raise RuntimeError(f"int8: no layer got an int8 weight ({wl['float_weights']} weight layers stay float: "
                           f"{wl['float_weight_ops']}); X86InductorQuantizer annotates conv and linear only")
    return gm, inputs, info


def is_classifier(bm: BenchModel, out: Any) -> bool:
    """Top-1 agreement is reported for image classifiers: a cnn whose compared output is one
    [batch, classes] tensor."""
    return bm.family == "cnn" and isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[-1] > 1


def top1(out: torch.Tensor) -> torch.Tensor:
    return out.detach().float().argmax(-1)
