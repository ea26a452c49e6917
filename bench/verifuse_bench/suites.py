"""Model suites of the benchmark: ``own`` (bench/verifuse_bench/models.py), ``hf`` (transformers,
from configs), ``timm`` and ``torchvision`` (``pretrained=False``). Nothing is downloaded.

Every entry is a :class:`BenchModel`: how to build the model (eval mode, deterministic seed), the
input for a batch size (positional and keyword arguments, so ``input_ids`` + ``attention_mask`` or
a decode step with a KV cache are as easy as one tensor), which output is compared against eager,
the family and the default batch sizes. Libraries are imported only when a model is built, so
listing the suites needs none of them; a missing library makes the model *unavailable* (with the
reason), never a crash.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn

SUITES: tuple[str, ...] = ("own", "hf", "timm", "torchvision")
SUITE_PREFIX = {"own": "", "hf": "hf_", "timm": "timm_", "torchvision": "tv_"}
SUITE_REQUIRES = {"own": (), "hf": ("transformers",), "timm": ("torchvision", "timm"), "torchvision": ("torchvision",)}


@dataclass
class Inputs:
    """Arguments of one forward call: ``model(*args, **kwargs)``."""

    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def shapes(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, a in enumerate(self.args):
            if isinstance(a, torch.Tensor):
                out[f"arg{i}"] = list(a.shape)
        for k, v in self.kwargs.items():
            if isinstance(v, torch.Tensor):
                out[k] = list(v.shape)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
                out[k] = [len(v), *list(v[0].shape)]
        return out

    def tensors(self) -> list[torch.Tensor]:
        ts = [a for a in self.args if isinstance(a, torch.Tensor)]
        for v in self.kwargs.values():
            if isinstance(v, torch.Tensor):
                ts.append(v)
            elif isinstance(v, (list, tuple)):
                ts += [t for t in v if isinstance(t, torch.Tensor)]
        return ts


@dataclass(frozen=True)
class BenchModel:
    name: str
    suite: str  # own | hf | timm | torchvision
    family: str  # cnn | transformer | mlp
    description: str
    builder: Callable[[int], nn.Module]  # seed -> model (any mode; build() puts it in eval)
    inputs: Callable[[int, int], Inputs]  # (batch, seed) -> Inputs
    input_desc: str  # what the input is, per sample
    output: str  # what is compared against eager
    select: Callable[[Any], Any]  # model output -> the compared tensor(s)
    default_batches: tuple[int, ...] = (1,)
    requires: tuple[str, ...] = ()
    tiny: bool = False  # a small stand-in for tests and smoke runs, not part of the suite
    calibrate_bn: bool = True  # random BN affine + running stats from random data (see models.py)
    notes: str = ""

    def missing_requirements(self) -> list[str]:
        missing = []
        for mod in self.requires:
            if mod == "torchvision":
                from .vendor import ensure_torchvision

                ok, why = ensure_torchvision()
                if not ok:
                    missing.append(f"torchvision ({why})")
            elif importlib.util.find_spec(mod) is None:
                missing.append(mod)
        return missing

    def build(self, seed: int = 0) -> nn.Module:
        if "torchvision" in self.requires or "timm" in self.requires:
            from .vendor import ensure_torchvision

            ensure_torchvision()  # before timm / transformers import torchvision
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self.builder(seed)
            if self.calibrate_bn:
                init_norms(model, seed, lambda b, s: self.inputs(b, s))
        model.eval()
        return model

    def make_inputs(self, batch: int, seed: int = 0) -> Inputs:
        return self.inputs(batch, seed)


# --------------------------------------------------------------------------------------------
# Deterministic norm-layer initialisation (same idea as models.py, for any library's modules)
# --------------------------------------------------------------------------------------------


def init_norms(model: nn.Module, seed: int, inputs_fn: Callable[[int, int], Inputs],
               calib_batch: int = 4, calib_steps: int = 1) -> None:
    """Random affine for BatchNorm/LayerNorm/GroupNorm and BN running statistics from forward
    passes on random data: eval-mode BN is far from the identity (so conv+BN folding is really
    exercised) and activations stay O(1) through deep random networks (accuracy diffs stay
    meaningful). Models without BatchNorm only get the random affine."""
    gen = torch.Generator().manual_seed(seed + 12345)
    norm_types = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norm_types) and getattr(m, "weight", None) is not None \
                    and getattr(m, "bias", None) is not None:
                m.weight.copy_(torch.empty_like(m.weight).uniform_(0.5, 1.5, generator=gen))
                m.bias.copy_(torch.empty_like(m.bias).normal_(0.0, 0.1, generator=gen))
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [(m, m.momentum) for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for i in range(calib_steps):
            inp = inputs_fn(calib_batch, seed + 100 + i)
            model(*inp.args, **inp.kwargs)
    for m, mom in saved:
        m.momentum = mom
    model.eval()


def image_inputs(size: int | tuple[int, int], channels: int = 3) -> Callable[[int, int], Inputs]:
    h, w = (size, size) if isinstance(size, int) else size

    def make(batch: int, seed: int) -> Inputs:
        gen = torch.Generator().manual_seed(1_000_003 * (seed + 1) + batch)
        return Inputs((torch.randn(batch, channels, h, w, generator=gen),))

    return make


def select_key(key: str) -> Callable[[Any], Any]:
    def sel(out):
        if isinstance(out, torch.Tensor):
            return out
        return out[key]  # ModelOutput and dict both index by key

    sel.__name__ = f"select_{key}"
    return sel


def select_all(out):
    return out


# --------------------------------------------------------------------------------------------
# own suite: adapters over models.py
# --------------------------------------------------------------------------------------------


def _own_entries() -> list[BenchModel]:
    from .models import MODELS

    entries = []
    for name, spec in MODELS.items():
        def builder(seed, spec=spec):
            return spec.build_model(seed)

        def inputs(batch, seed, spec=spec):
            return Inputs((spec.make_input(batch, seed=seed),))

        entries.append(BenchModel(
            name=name, suite="own", family=spec.family, description=spec.description,
            builder=builder, inputs=inputs,
            input_desc="x " + "x".join(str(d) for d in spec.input_shape),
            output="output", select=select_all, default_batches=(spec.default_batch,),
            tiny=spec.small,
            calibrate_bn=False,  # ModelSpec.build_model does its own calibration
        ))
    return entries


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

_REGISTRY: dict[str, BenchModel] | None = None


def registry() -> dict[str, BenchModel]:
    global _REGISTRY
    if _REGISTRY is None:
        from .suite_hf import hf_entries
        from .suite_vision import timm_entries, torchvision_entries

        entries = _own_entries() + hf_entries() + timm_entries() + torchvision_entries()
        reg: dict[str, BenchModel] = {}
        for e in entries:
            assert e.name not in reg, e.name
            reg[e.name] = e
        _REGISTRY = reg
    return _REGISTRY


def get_model(name: str) -> BenchModel:
    reg = registry()
    if name in reg:
        return reg[name]
    raise KeyError(f"unknown model {name!r}; see `python -m verifuse bench --list`")


def suite_models(suite: str, tiny: bool = False) -> list[str]:
    if suite not in SUITES:
        raise KeyError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    if suite == "own" and not tiny:
        from .models import DEFAULT_SUITE

        return list(DEFAULT_SUITE)
    return [n for n, e in registry().items() if e.suite == suite and e.tiny == tiny]


def resolve(names: list[str], suite: str | None) -> list[str]:
    """Model names as given, or (with a suite) the suite's prefix added: ``--suite hf --models
    bert_base`` means ``hf_bert_base``."""
    reg = registry()
    out = []
    for n in names:
        if suite and SUITE_PREFIX[suite] + n in reg and (n not in reg or reg[n].suite != suite):
            n = SUITE_PREFIX[suite] + n
        if n not in reg:
            raise KeyError(n)
        out.append(n)
    return out
