"""Differential fuzzer: random inference models from verifuse's operator set, compiled with
verifuse in strict mode and compared against eager.

    python -m verifuse fuzz --seconds 60 [--seed 0] [--max-layers 8] [--json F]

Each case is a list of layer specs (plain dicts, so a failing case prints as a self-contained
reproducer). Layers work on one running tensor of shape ``[N, C, *spatial]`` (rank 3/4/5 for
conv1d/2d/3d) or ``[N, F]`` after a flatten; a few layers branch (residual add, concat) and join
again. Everything is deterministic per seed: case ``i`` of seed ``s`` uses ``Random(s * 1_000_003 +
i)`` for its structure and ``torch.manual_seed`` of the same number for weights and inputs.

Comparison (``compare``): outputs must have eager's shape and dtype, NaN where eager has NaN, and
``|got - want| <= atol + rtol * |want|`` elementwise with ``rtol = 1e-4`` and ``atol = 1e-4 * max(1,
max|want|)`` (the absolute part scales with the output's magnitude, since folded/fused float32
arithmetic is reassociated). A case fails if compiling or running raises (strict mode turns every
fallback into an error), or if the outputs differ beyond that.

On failure the case is minimized: layers are dropped one at a time (and then layer attributes
simplified) while the failure keeps the same kind, and the minimal case is printed as a Python
snippet that rebuilds the model and compares.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["RTOL", "ATOL", "Case", "Outcome", "generate", "build", "make_input", "compare", "run_case", "minimize",
           "reproducer", "case_seed", "fuzz", "main"]

RTOL = 1e-4
ATOL = 1e-4  # times max(1, max |eager output|)

ACTIVATIONS = ["relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish",
               "hardsigmoid", "hardtanh", "clamp", "relu6", "elu", "none"]


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    seed: int
    input_shape: list[int]
    layers: list[dict[str, Any]]
    dynamic: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Case":
        return Case(int(d["seed"]), list(d["input_shape"]), [dict(l) for l in d["layers"]], bool(d.get("dynamic", False)))


def _act_spec(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(ACTIVATIONS)
    spec: dict[str, Any] = {"name": name}
    if name == "leaky_relu":
        spec["slope"] = rng.choice([0.01, 0.1, 0.2])
    elif name == "elu":
        spec["alpha"] = rng.choice([1.0, 0.5])
    elif name in ("hardtanh", "clamp"):
        lo = rng.choice([-1.0, -0.5, 0.0])
        spec["min"], spec["max"] = lo, rng.choice([0.5, 1.0, 2.0])
    return spec


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def generate(seed: int, max_layers: int = 8) -> Case:
    """A random valid case. Shapes are tracked so every layer is valid for its input."""
    rng = random.Random(seed)
    kind = rng.choice(["conv1d", "conv2d", "conv2d", "conv3d", "mlp"])
    batch = rng.choice([1, 2, 3, 4])
    if kind == "mlp":
        shape = [batch, rng.choice([3, 8, 16, 33])]
    else:
        nd = {"conv1d": 1, "conv2d": 2, "conv3d": 3}[kind]
        side = {1: [5, 8, 16, 23], 2: [5, 8, 12, 17], 3: [4, 6, 7]}[nd]
        shape = [batch, rng.choice([1, 3, 4, 8])] + [rng.choice(side) for _ in range(nd)]
    case = Case(seed=seed, input_shape=list(shape), layers=[])
    cur = list(shape)
    n_layers = rng.randint(1, max_layers)
    for _ in range(n_layers * 3):  # some draws are rejected
        if len(case.layers) >= n_layers:
            break
        layer = _random_layer(rng, cur)
        if layer is None:
            continue
        out = _out_shape(layer, cur)
        if out is None or any(d <= 0 for d in out) or math.prod(out) > 200_000:
            continue
        case.layers.append(layer)
        cur = out
    if not case.layers:
        case.layers.append({"op": "act", "act": {"name": "relu"}})
    return case


def _random_layer(rng: random.Random, cur: list[int]) -> Optional[dict[str, Any]]:
    rank = len(cur)
    if rank == 2:  # [N, F]
        choice = rng.choices(["linear", "bn", "act", "residual", "affine", "concat", "dropout", "reshape"],
                             [6, 2, 3, 2, 1, 1, 1, 1])[0]
        feats = cur[1]
        if choice == "linear":
            return {"op": "linear", "out": rng.choice([1, 4, 8, 16, 31, 64]), "bias": rng.random() < 0.7,
                    "act": _act_spec(rng)}
        if choice == "bn":
            return {"op": "bn", "act": _act_spec(rng)}
        if choice == "act":
            return {"op": "act", "act": _act_spec(rng)}
        if choice == "residual":
            return {"op": "residual", "inner": "linear", "act": _act_spec(rng), "bias": rng.random() < 0.5}
        if choice == "affine":
            return {"op": "affine", "mul": rng.random() < 0.7, "add": rng.random() < 0.7}
        if choice == "concat":
            return {"op": "concat", "out": rng.choice([2, 5, 8]), "act": _act_spec(rng)}
        if choice == "dropout":
            return {"op": rng.choice(["dropout", "identity"])}
        if choice == "reshape" and feats % 2 == 0:
            return {"op": "view_roundtrip", "split": 2}
        return None
    nd = rank - 2
    choice = rng.choices(["conv", "bn", "act", "residual", "affine", "pool", "concat", "dropout", "flatten"],
                         [7, 3, 2, 2, 1, 2, 1, 1, 1])[0]
    cin = cur[1]
    if choice == "conv":
        groups = 1
        if rng.random() < 0.3:
            divs = [g for g in (2, 3, 4, 8) if cin % g == 0]
            if divs:
                groups = rng.choice(divs + ([cin] if cin > 1 else []))
        cout = rng.choice([1, 4, 8, 16]) if groups == 1 else groups * rng.choice([1, 2])
        return {"op": "conv", "nd": nd, "out": cout, "k": rng.choice([1, 1, 3, 3, 5]) if nd < 3 else rng.choice([1, 3]),
                "stride": rng.choice([1, 1, 1, 2]), "padding": rng.choice([0, 0, 1, 2]),
                "dilation": rng.choice([1, 1, 1, 2]), "groups": groups, "bias": rng.random() < 0.5,
                "bn": rng.random() < 0.5, "act": _act_spec(rng)}
    if choice == "bn":
        return {"op": "bn", "act": _act_spec(rng)}
    if choice == "act":
        return {"op": "act", "act": _act_spec(rng)}
    if choice == "residual":
        return {"op": "residual", "inner": "conv", "nd": nd, "bn": rng.random() < 0.6, "act": _act_spec(rng),
                "bias": rng.random() < 0.3}
    if choice == "affine":
        return {"op": "affine", "mul": rng.random() < 0.7, "add": rng.random() < 0.7}
    if choice == "pool":
        kind = rng.choice(["max", "avg", "adaptive_avg", "adaptive_max"])
        if kind.startswith("adaptive"):
            return {"op": "pool", "kind": kind, "nd": nd, "out": rng.choice([1, 1, 2, 3])}
        k = rng.choice([2, 3])
        return {"op": "pool", "kind": kind, "nd": nd, "k": k, "stride": rng.choice([1, 2, k]),
                "padding": rng.choice([0, 1]) if k == 3 else 0, "ceil": rng.random() < 0.2}
    if choice == "concat":
        return {"op": "concat", "nd": nd, "out": rng.choice([2, 4]), "act": _act_spec(rng)}
    if choice == "dropout":
        return {"op": rng.choice(["dropout", "identity"])}
    if choice == "flatten":
        return {"op": rng.choice(["flatten", "view_flatten", "reshape_flatten"])}
    return None


def _out_shape(layer: dict[str, Any], cur: list[int]) -> Optional[list[int]]:
    op = layer["op"]
    if op == "linear":
        return [cur[0], layer["out"]]
    if op == "conv":
        spatial = [_conv_out(s, layer["k"], layer["stride"], layer["padding"], layer["dilation"]) for s in cur[2:]]
        return [cur[0], layer["out"]] + spatial
    if op == "pool":
        if layer["kind"].startswith("adaptive"):
            return cur[:2] + [layer["out"]] * (len(cur) - 2)
        k, s, p = layer["k"], layer["stride"], layer["padding"]
        out = []
        for size in cur[2:]:
            if layer["ceil"]:
                o = -(-(size + 2 * p - k) // s) + 1
                if (o - 1) * s >= size + p:
                    o -= 1
            else:
                o = (size + 2 * p - k) // s + 1
            out.append(o)
        return cur[:2] + out
    if op == "concat":
        return [cur[0], cur[1] + layer["out"]] + cur[2:]
    if op in ("flatten", "view_flatten", "reshape_flatten"):
        return [cur[0], math.prod(cur[1:])]
    return list(cur)  # bn, act, residual, affine, dropout, identity, view_roundtrip


def _valid(case: Case) -> bool:
    cur = list(case.input_shape)
    for layer in case.layers:
        if len(cur) == 2 and layer["op"] in ("conv", "pool", "flatten", "view_flatten", "reshape_flatten"):
            return False
        if len(cur) > 2 and layer["op"] in ("linear", "view_roundtrip"):
            return False
        if layer["op"] == "conv" and cur[1] % layer["groups"] != 0:
            return False
        if layer["op"] == "residual" and layer["inner"] == ("linear" if len(cur) > 2 else "conv"):
            return False
        if layer["op"] == "pool" and not layer["kind"].startswith("adaptive"):
            if 2 * layer["padding"] > layer["k"]:
                return False
        out = _out_shape(layer, cur)
        if out is None or any(d <= 0 for d in out):
            return False
        cur = out
    return True


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def _activation(spec: dict[str, Any]) -> nn.Module:
    name = spec["name"]
    if name == "relu":
        return nn.ReLU()
    if name == "leaky_relu":
        return nn.LeakyReLU(spec["slope"])
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "silu":
        return nn.SiLU()
    if name == "sigmoid":
        return nn.Sigmoid()
    if name == "tanh":
        return nn.Tanh()
    if name == "hardswish":
        return nn.Hardswish()
    if name == "hardsigmoid":
        return nn.Hardsigmoid()
    if name == "hardtanh":
        return nn.Hardtanh(spec["min"], spec["max"])
    if name == "clamp":
        return _Clamp(spec["min"], spec["max"])
    if name == "relu6":
        return nn.ReLU6()
    if name == "elu":
        return nn.ELU(spec["alpha"])
    return nn.Identity()


class _Clamp(nn.Module):
    def __init__(self, lo: float, hi: float):
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, self.lo, self.hi)


def _bn(nd: int, c: int) -> nn.Module:
    bn = {0: nn.BatchNorm1d, 1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[nd](c)
    with torch.no_grad():  # eval-mode BN far from the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


def _conv(nd: int, cin: int, layer: dict[str, Any], **override: Any) -> nn.Module:
    cls = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd]
    kw = dict(kernel_size=layer["k"], stride=layer["stride"], padding=layer["padding"], dilation=layer["dilation"],
              groups=layer["groups"], bias=layer["bias"])
    kw.update(override)
    return cls(cin, layer["out"] if "out" not in override else override.pop("out"), **kw)


class _Residual(nn.Module):
    def __init__(self, body: nn.Module, act: nn.Module):
        super().__init__()
        self.body, self.act = body, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + x)


class _Affine(nn.Module):
    """Per-channel multiply/add by constants (buffers), as a model's normalization step would."""

    def __init__(self, shape: list[int], mul: bool, add: bool):
        super().__init__()
        bshape = [1, shape[1]] + [1] * (len(shape) - 2)
        self.register_buffer("scale", torch.empty(bshape).uniform_(0.5, 1.5) if mul else None)
        self.register_buffer("shift", torch.empty(bshape).uniform_(-0.5, 0.5) if add else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is not None:
            x = x * self.scale
        if self.shift is not None:
            x = x + self.shift
        return x


class _Concat(nn.Module):
    def __init__(self, branch: nn.Module, act: nn.Module):
        super().__init__()
        self.branch, self.act = branch, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.act(self.branch(x))], dim=1)


