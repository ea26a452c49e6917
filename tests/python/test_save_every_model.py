"""Saved functions round-trip every model (issue 40): each model is compiled and saved here with
``verifuse.save``, then one fresh process loads every file with ``verifuse.load``, calls it with
the model rebuilt from the same seed, and compares with eager. The plan must replay (no
``VerifusePlanWarning``: a refused plan would be compiled from scratch, hiding a broken save).

Models: the structural cases saved graphs meet (nearest and bilinear upsampling, a U-Net with
``cat`` skips, pooling with indices and unpooling, the ``split``/``chunk``/``unbind``/``stack``
family), the bench suites' small stand-ins (own, hf, torchvision, timm) and their int8 (PT2E) and
bf16 variants. ``VERIFUSE_SAVE_ALL_MODELS=1`` (``make test-saved-models``) takes every model of the
bench suites at full size instead, with the int8 and bf16 variants the bench runs.

Accuracy against eager: float32 the bench's relative tolerance (1e-3 of the output's largest
magnitude); bf16 and int8 the bench's own-error rule (at most 2x eager's own error against float32,
resp. the int8 factor), so a loaded function is held to what the compiled one is.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
if os.path.join(ROOT, "bench") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "bench"))

FULL = os.environ.get("VERIFUSE_SAVE_ALL_MODELS") == "1"


# ---- structural models (module level: the saved guards name their classes) ----------------------

def _block(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())


class UNet(nn.Module):
    """conv/BN/ReLU encoder, max-pool, 2x nearest upsample (F.interpolate), cat skips, conv decoder."""

    def __init__(self) -> None:
        super().__init__()
        self.e1, self.e2, self.mid = _block(3, 8), _block(8, 16), _block(16, 16)
        self.d2, self.d1, self.out = _block(32, 8), _block(16, 8), nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        d2 = self.d2(torch.cat([F.interpolate(m, scale_factor=2, mode="nearest"), b], 1))
        d1 = self.d1(torch.cat([F.interpolate(d2, scale_factor=2, mode="nearest"), a], 1))
        return self.out(d1)


class Upsampling(nn.Module):
    """Bilinear (both corner conventions), bicubic, nearest to a size, and nn.Upsample."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        a = self.up(y)
        b = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True)
        c = F.interpolate(y, size=a.shape[-2:], mode="nearest")
        d = F.interpolate(y, scale_factor=2, mode="bicubic", align_corners=False)
        return a + b + c + d


class PoolWithIndices(nn.Module):
    """max_pool2d with return_indices, max_unpool2d, adaptive pools."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.conv(x))
        p, idx = self.pool(y)
        u = self.unpool(p, idx)
        return u + F.adaptive_avg_pool2d(y, 4).repeat(1, 1, 4, 4)[..., : u.shape[-2], : u.shape[-1]], \
            F.adaptive_max_pool2d(y, 2)


class CatSplit(nn.Module):
    """split, chunk, unbind, stack, cat with uneven pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        a, b, c = torch.split(y, [3, 4, 5], dim=-1)
        p, q = torch.chunk(y, 2, dim=-1)
        rows = torch.unbind(y, dim=0)
        s = torch.stack([r * (i + 1) for i, r in enumerate(rows)], 0)
        return torch.cat([c, b.relu(), a * 2, p - q, s], dim=-1)


class ArgsAsCall(nn.Module):
    """Calls a model with keyword inputs positionally (``verifuse.save`` takes positional inputs)."""

    def __init__(self, model: nn.Module, names: list[str], n_args: int) -> None:
        super().__init__()
        self.model, self.names, self.n_args = model, names, n_args

    def forward(self, *inputs: Any) -> Any:
        return self.model(*inputs[: self.n_args], **dict(zip(self.names, inputs[self.n_args:])))


STRUCTURAL = {
    "unet_nearest": (UNet, (1, 3, 32, 32)),
    "upsampling": (Upsampling, (1, 3, 12, 12)),
    "pool_with_indices": (PoolWithIndices, (2, 3, 16, 16)),
    "cat_split": (CatSplit, (4, 12)),
}


def _cases() -> list[tuple[str, str, str]]:
    """(case id, model, dtype): structural models by name, bench models by registry name."""
    cases = [(name, name, "float32") for name in STRUCTURAL]
    from verifuse_bench import suites

    if FULL:
        for suite in ("own", "hf", "torchvision", "timm"):
            cases += [(m, m, "float32") for m in suites.suite_models(suite)]
        cases += [(f"{m}-int8", m, "int8") for m in ("resnet50", "mobilenet_v2", "bert_base")]
        cases += [(f"{m}-bf16", m, "bfloat16") for m in ("hf_bert_base", "resnet50")]
    else:
        for suite in ("own", "hf", "torchvision", "timm"):
            cases += [(m, m, "float32") for m in suites.suite_models(suite, tiny=True)]
        cases += [(f"{m}-int8", m, "int8") for m in ("resnet18_64", "encoder_2l")]
        cases += [(f"{m}-bf16", m, "bfloat16") for m in ("resnet18_64", "encoder_2l")]
    return cases


