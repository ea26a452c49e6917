"""Benchmark models, written from scratch (no torchvision, no hub, no pretrained weights).

Architectures and layer shapes follow the originals:

* ResNet-18 / ResNet-50: torchvision ``resnet18`` / ``resnet50`` (BasicBlock / Bottleneck v1.5,
  stride on the 3x3 conv), 11,689,512 / 25,557,032 parameters.
* MobileNetV2: torchvision ``mobilenet_v2`` (width 1.0, inverted residuals, ReLU6, depthwise
  convs, linear bottlenecks), 3,504,872 parameters.
* BERT-base encoder: HuggingFace ``BertEncoder`` layout (12 layers, hidden 768, 12 heads, FFN 3072,
  erf GELU, post-LayerNorm with eps 1e-12), built from plain nn.Linear / nn.LayerNorm / softmax
  attention. 7,087,872 parameters per layer, 85,054,464 for the 12 layers (no embeddings: the
  input is the hidden-state tensor ``[B, 128, 768]``). ``bert_base_te`` is the same shape built
  from ``nn.TransformerEncoderLayer`` (same parameter count).
* MLP with BatchNorm1d: Linear -> BatchNorm1d -> ReLU blocks.

Weights are random but deterministic (seeded). BatchNorm layers get random affine parameters and
running statistics calibrated on random data, so that (a) eval-mode BN is far from the identity
and conv/linear+BN folding is actually exercised, and (b) activations stay O(1) through deep
networks, which keeps the "max abs diff vs eager" numbers meaningful.

Every model is returned in ``.eval()`` mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "resnet18",
    "resnet50",
    "InvertedResidual",
    "MobileNetV2",
    "mobilenet_v2",
    "MLPBN",
    "BertSelfAttention",
    "BertLayer",
    "BertEncoder",
    "TorchTransformerEncoder",
    "ModelSpec",
    "MODELS",
    "get_spec",
    "list_models",
    "count_params",
]


# --------------------------------------------------------------------------------------------
# ResNet (torchvision-equivalent)
# --------------------------------------------------------------------------------------------


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class Bottleneck(nn.Module):
    # ResNet v1.5: the stride sits on the 3x3 conv (torchvision).
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block: type[nn.Module], layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


# --------------------------------------------------------------------------------------------
# MobileNetV2 (torchvision-equivalent)
# --------------------------------------------------------------------------------------------


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:  # do not round down by more than 10%
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        assert stride in (1, 2)
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden_dim, kernel_size=1))  # pointwise expand
        layers.extend([
            ConvBNReLU6(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),  # depthwise
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),  # pointwise-linear
            nn.BatchNorm2d(oup),
        ])
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, round_nearest: int = 8,
                 dropout: float = 0.2):
        super().__init__()
        input_channel = 32
        last_channel = 1280
        settings = [
            # t, c, n, s
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        input_channel = _make_divisible(input_channel * width_mult, round_nearest)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features: list[nn.Module] = [ConvBNReLU6(3, input_channel, stride=2)]
        for t, c, n, s in settings:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(InvertedResidual(input_channel, output_channel, stride, expand_ratio=t))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0) -> MobileNetV2:
    return MobileNetV2(num_classes=num_classes, width_mult=width_mult)


# --------------------------------------------------------------------------------------------
# MLP with BatchNorm1d
# --------------------------------------------------------------------------------------------


class MLPBN(nn.Module):
    """[Linear -> BatchNorm1d -> ReLU (-> Dropout)] * len(hidden) -> Linear."""

    def __init__(self, in_features: int, hidden: list[int], out_features: int, dropout: float = 0.1):
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_features
        for h in hidden:
            layers += [nn.Linear(prev, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            prev = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


# --------------------------------------------------------------------------------------------
# BERT-style encoder from plain modules (HuggingFace BertEncoder layout)
# --------------------------------------------------------------------------------------------


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float = 0.1):
        super().__init__()
        assert hidden % heads == 0
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, s, h = x.shape
        q = self._split(self.query(x))
        k = self._split(self.key(x))
        v = self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if attn_mask is not None:
            scores = scores + attn_mask
        probs = torch.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        ctx = torch.matmul(probs, v)
        return ctx.permute(0, 2, 1, 3).contiguous().view(b, s, h)


class BertLayer(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072, dropout: float = 0.1,
                 eps: float = 1e-12):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.act = nn.GELU()  # erf GELU, as in BERT
        self.output = nn.Linear(ffn, hidden)
        self.out_dropout = nn.Dropout(dropout)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        a = self.attn_dropout(self.attn_out(self.attention(x, attn_mask)))
        x = self.attn_norm(a + x)
        f = self.out_dropout(self.output(self.act(self.intermediate(x))))
        return self.out_norm(f + x)


class BertEncoder(nn.Module):
    """Stack of BertLayer. Input and output: hidden states ``[batch, seq, hidden]``."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 dropout: float = 0.1, eps: float = 1e-12):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(hidden, heads, ffn, dropout, eps) for _ in range(layers))
        for m in self.modules():  # BERT init: N(0, 0.02), zero bias, LN identity
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, attn_mask)
        return x


