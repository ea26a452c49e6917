"""Reruns the ISA-sensitive tests with the capability model capped to the tiers below this machine's.

Users run every x86 tier (AVX2-only CPUs, AVX-512 without bf16 or VNNI, AVX-512 with bf16 and VNNI,
AMX); CI gets whatever machine it gets. So that no tier goes untested in any run, `make test` calls
this after the full suite: for each tier below the host's (by default avx2, and avx512 where the host
has more than plain AVX-512), the C++ suites labelled `isa` (ctest -L isa) and the Python files in
PYTHON_FILES run again with

    VERIFUSE_MAX_ISA=<tier>        verifuse's capability model (own kernels and oneDNN)
    ONEDNN_MAX_CPU_ISA=<isa>       the same cap for torch's bundled oneDNN (eager's reference)
    ATEN_CPU_CAPABILITY=<cap>      eager ATen's own vector kernels (and inductor's)
    MKL_ENABLE_INSTRUCTIONS=<isa>  MKL's GEMMs (eager's float32 linears)
(verifuse.env.cap_environment)
so eager, the reference every test compares with, behaves as it would on that CPU too. A tier whose
pass fails fails `make test`. Every skipped test is listed per tier with its reason (the capability
model's predicate it needed), which is the per-tier skip list closing notes quote.

    python tests/run_tiers.py [--tiers avx2,avx512] [--build-dir build/cmake] [--cpp-only|--python-only]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ("baseline", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx")
# The Python tests whose paths depend on the tier: int8 kernels (VNNI or not), bf16 (native or
# widened), attention and the row engine (AVX-512 tiles or AVX2 rows), the GEMM's variants, and a
# few whole models end to end.
PYTHON_FILES = [
    "tests/python/test_int8.py",
    "tests/python/test_bf16_models.py",
    "tests/python/test_attention_engine.py",
    "tests/python/test_row_fusion.py",
    "tests/python/test_tiers.py",
    "tests/python/test_gemm_kernel.py",
]
PYTHON_SELECT = {
    # whole models of the zoo (CNNs, depthwise, a transformer encoder, attention), float32
    "tests/python/test_end_to_end.py": "test_matches_eager_without_fallback",
}


def host_tier() -> str:
    out = subprocess.run([sys.executable, "-m", "verifuse", "env", "--json"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items()
                              if k not in ("VERIFUSE_MAX_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")})
    if out.returncode != 0:
        raise SystemExit(f"run_tiers: `python -m verifuse env` failed:\n{out.stderr}")
    return json.loads(out.stdout)["tier"]


def default_tiers(host: str) -> list[str]:
    """avx2 below any AVX2+ host; avx512 (no VNNI, no bf16) below hosts with VNNI or bf16 AVX-512."""
    rank = ORDER.index(host)
    tiers = []
    if rank > ORDER.index("avx2"):
        tiers.append("avx2")
    if rank > ORDER.index("avx512"):
        tiers.append("avx512")
    return tiers


def capped_env(tier: str) -> dict[str, str]:
    from verifuse.env import cap_environment

    env = dict(os.environ)
    env.update(cap_environment(tier))
    return env


def run_cpp(tier: str, build_dir: str, jobs: int, outdir: str) -> dict:
    junit = os.path.join(outdir, f"ctest-{tier}.xml")
    cmd = ["ctest", "--test-dir", build_dir, "-L", "isa", "-j", str(jobs), "--output-on-failure",
           "--output-junit", junit]
    proc = subprocess.run(cmd, env=capped_env(tier), capture_output=True, text=True)
    result = {"returncode": proc.returncode, "passed": 0, "failed": [], "skipped": []}
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        result["failed"].append(f"ctest wrote no junit file; its output:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
        return result
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        out = "".join(case.find("system-out").itertext()) if case.find("system-out") is not None else ""
        if case.find("skipped") is not None or case.get("status") == "notrun":
            m = re.search(r"Skipped\s*\n?(.*)", out)
            reason = m.group(1).strip() if m else ""
            reason = reason.splitlines()[0] if reason else "(no reason printed)"
            result["skipped"].append((name, reason))
        elif case.find("failure") is not None or case.get("status") == "fail":
            result["failed"].append(name)
        else:
            result["passed"] += 1
    if proc.returncode != 0 and not result["failed"]:
        result["failed"].append(f"ctest exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    if result["failed"]:
        result["output"] = proc.stdout[-20000:]
    return result


def run_python(tier: str, outdir: str) -> dict:
    junit = os.path.join(outdir, f"pytest-{tier}.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}"]
    files = [f for f in PYTHON_FILES if os.path.exists(os.path.join(ROOT, f))]
    selected = [f for f in PYTHON_SELECT if os.path.exists(os.path.join(ROOT, f))]
    result = {"returncode": 0, "passed": 0, "failed": [], "skipped": []}
    runs = [(files, None)] + [([f], PYTHON_SELECT[f]) for f in selected]
    for k, (paths, expr) in enumerate(runs):
        part = junit if k == 0 else junit.replace(".xml", f"-{k}.xml")
        args = cmd[:-1] + [f"--junitxml={part}"] + paths + (["-k", expr] if expr else [])
        proc = subprocess.run(args, env=capped_env(tier), capture_output=True, text=True, cwd=ROOT)
        result["returncode"] = result["returncode"] or proc.returncode
        try:
            root = ET.parse(part).getroot()
        except (OSError, ET.ParseError):
            result["failed"].append(f"pytest wrote no junit file; its output:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '?')}"
            skipped = case.find("skipped")
            if skipped is not None:
                result["skipped"].append((name, skipped.get("message", "")))
            elif case.find("failure") is not None or case.find("error") is not None:
                result["failed"].append(name)
            else:
                result["passed"] += 1
        if proc.returncode not in (0, 5):  # 5: nothing collected (-k matched nothing)
            result.setdefault("output", "")
            result["output"] += proc.stdout[-20000:]
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", default="auto", help="comma-separated tiers, or auto (below the host's)")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build", "cmake"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cpp-only", action="store_true")
    parser.add_argument("--python-only", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "tiers"), help="junit files and summary.json")
    args = parser.parse_args(argv)

    host = host_tier()
    tiers = default_tiers(host) if args.tiers == "auto" else [t for t in args.tiers.split(",") if t]
    from verifuse.env import CAPPABLE_TIERS

    for t in tiers:
        if t not in CAPPABLE_TIERS:
            raise SystemExit(f"run_tiers: {t!r} is not a tier to cap to (one of {', '.join(CAPPABLE_TIERS)})")
    os.makedirs(args.out, exist_ok=True)
    print(f"run_tiers: host tier {host}; rerunning the ISA-sensitive tests capped to: {', '.join(tiers) or 'none'}")
    summary, ok = {"host": host, "tiers": {}}, True
    for tier in tiers:
        entry = {}
        start = time.perf_counter()
        if not args.python_only:
            entry["cpp"] = run_cpp(tier, args.build_dir, args.jobs, args.out)
        if not args.cpp_only:
            entry["python"] = run_python(tier, args.out)
        entry["seconds"] = round(time.perf_counter() - start, 1)
        summary["tiers"][tier] = entry
        for kind in ("cpp", "python"):
            if kind not in entry:
                continue
            r = entry[kind]
            status = "FAILED" if r["failed"] else "ok"
            ok = ok and not r["failed"]
            print(f"\n== tier {tier}, {kind}: {status}: {r['passed']} passed, {len(r['failed'])} failed, "
                  f"{len(r['skipped'])} skipped")
            for name in r["failed"]:
                print(f"   FAILED {name}")
            for name, reason in r["skipped"]:
                print(f"   skipped {name}: {reason}")
            if r["failed"] and r.get("output"):
                print(r["output"])
        print(f"== tier {tier}: {entry['seconds']} s")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