class _Flatten(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "view_flatten":
            return x.view(x.shape[0], -1)
        if self.how == "reshape_flatten":
            return x.reshape(x.size(0), -1)
        return torch.flatten(x, 1)


class _ViewRoundtrip(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, f = x.shape
        return (x.view(n, 2, f // 2).transpose(1, 2).contiguous() * 1.0).reshape(n, f)


def build(case: Case) -> nn.Module:
    """The eval-mode model of ``case`` with weights drawn from ``torch.manual_seed(case.seed)``."""
    torch.manual_seed(case.seed)
    mods: list[nn.Module] = []
    cur = list(case.input_shape)
    for layer in case.layers:
        op, nd = layer["op"], len(cur) - 2
        act = _activation(layer["act"]) if "act" in layer else nn.Identity()
        if op == "linear":
            mods += [nn.Linear(cur[1], layer["out"], bias=layer["bias"]), act]
        elif op == "conv":
            seq = [_conv(nd, cur[1], layer)]
            if layer["bn"]:
                seq.append(_bn(nd, layer["out"]))
            mods += seq + [act]
        elif op == "bn":
            mods += [_bn(max(nd, 0), cur[1]), act]
        elif op == "act":
            mods.append(act)
        elif op == "residual":
            if layer["inner"] == "linear":
                body: nn.Module = nn.Linear(cur[1], cur[1], bias=layer["bias"])
            else:
                conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd](cur[1], cur[1], 3, padding=1, bias=layer["bias"])
                body = nn.Sequential(conv, _bn(nd, cur[1])) if layer["bn"] else conv
            mods.append(_Residual(body, act))
        elif op == "affine":
            mods.append(_Affine(cur, layer["mul"], layer["add"]))
        elif op == "pool":
            kind = layer["kind"]
            if kind == "adaptive_avg":
                mods.append({1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[nd](layer["out"]))
            elif kind == "adaptive_max":
                mods.append({1: nn.AdaptiveMaxPool1d, 2: nn.AdaptiveMaxPool2d, 3: nn.AdaptiveMaxPool3d}[nd](layer["out"]))
            elif kind == "max":
                mods.append({1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}[nd](
                    layer["k"], layer["stride"], layer["padding"], ceil_mode=layer["ceil"]))
            else:
                mods.append({1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}[nd](
                    layer["k"], layer["stride"], layer["padding"], ceil_mode=layer["ceil"]))
        elif op == "concat":
            if nd <= 0:
                branch: nn.Module = nn.Linear(cur[1], layer["out"])
            else:
                branch = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd](cur[1], layer["out"], 1)
            mods.append(_Concat(branch, act))
        elif op == "dropout":
            mods.append(nn.Dropout(0.5))
        elif op == "identity":
            mods.append(nn.Identity())
        elif op in ("flatten", "view_flatten", "reshape_flatten"):
            mods.append(_Flatten(op))
        elif op == "view_roundtrip":
            mods.append(_ViewRoundtrip())
        else:
            raise ValueError(f"unknown layer op {op!r}")
        cur = _out_shape(layer, cur)
    return nn.Sequential(*mods).eval()


def make_input(case: Case, batch: Optional[int] = None) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.seed + 17)
    shape = list(case.input_shape)
    if batch is not None:
        shape[0] = batch
    return torch.randn(shape, generator=gen) * 2.0


# ---------------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    ok: bool
    kind: str = "ok"  # ok | compile-error | eager-error | mismatch | shape | nan
    detail: str = ""
    max_abs_err: float = 0.0


def compare(got: Any, want: torch.Tensor) -> Outcome:
    if not isinstance(got, torch.Tensor):
        return Outcome(False, "shape", f"got {type(got).__name__}, want a tensor")
    if got.shape != want.shape or got.dtype != want.dtype:
        return Outcome(False, "shape", f"got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}")
    if want.numel() == 0:
        return Outcome(True)
    nan_w, nan_g = torch.isnan(want), torch.isnan(got)
    if not torch.equal(nan_w, nan_g):
        return Outcome(False, "nan", f"NaN pattern differs ({int(nan_g.sum())} NaN in verifuse, {int(nan_w.sum())} in eager)")
    fin = ~nan_w
    w, g = want[fin].double(), got[fin].double()
    scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
    err = (g - w).abs()
    bound = ATOL * scale + RTOL * w.abs()
    max_err = float(err.max()) if err.numel() else 0.0
    if bool((err > bound).any()) or bool(torch.isinf(g).ne(torch.isinf(w)).any()):
        i = int((err - bound).argmax())
        return Outcome(False, "mismatch", f"max |err| {max_err:.3g} (scale {scale:.3g}); worst element got "
                       f"{float(g[i]):.6g}, want {float(w[i]):.6g}", max_err)
    return Outcome(True, max_abs_err=max_err)


def run_case(case: Case, batches: Optional[list[int]] = None) -> Outcome:
    """Compiles ``case`` with verifuse (strict) and compares with eager on its input (and, if
    given, other batch sizes through the same compiled callable)."""
    import torch._dynamo

    torch._dynamo.reset()
    model = build(case)
    xs = [make_input(case)] + [make_input(case, b) for b in (batches or [])]
    try:
        with torch.no_grad():
            wants = [model(x) for x in xs]
    except Exception as exc:  # the generator produced an invalid model: not verifuse's fault
        return Outcome(False, "eager-error", f"{type(exc).__name__}: {exc}")
    compiled = torch.compile(model, backend="verifuse", options={"strict": True}, dynamic=case.dynamic or None)
    for x, want in zip(xs, wants):
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = compiled(x)
        except Exception as exc:
            msg = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
            return Outcome(False, "compile-error", " | ".join(msg[:3])[:600])
        out = compare(got, want)
        if not out.ok:
            out.detail = f"input {tuple(x.shape)}: {out.detail}"
            return out
    return Outcome(True)


def minimize(case: Case, kind: str, check: Optional[Callable[[Case], Outcome]] = None, budget_s: float = 120.0) -> Case:
    """Drops layers (then simplifies attributes) while ``check`` still fails with the same kind."""
    check = check or run_case
    deadline = time.monotonic() + budget_s

    def still_fails(c: Case) -> bool:
        if not _valid(c) or time.monotonic() > deadline:
            return False
        return check(c).kind == kind

    cur = case
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in range(len(cur.layers)):
            if len(cur.layers) <= 1:
                break
            cand = dataclasses.replace(cur, layers=cur.layers[:i] + cur.layers[i + 1:])
            if still_fails(cand):
                cur, changed = cand, True
                break
    # Attribute simplification: activations to none, bn/bias off, batch smaller.
    simplifications: list[Callable[[dict[str, Any]], Optional[dict[str, Any]]]] = [
        lambda l: dict(l, act={"name": "none"}) if l.get("act", {}).get("name", "none") != "none" else None,
        lambda l: dict(l, bn=False) if l.get("bn") else None,
        lambda l: dict(l, bias=False) if l.get("bias") else None,
        lambda l: dict(l, dilation=1) if l.get("dilation", 1) != 1 else None,
        lambda l: dict(l, stride=1) if l.get("stride", 1) != 1 else None,
    ]
    for i in range(len(cur.layers)):
        for simp in simplifications:
            new = simp(cur.layers[i])
            if new is None:
                continue
            cand = dataclasses.replace(cur, layers=cur.layers[:i] + [new] + cur.layers[i + 1:])
            if still_fails(cand):
                cur = cand
    for b in (1, 2):
        if cur.input_shape[0] > b:
            cand = dataclasses.replace(cur, input_shape=[b] + cur.input_shape[1:])
            if still_fails(cand):
                cur = cand
                break
    return cur


def reproducer(case: Case, outcome: Outcome) -> str:
    return (
        f"# verifuse fuzz failure ({outcome.kind}): {outcome.detail}\n"
        "import torch, verifuse\n"
        "from verifuse.fuzz import Case, build, make_input, run_case\n"
        f"case = Case.from_dict({json.dumps(case.to_dict())})\n"
        "model, x = build(case), make_input(case)\n"
        "print(model)\n"
        "with torch.no_grad():\n"
        "    want = model(x)\n"
        "    got = torch.compile(model, backend='verifuse', options={'strict': True})(x)\n"
        "print((got - want).abs().max())\n"
        "print(run_case(case))\n"
    )


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def case_seed(seed: int, i: int) -> int:
    return seed * 1_000_003 + i


def fuzz(seconds: float = 60.0, seed: int = 0, max_layers: int = 8, max_graphs: Optional[int] = None,
         minimize_failures: bool = True, out: Any = None, dynamic_every: int = 5) -> dict[str, Any]:
    """Runs cases until ``seconds`` elapse (or ``max_graphs``). Every ``dynamic_every``-th case is
    compiled with dynamic=True and also run at two other batch sizes."""
    import torch._dynamo

    out = out if out is not None else sys.stdout
    prev_limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(prev_limit, 64)
    start = time.monotonic()
    graphs, failures, invalid = 0, [], 0
    i = 0
    try:
        while time.monotonic() - start < seconds and (max_graphs is None or graphs < max_graphs):
            s = case_seed(seed, i)
            i += 1
            case = generate(s, max_layers)
            batches = None
            if dynamic_every and i % dynamic_every == 0:
                case.dynamic = True
                batches = [case.input_shape[0] + 2, case.input_shape[0] + 5]
            outcome = run_case(case, batches)
            if outcome.kind == "eager-error":
                invalid += 1
                continue
            graphs += 1
            if outcome.ok:
                continue
            print(f"FAIL case seed={s} ({outcome.kind}): {outcome.detail}", file=out, flush=True)
            small = case
            if minimize_failures:
                small = minimize(case, outcome.kind, lambda c: run_case(c, batches if c.dynamic else None))
            small_outcome = run_case(small, batches if small.dynamic else None)
            print(reproducer(small, small_outcome), file=out, flush=True)
            failures.append({"seed": s, "kind": outcome.kind, "detail": outcome.detail,
                             "minimized": small.to_dict(), "minimized_detail": small_outcome.detail})
    finally:
        torch._dynamo.config.recompile_limit = prev_limit
        torch._dynamo.reset()
    elapsed = time.monotonic() - start
    summary = {"graphs": graphs, "failures": len(failures), "invalid_generated": invalid, "seconds": round(elapsed, 1),
               "seed": seed, "rtol": RTOL, "atol": f"{ATOL} * max(1, max|eager|)", "failed": failures}
    print(f"verifuse fuzz: {graphs} graphs run, {len(failures)} failures, {elapsed:.1f} s (seed {seed}; "
          f"rtol {RTOL}, atol {ATOL} x max(1, max|eager|))", file=out, flush=True)
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifuse fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-layers", type=int, default=8)
    parser.add_argument("--max-graphs", type=int, default=None)
    parser.add_argument("--no-minimize", action="store_true")
    parser.add_argument("--json", help="write the summary (with minimized failures) to this file")
    args = parser.parse_args(argv)
    import verifuse  # noqa: F401  (registers the backend when run from a source tree)

    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    summary = fuzz(args.seconds, args.seed, args.max_layers, args.max_graphs, not args.no_minimize)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
