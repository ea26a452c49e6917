"""The rule proofs made when verifuse was installed, handed to a new proof cache.

Every rule's obligations (and its mutants') are the same for every model: `setup.py` proves them
all once at install time, with the Z3 the extension links (``python -m verifuse prove``), into
``verifuse/proofs/proofs-v2.vfstore`` inside the package. A cache directory without a proof store
starts from a copy of that file, so the first compile on a machine does not wait for Z3 on
obligations the install already discharged (0.4-0.6 s per model family here).

Nothing is trusted that a compile would not trust from its own cache: the store holds only
Proved/Refuted verdicts, each record carries its obligation's canonical form and the solver
version and is checked on lookup (a record of another Z3 is a miss, proved again), and a rule is
admitted only when all its verdicts say so. ``VERIFUSE_INSTALLED_PROOFS=0`` turns the copy off.
"""
from __future__ import annotations

import os
import threading

STORE_FILE = "proofs-v2.vfstore"  # verify::ProofCache::kStoreName + ".vfstore"

_lock = threading.Lock()
_seeded: set[str] = set()


def installed_store() -> str:
    """Path of the proof store shipped with this installation (it may not exist: a source tree)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "proofs", STORE_FILE)


def seed_cache(cache_dir: str) -> bool:
    """Copies the installed proofs into ``cache_dir``/proofs when it has no proof store yet.

    Returns whether this call created the store. Never raises: without a copy the compile proves
    what it needs itself, as before. The copy is written beside the target and hard-linked into
    place, so a reader never sees half a file and a store another process made meanwhile is kept.
    """
    if not cache_dir or os.environ.get("VERIFUSE_INSTALLED_PROOFS", "1") == "0":
        return False
    with _lock:
        if cache_dir in _seeded:
            return False
        _seeded.add(cache_dir)
    source = installed_store()
    target_dir = os.path.join(cache_dir, "proofs")
    target = os.path.join(target_dir, STORE_FILE)
    if os.path.exists(target) or not os.path.isfile(source):
        return False
    tmp = os.path.join(target_dir, f".{STORE_FILE}.seed.{os.getpid()}.{threading.get_ident()}")
    try:
        os.makedirs(target_dir, exist_ok=True)
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
            dst.flush()
            os.fsync(dst.fileno())
        os.link(tmp, target)  # fails if the store appeared meanwhile: theirs is kept
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
