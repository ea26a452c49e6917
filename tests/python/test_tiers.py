"""The capability model from Python: `python -m verifuse env`, the VERIFUSE_MAX_ISA cap (read once
per process, so capped runs are child processes), the report's cpu row, and an unknown cap named
in a warning. tests/run_tiers.py reruns this file capped, so it must hold on every tier."""
import json
import os
import subprocess
import sys
import warnings

import torch
import torch.nn as nn

import verifuse
from tiers import CAPS, TIER
from verifuse.env import TIERS, capabilities


def _env(cap=None, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("VERIFUSE_MAX_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    if cap:
        env["VERIFUSE_MAX_ISA"] = cap
    env.update(extra)
    return env


def _model_of_env(cap=None, **extra):
    out = subprocess.run([sys.executable, "-m", "verifuse", "env", "--json"], capture_output=True, text=True,
                         env=_env(cap, **extra), check=True)
    return json.loads(out.stdout)


def test_env_prints_the_model_and_the_tier_never_exceeds_the_cpus():
    model = _model_of_env()
    assert model["tier"] in TIERS and model["cpu_tier"] in TIERS
    assert TIERS.index(model["tier"]) <= TIERS.index(model["cpu_tier"])
    assert model["cap"] is None and model["cap_source"] == ""
    text = subprocess.run([sys.executable, "-m", "verifuse", "env"], capture_output=True, text=True, check=True,
                          env=_env()).stdout
    assert "tier " + model["tier"] in text and "VERIFUSE_MAX_ISA=" in text


def test_the_cap_lowers_the_tier_for_the_own_kernels_and_onednn_alike():
    host = _model_of_env()
    for cap in ("avx2", "avx512"):
        if TIERS.index(host["cpu_tier"]) < TIERS.index(cap):
            continue  # a cap above the CPU changes nothing
        capped = _model_of_env(cap)
        assert capped["tier"] == cap and capped["cap"] == cap, capped
        assert capped["cap_source"] == f"VERIFUSE_MAX_ISA={cap}"
        assert capped["onednn_tier"] == cap, capped  # the cap reached oneDNN
        assert not capped["usable"]["avx512_bf16"] and not capped["usable"]["amx_tile"]
        assert not capped["onednn_native_bf16"] and not capped["onednn_int8_without_saturation"]
        assert capped["own_avx512"] == (cap == "avx512")
        # usable features are the CPU's and the tier's both
        assert all(host["detected"][f] or not v for f, v in capped["usable"].items())


def test_onednns_own_variable_caps_the_same_way():
    host = _model_of_env()
    if TIERS.index(host["cpu_tier"]) <= TIERS.index("avx2"):
        return
    capped = _model_of_env(ONEDNN_MAX_CPU_ISA="AVX2")
    assert capped["tier"] == "avx2" and capped["cap_source"] == "ONEDNN_MAX_CPU_ISA=AVX2"
    assert not capped["own_avx512"]  # verifuse's own kernels follow oneDNN's cap too


def test_an_unknown_cap_is_ignored_and_said_once_at_compile():
    code = ("import warnings, torch, verifuse\n"
            "warnings.simplefilter('always')\n"
            "m = torch.nn.Linear(4, 4).eval()\n"
            "with warnings.catch_warnings(record=True) as w, torch.no_grad():\n"
            "    c = torch.compile(m, backend='verifuse')\n"
            "    c(torch.randn(2, 4)); c(torch.randn(3, 4))\n"
            "print(sum('VERIFUSE_MAX_ISA=avx3 is not a tier name' in str(x.message) for x in w))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env("avx3"), check=True)
    assert out.stdout.strip().splitlines()[-1] == "1", out.stdout + out.stderr


def test_the_report_names_the_tier_the_plan_was_made_for():
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval()
    report = verifuse.explain(m, torch.randn(4, 16))
    cpu = report.to_dict()["cpu"]
    assert cpu["tier"] == TIER and cpu["onednn_isa"] == CAPS["onednn_isa"]
    assert f"tier {TIER}" in str(report)
