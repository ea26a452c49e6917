"""PT2E int8 models for the quantized tests (issue 17): torchao's X86InductorQuantizer flow.

``quantize_pt2e(model, x)`` exports the model, inserts observers (static per-tensor u8
activations, per-channel symmetric s8 weights), calibrates on ``x`` and converts: the result is a
GraphModule of ``quantized_decomposed`` quantize/dequantize ops around float conv/linear/add/relu,
the graph eager PyTorch runs as the reference semantics.
"""
from __future__ import annotations

import contextlib
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def _import_torchao():
    # torchao prints "Failed to load ..." for its CUDA extensions on a CPU machine; harmless.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    return prepare_pt2e, convert_pt2e, xiq


def quantize_pt2e(model: nn.Module, *calibration: torch.Tensor, reduce_range: bool = False) -> torch.fx.GraphModule:
    prepare_pt2e, convert_pt2e, xiq = _import_torchao()
    model = model.eval()
    exported = torch.export.export(model, calibration).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(reduce_range=reduce_range))
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        prepared(*calibration)
    return convert_pt2e(prepared)


class ConvNet(nn.Module):
    """conv-relu, conv + residual add, relu, max pool, conv, adaptive avg pool, linear."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.c3 = nn.Conv2d(c, 2 * c, 1, stride=2)
        self.fc = nn.Linear(2 * c, 10)

    def forward(self, x):
        y = F.relu(self.c1(x))
        y = F.relu(self.c2(y) + y)
        y = F.max_pool2d(y, 2)
        y = F.relu(self.c3(y))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class LinearNet(nn.Module):
    """BERT-like block of linears: linear-relu, linear + residual, linear."""

    def __init__(self, d: int = 32, bias: bool = True):
        super().__init__()
        self.l1 = nn.Linear(d, 2 * d, bias=bias)  # bias=False: T5's and Llama's linears (aten::mm)
        self.l2 = nn.Linear(2 * d, d, bias=bias)
        self.l3 = nn.Linear(d, 8, bias=bias)

    def forward(self, x):
        y = F.relu(self.l1(x))
        y = self.l2(y) + x
        return self.l3(y)


class InvertedResidualNet(nn.Module):
    """MobileNetV2's pieces: conv-BN-ReLU6 stem, an inverted residual (1x1 expand-ReLU6, 3x3
    depthwise-ReLU6, 1x1 project) with its residual add, pooling and a classifier."""

    def __init__(self, c: int = 16, expand: int = 4):
        super().__init__()
        relu6 = lambda: nn.ReLU6()  # noqa: E731
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), relu6())
        e = c * expand
        self.block = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), relu6(),
                                   nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e), relu6(),
                                   nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.block(y)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class CatNet(nn.Module):
    """Inception-like: two conv-relu branches concatenated, a conv on the concatenation, max pool,
    a conv, flatten, classifier."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.a = nn.Conv2d(3, c, 1)
        self.b = nn.Conv2d(3, c, 3, padding=1)
        self.c = nn.Conv2d(2 * c, c, 3, padding=1)
        self.d = nn.Conv2d(c, c, 1)
        self.fc = nn.Linear(c * 16, 10)

    def forward(self, x):
        y = torch.cat([F.relu(self.a(x)), F.relu(self.b(x))], 1)
        y = F.relu(self.d(F.max_pool2d(F.relu(self.c(y)), 2)))
        return self.fc(torch.flatten(y, 1))

