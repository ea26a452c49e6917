"""torchvision for the benchmark, without breaking transformers (or anything else) outside it.

The problem (torch 2.13.0+cpu, torchvision 0.28.0, the wheel PyPI serves for torch 2.13):

* The wheel is a CUDA build. Its ``torchvision/_C.so`` links ``libc10_cuda.so`` and
  ``libtorch_cuda.so``, which the CPU torch does not ship, so ``torchvision/extension.py``
  fails to load it. That failure is caught (``_has_ops()`` is then False) and is harmless by itself.
* ``torchvision/_meta_registrations.py`` then calls ``torch.library.register_fake("torchvision::nms")``
  and ``register_fake("torchvision::qnms")`` unconditionally (every other fake/meta kernel there is
  guarded by ``_has_ops()``). Registering a fake kernel for an operator whose schema was never
  defined raises ``RuntimeError: operator torchvision::nms does not exist``, so
  ``import torchvision`` fails.
* transformers imports torchvision whenever it is installed (``is_torchvision_available()`` is a
  ``find_spec``), so a torchvision in site-packages breaks ``from transformers import BertModel``
  in every process; timm imports torchvision unconditionally (``timm.layers.create_norm``).

What the benchmark does (evidence and alternatives: docs/benchmarking.md):

1. ``make bench-deps`` installs the wheel with ``pip install --no-deps --target`` into a private
   directory, ``<site-packages>/verifuse_bench_vendor`` (``VERIFUSE_BENCH_VENDOR`` overrides it).
   That directory is not on ``sys.path``, so no other process can see torchvision, and
   transformers keeps working everywhere.
2. The bench process calls :func:`ensure_torchvision` before it imports timm, torchvision or
   transformers. It puts the private directory on ``sys.path``; tries to load the wheel's
   ``_C.so``; if that fails (it does, here) it defines the two operator *schemas* that
   ``_meta_registrations`` needs (``torchvision::nms`` and ``torchvision::qnms``, exactly as the
   wheel's ``_C.so`` declares them) with ``torch.library``, without kernels. Then
   ``import torchvision`` works. Classification and segmentation models never call a
   torchvision operator; detection models (nms, roi_align) would fail with "no kernel", which is
   why none is in the suites.

``python -m verifuse_bench.vendor install|check|dir`` is what the Makefile calls.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

VENDOR_ENV = "VERIFUSE_BENCH_VENDOR"
TORCHVISION_REQUIREMENT = "torchvision==0.28.0"  # the release built against torch 2.13.0

# Schemas the wheel's _C.so registers (strings in torchvision/_C.so of 0.28.0), for the two ops
# whose fake kernels _meta_registrations registers without checking _has_ops().
_SHIM_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_SHIM_LIB = None  # keeps the torch.library.Library (and so the schemas) alive
_STATE: dict = {}


def vendor_dir() -> Path:
    env = os.environ.get(VENDOR_ENV)
    if env:
        return Path(env)
    return Path(sysconfig.get_paths()["purelib"]) / "verifuse_bench_vendor"


def _site_torchvision() -> Path | None:
    """A torchvision importable without the private directory (site-packages, PYTHONPATH)."""
    vd = str(vendor_dir())
    for entry in sys.path:
        if entry and os.path.abspath(entry) == os.path.abspath(vd):
            continue
        p = Path(entry or ".") / "torchvision" / "__init__.py"
        if p.is_file():
            return p.parent
    return None


def _define_schemas() -> list[str]:
    """Define torchvision::nms / qnms (schemas only) if they do not exist yet."""
    global _SHIM_LIB
    import torch

    missing = []
    for schema in _SHIM_SCHEMAS:
        name = schema.split("(", 1)[0]
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        except RuntimeError:
            missing.append(schema)
    if missing:
        if _SHIM_LIB is None:
            _SHIM_LIB = torch.library.Library("torchvision", "FRAGMENT")
        for schema in missing:
            _SHIM_LIB.define(schema)
    return [s.split("(", 1)[0] for s in missing]


def ensure_torchvision() -> tuple[bool, str | None]:
    """Make ``import torchvision`` (and so timm) work in this process. Idempotent; never raises.

    Returns (ok, reason if not). Details (where torchvision came from, whether the schema shim was
    needed and why) are in :func:`torchvision_info`.
    """
    if "ok" in _STATE:
        return _STATE["ok"], _STATE.get("reason")
    import torch

    info: dict = {"vendor_dir": str(vendor_dir())}
    pkg = _site_torchvision()
    if pkg is None and (vendor_dir() / "torchvision" / "__init__.py").is_file():
        sys.path.append(str(vendor_dir()))
        importlib.invalidate_caches()
        pkg = vendor_dir() / "torchvision"
        info["source"] = "vendor"
    elif pkg is not None:
        info["source"] = "sys.path"
    if pkg is None:
        return _finish(False, f"torchvision is not installed (`make bench-deps` puts "
                              f"{TORCHVISION_REQUIREMENT} into {vendor_dir()})", info)
    info["path"] = str(pkg)
    if "torchvision" not in sys.modules:
        so = next(iter(sorted(pkg.glob("_C*.so"))), None)
        try:
            if so is None:
                raise OSError("no _C.so in the package")
            torch.ops.load_library(str(so))
            info["compiled_ops"] = True
        except OSError as e:
            info["compiled_ops"] = False
            cause = e.__cause__ or e  # torch wraps the dlopen error
            info["compiled_ops_error"] = str(cause).splitlines()[0][:300]
            try:
                info["shim_defined"] = _define_schemas()
            except Exception as e2:  # pragma: no cover - torch.library API change
                return _finish(False, f"could not define the torchvision op schemas: {e2!r}", info)
    try:
        tv = importlib.import_module("torchvision")
        importlib.import_module("torchvision.models")
        info["version"] = getattr(tv, "__version__", None)
    except Exception as e:
        return _finish(False, f"import torchvision failed: {type(e).__name__}: {e}", info)
    return _finish(True, None, info)


def _finish(ok: bool, reason: str | None, info: dict) -> tuple[bool, str | None]:
    _STATE.update(ok=ok, reason=reason, info=info)
    return ok, reason


def torchvision_info() -> dict:
    return dict(_STATE.get("info", {}), ok=_STATE.get("ok"), reason=_STATE.get("reason"))


# --------------------------------------------------------------------------------------------
# make bench-deps helpers
# --------------------------------------------------------------------------------------------


def _importable_in_fresh_process(stmt: str) -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", stmt], capture_output=True, text=True, env=env, timeout=600)
    tail = (r.stderr.strip().splitlines() or [""])[-1]
    return r.returncode == 0, tail


def install() -> int:
    """Install torchvision into the private directory; remove a site-packages torchvision that
    cannot be imported (it breaks transformers in every process)."""
    site = _site_torchvision()
    if site is not None:
        ok, err = _importable_in_fresh_process("import torchvision")
        if not ok:
            print(f"vendor: {site} cannot be imported ({err}); it breaks `import transformers` "
                  f"everywhere, uninstalling it from site-packages", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=False)
        else:
            print(f"vendor: a working torchvision is already importable from {site}; using it", flush=True)
            return 0
    d = vendor_dir()
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", str(d),
           TORCHVISION_REQUIREMENT]
    print("vendor: " + " ".join(cmd), flush=True)
    return subprocess.run(cmd).returncode


def check() -> int:
    """What the bench needs, each in a fresh process (so nothing here masks a broken import)."""
    bench_dir = str(Path(__file__).resolve().parent.parent)
    checks = {
        # outside the bench: transformers must not see (a broken) torchvision
        "transformers (plain process)": "from transformers import BertModel",
        "torchvision (bench process)": (f"import sys; sys.path.insert(0, {bench_dir!r}); "
                                        "from verifuse_bench.vendor import ensure_torchvision; "
                                        "ok, why = ensure_torchvision(); assert ok, why; import torchvision.models"),
        "timm (bench process)": (f"import sys; sys.path.insert(0, {bench_dir!r}); "
                                 "from verifuse_bench.vendor import ensure_torchvision; "
                                 "ok, why = ensure_torchvision(); assert ok, why; import timm; "
                                 "from transformers import BertModel"),
        "openvino": "import openvino, openvino.torch",
        "zentorch": "import zentorch",
        "matplotlib": "import matplotlib",
    }
    bad = 0
    for name, stmt in checks.items():
        ok, err = _importable_in_fresh_process(stmt)
        print(f"  {'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + err}", flush=True)
        bad += not ok
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else "dir"
    if cmd == "dir":
        print(vendor_dir())
        return 0
    if cmd == "install":
        return install()
    if cmd == "check":
        return check()
    print("usage: python -m verifuse_bench.vendor [dir|install|check]", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
