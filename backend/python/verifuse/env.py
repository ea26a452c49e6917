"""``python -m verifuse env``: the capability model verifuse runs with on this machine.

The tier (what verifuse's kernels and oneDNN may use), the cap (``VERIFUSE_MAX_ISA=avx2`` runs an
AVX-512 machine as an AVX2 one; ``ONEDNN_MAX_CPU_ISA`` caps the same way), the CPU's features and
oneDNN's effective ISA, all from one C++ source (kernels/include/verifuse/kernels/capabilities.h).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any

TIERS = ("baseline", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx")

# What makes a process behave as a CPU of a lower tier: verifuse's cap, and the same cap for the
# libraries eager PyTorch (every test's reference) and the peers use: oneDNN (torch's bundled copy,
# OpenVINO's), ATen's vector kernels and inductor's generated code, MKL's GEMMs. Read at process
# start by each of them, so set them before Python starts (tests/run_tiers.py, bench --tier).
_ONEDNN = {"avx2": "AVX2", "avx2_vnni": "AVX2_VNNI", "avx512": "AVX512_CORE", "avx512_vnni": "AVX512_CORE_VNNI",
           "avx512_bf16": "AVX512_CORE_BF16"}
_ATEN = {"avx2": "avx2", "avx2_vnni": "avx2", "avx512": "avx512", "avx512_vnni": "avx512", "avx512_bf16": "avx512"}
_MKL = {"avx2": "AVX2", "avx2_vnni": "AVX2", "avx512": "AVX512", "avx512_vnni": "AVX512", "avx512_bf16": "AVX512"}
CAPPABLE_TIERS = tuple(_ONEDNN)


def cap_environment(tier: str) -> dict[str, str]:
    """The environment variables that cap verifuse, eager, inductor, MKL and oneDNN to ``tier``."""
    if tier not in _ONEDNN:
        raise ValueError(f"cannot cap to {tier!r}: one of {', '.join(CAPPABLE_TIERS)}")
    return {"VERIFUSE_MAX_ISA": tier, "ONEDNN_MAX_CPU_ISA": _ONEDNN[tier], "ATEN_CPU_CAPABILITY": _ATEN[tier],
            "MKL_ENABLE_INSTRUCTIONS": _MKL[tier]}


def capabilities() -> dict[str, Any]:
    """The capability model as a dict (a fresh copy: callers may change it)."""
    from . import _C

    return dict(_C.capabilities())


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe() -> dict[str, Any]:
    caps = capabilities()
    caps["cpu_model"] = _cpu_model()
    return caps


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifuse env", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the whole model as JSON")
    args = parser.parse_args(argv)
    caps = describe()
    if args.json:
        print(json.dumps(caps, indent=2, sort_keys=True))
        return 0
    print(f"CPU:      {caps['cpu_model']}")
    print(f"verifuse: {caps['summary']}")
    have = [k for k, v in caps["detected"].items() if v]
    usable = [k for k, v in caps["usable"].items() if v]
    print(f"features: {' '.join(have) or 'none of AVX2/AVX-512/AMX'}")
    if usable != have:
        print(f"usable:   {' '.join(usable) or 'none (scalar kernels)'}")
    print("kernels:  own AVX2 " + ("yes" if caps["own_avx2"] else "no") +
          ", own AVX-512 " + ("yes" if caps["own_avx512"] else "no") +
          ", own bf16 (AVX512-BF16) " + ("yes" if caps["own_avx512_bf16"] else "no") +
          ", oneDNN bf16 native " + ("yes" if caps["onednn_native_bf16"] else "no") +
          ", oneDNN int8 without s16 saturation (VNNI/AMX) " +
          ("yes" if caps["onednn_int8_without_saturation"] else "no") +
          ", MKL packed sgemm " + ("yes" if caps["mkl_sgemm"] else f"no ({caps['mkl_sgemm_unavailable']})"))
    print("cap:      VERIFUSE_MAX_ISA=" + "|".join(TIERS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