def build_case(model_name: str, dtype: str) -> tuple[nn.Module, tuple, Any, Any]:
    """(the module to save, its positional inputs, the output selector, the bench context or None),
    the same in every process (seed 0)."""
    if model_name in STRUCTURAL:
        cls, shape = STRUCTURAL[model_name]
        torch.manual_seed(0)
        model = cls().eval()
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        return model, (x,), (lambda out: out), None
    from verifuse_bench import harness, suites

    bm = suites.get_model(model_name)
    missing = bm.missing_requirements()
    if missing:
        pytest.skip(f"{model_name} needs {', '.join(missing)}")
    batch = bm.default_batches[0]
    run = harness.model_for_dtype(bm, bm.build(0), bm.make_inputs(batch, 0), dtype, batch, 0)
    model, inputs = run.model, run.inputs
    if inputs.kwargs:
        model = ArgsAsCall(model, list(inputs.kwargs), len(inputs.args)).eval()
    return model, tuple(inputs.args) + tuple(inputs.kwargs.values()), bm.select, (bm, run)


def _accuracy(dtype: str, model: nn.Module, inputs: tuple, select, ctx, out) -> dict:
    from verifuse_bench import harness

    with torch.no_grad():
        ref = select(model(*inputs))
    acc = harness.compare_outputs(ref, select(out))
    if dtype == "float32":
        rel = acc.get("max_rel_diff")
        acc["ok"] = rel is not None and rel <= harness.ACCURACY_REL_TOL
        return acc
    # Reduced precision: eager's own error against float32 is the unit (the bench's rule).
    bm, run = ctx
    if dtype == "int8":
        with torch.no_grad():
            ref32 = bm.select(run.float_model(*run.inputs.args, **run.inputs.kwargs))
        harness.int8_accuracy(acc, harness.compare_outputs(ref32, select(out)), harness.compare_outputs(ref32, ref))
    else:
        ref32, _ = harness.float32_reference(bm, run.model, run.inputs)
        harness.bf16_accuracy(acc, harness.compare_outputs(ref32, select(out)), harness.compare_outputs(ref32, ref))
    return acc


# ---- the loading process -------------------------------------------------------------------------

def _child(listing: str) -> None:
    import verifuse

    results = {}
    for case_id, model_name, dtype, path in json.loads(open(listing).read()):
        entry: dict[str, Any] = {}
        try:
            model, inputs, select, ctx = build_case(model_name, dtype)
            fn = verifuse.load(path)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = fn(model, *inputs)
                again = fn(model, *inputs)
            entry["plan_warnings"] = [str(w.message) for w in caught
                                      if issubclass(w.category, verifuse.VerifusePlanWarning)]
            entry["accuracy"] = _accuracy(dtype, model, inputs, select, ctx, out)
            entry["repeat_equal"] = all(torch.equal(a, b) for a, b in zip(_tensors(select(out)), _tensors(select(again))))
        except BaseException as exc:  # noqa: BLE001 - reported per case
            entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        results[case_id] = entry
    print("RESULT " + json.dumps(results, default=str), flush=True)


def _tensors(out: Any) -> list[torch.Tensor]:
    from verifuse_bench.harness import _flatten

    return _flatten(out)


# ---- the tests -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict:
    """Saves every case here, loads them all in one fresh process: {case id: its result}."""
    import verifuse

    d = tmp_path_factory.mktemp("saved_models")
    listing, saved = [], {}
    for case_id, model_name, dtype in _cases():
        try:
            model, inputs, _, _ = build_case(model_name, dtype)
        except pytest.skip.Exception as skip:
            saved[case_id] = {"skip": str(skip)}
            continue
        path = str(d / f"{case_id}.vfplan")
        try:
            verifuse.save(model, inputs, path, strict=True)
        except Exception as exc:  # noqa: BLE001 - reported per case
            saved[case_id] = {"error": f"save: {type(exc).__name__}: {exc}"[:2000]}
            continue
        listing.append((case_id, model_name, dtype, path))
    (d / "listing.json").write_text(json.dumps(listing))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "bench"), os.path.dirname(HERE),
                                                        os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", f"import test_save_every_model as T; T._child({str(d / 'listing.json')!r})"],
                          capture_output=True, text=True, env=env, timeout=3000, cwd=os.path.dirname(HERE))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    saved.update(json.loads(line[len("RESULT "):]))
    return saved


@pytest.mark.parametrize("case_id", [c[0] for c in _cases()])
def test_saved_function_round_trips_in_a_fresh_process(loaded, case_id):
    result = loaded[case_id]
    if "skip" in result:
        pytest.skip(result["skip"])
    assert "error" not in result, result["error"]
    assert result["plan_warnings"] == [], result["plan_warnings"]
    assert result["accuracy"]["ok"], result["accuracy"]
    assert result["repeat_equal"]


def test_a_model_class_defined_in_a_function_saves_with_the_default_guards(tmp_path):
    import verifuse

    def make() -> nn.Module:
        class Local(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                return self.fc(x).relu()

        return Local().eval()

    model, x = make(), torch.randn(2, 4)
    verifuse.save(model, (x,), str(tmp_path / "local.vfplan"))
    fn = verifuse.load(str(tmp_path / "local.vfplan"))
    torch.testing.assert_close(fn(model, x), model(x).detach())
    # A filter that keeps Dynamo's type guards cannot save it: said in one line, before any work.
    verifuse.reset_stats()
    with pytest.raises(ValueError, match="define the class at the top level"):
        verifuse.save(model, (x,), str(tmp_path / "kept.vfplan"), guard_filter_fn=None)
    assert verifuse.stats().get("plans_compiled", 0) == 0


def test_a_loaded_function_runs_whatever_the_callers_grad_mode(tmp_path):
    import verifuse

    model, x = UNet().eval(), torch.randn(1, 3, 16, 16)
    verifuse.save(model, (x,), str(tmp_path / "unet.vfplan"))
    fn = verifuse.load(str(tmp_path / "unet.vfplan"))
    assert torch.is_grad_enabled()
    out = fn(model, x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert not out.requires_grad