class TorchTransformerEncoder(nn.Module):
    """The same encoder shape built from nn.TransformerEncoderLayer (post-norm, GELU, batch_first)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 dropout: float = 0.1, eps: float = 1e-12):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model=hidden, nhead=heads, dim_feedforward=ffn, dropout=dropout, activation="gelu",
            layer_norm_eps=eps, batch_first=True, norm_first=False,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


# --------------------------------------------------------------------------------------------
# Deterministic initialisation helpers
# --------------------------------------------------------------------------------------------


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _randomize_norm_affine(model: nn.Module, gen: torch.Generator) -> None:
    """Random (deterministic) BN / LayerNorm affine parameters, so normalisation is not identity."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)) and m.weight is not None:
                m.weight.copy_(torch.empty_like(m.weight).uniform_(0.5, 1.5, generator=gen))
                m.bias.copy_(torch.empty_like(m.bias).normal_(0.0, 0.1, generator=gen))


@torch.no_grad()
def _calibrate_bn(model: nn.Module, inputs: list[torch.Tensor]) -> None:
    """Set BN running stats from forward passes on random data (cumulative average)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [(m, m.momentum) for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    model.train()
    for x in inputs:
        model(x)
    for m, mom in saved:
        m.momentum = mom
    model.eval()


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """How to build one benchmark model and its inputs.

    ``spec.build(seed)`` returns ``(model, example_input_fn)`` where ``example_input_fn(batch)``
    returns a deterministic input tensor (a function of ``seed`` and ``batch``).
    """

    name: str
    family: str  # "cnn" | "mlp" | "transformer"
    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...]  # per-sample shape (without the batch dim)
    output_shape: tuple[int, ...]  # per-sample output shape
    description: str
    default_batch: int = 1
    small: bool = False
    calibrate_bn: bool = True
    calib_batch: int = 8
    calib_steps: int = 2
    expected_params: int | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_cnn(self) -> bool:
        return self.family == "cnn"

    def make_input(self, batch: int | None = None, seed: int = 0) -> torch.Tensor:
        b = self.default_batch if batch is None else int(batch)
        gen = torch.Generator().manual_seed(1_000_003 * (seed + 1) + b)
        return torch.randn((b, *self.input_shape), generator=gen)

    def build_model(self, seed: int = 0) -> nn.Module:
        # fork_rng: deterministic (init and dropout during BN calibration) without touching the
        # caller's global RNG state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self.factory()
            gen = torch.Generator().manual_seed(seed + 12345)
            _randomize_norm_affine(model, gen)
            if self.calibrate_bn:
                calib = [self.make_input(self.calib_batch, seed=seed + 100 + i)
                         for i in range(self.calib_steps)]
                _calibrate_bn(model, calib)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(True)  # like a real checkpointed model: params require grad
        return model

    def build(self, seed: int = 0) -> tuple[nn.Module, Callable[[int], torch.Tensor]]:
        model = self.build_model(seed)

        def example_input_fn(batch: int | None = None) -> torch.Tensor:
            return self.make_input(batch, seed=seed)

        return model, example_input_fn

    def expected_output_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.output_shape)


def _spec(name: str, family: str, factory, input_shape, output_shape, description, **kw) -> ModelSpec:
    return ModelSpec(name=name, family=family, factory=factory, input_shape=tuple(input_shape),
                     output_shape=tuple(output_shape), description=description, **kw)


_SPECS: list[ModelSpec] = [
    # ---- full-size models -------------------------------------------------------------------
    _spec("resnet18", "cnn", resnet18, (3, 224, 224), (1000,),
          "ResNet-18 (torchvision layout), 224x224", expected_params=11_689_512, calib_batch=4),
    _spec("resnet50", "cnn", resnet50, (3, 224, 224), (1000,),
          "ResNet-50 v1.5 (torchvision layout), 224x224", expected_params=25_557_032, calib_batch=4),
    _spec("mobilenet_v2", "cnn", mobilenet_v2, (3, 224, 224), (1000,),
          "MobileNetV2 1.0 (torchvision layout), 224x224", expected_params=3_504_872, calib_batch=4),
    _spec("mlp_bn", "mlp", lambda: MLPBN(1024, [2048, 2048, 1024], 1000), (1024,), (1000,),
          "MLP 1024-2048-2048-1024-1000 with BatchNorm1d+ReLU", default_batch=32, calib_batch=64,
          expected_params=9_428_968),
    _spec("bert_base", "transformer", lambda: BertEncoder(12, 768, 12, 3072), (128, 768), (128, 768),
          "BERT-base encoder (12x768, 12 heads, FFN 3072, GELU), seq 128, plain modules",
          calibrate_bn=False, expected_params=85_054_464),
    _spec("bert_base_te", "transformer", lambda: TorchTransformerEncoder(12, 768, 12, 3072),
          (128, 768), (128, 768),
          "BERT-base-sized encoder via nn.TransformerEncoderLayer, seq 128",
          calibrate_bn=False, expected_params=85_054_464),
    # ---- small variants (quick runs, tests) ----------------------------------------------------
    _spec("resnet18_64", "cnn", resnet18, (3, 64, 64), (1000,),
          "ResNet-18 at 64x64", small=True, calib_batch=4, calib_steps=1, expected_params=11_689_512),
    _spec("resnet50_64", "cnn", resnet50, (3, 64, 64), (1000,),
          "ResNet-50 at 64x64", small=True, calib_batch=4, calib_steps=1, expected_params=25_557_032),
    _spec("mobilenet_v2_64", "cnn", mobilenet_v2, (3, 64, 64), (1000,),
          "MobileNetV2 1.0 at 64x64", small=True, calib_batch=4, calib_steps=1, expected_params=3_504_872),
    _spec("mlp_small", "mlp", lambda: MLPBN(64, [128, 128], 10), (64,), (10,),
          "MLP 64-128-128-10 with BatchNorm1d", small=True, default_batch=8, calib_batch=32),
    _spec("encoder_2l", "transformer", lambda: BertEncoder(2, 128, 4, 512), (32, 128), (32, 128),
          "2-layer BERT-style encoder, hidden 128, 4 heads, FFN 512, seq 32", small=True,
          calibrate_bn=False),
    _spec("encoder_te_2l", "transformer", lambda: TorchTransformerEncoder(2, 128, 4, 512),
          (32, 128), (32, 128),
          "2-layer nn.TransformerEncoderLayer encoder, hidden 128, seq 32", small=True,
          calibrate_bn=False),
]

MODELS: dict[str, ModelSpec] = {s.name: s for s in _SPECS}

#: the default suite of ``bench`` (full-size models) and of ``bench --quick`` (small variants)
DEFAULT_SUITE: tuple[str, ...] = ("resnet18", "resnet50", "mobilenet_v2", "mlp_bn", "bert_base")
QUICK_SUITE: tuple[str, ...] = ("resnet18_64", "mobilenet_v2_64", "mlp_small", "encoder_2l")


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def list_models(small: bool | None = None) -> list[str]:
    return [n for n, s in MODELS.items() if small is None or s.small == small]
