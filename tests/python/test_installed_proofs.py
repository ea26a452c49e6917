"""The rule proofs made at install time (setup.py, verifuse/installed_proofs.py): a new cache
directory starts from them, so a first compile runs no Z3 on rule obligations; with the copy
off it proves them itself. Each compile runs in a fresh process, because proofs are memoised
per process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import verifuse
from verifuse import installed_proofs

PACKAGE_DIR = os.path.dirname(os.path.abspath(verifuse.__file__))
FROM_SOURCE_TREE = os.path.isdir(os.path.join(PACKAGE_DIR, "..", "..", "..", ".git"))

# A linear + GELU + residual model: canonicalize-addmm, gelu-erf-postop and the residual-sum rules.
COMPILE = textwrap.dedent("""
    import json, torch, verifuse
    from verifuse import report
    torch.manual_seed(0)
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(32, 32)
        def forward(self, x):
            return torch.nn.functional.gelu(self.fc(x)) + x
    m = M().eval()
    x = torch.randn(4, 32)
    c = torch.compile(m, backend="verifuse", options={"strict": True})
    with report.collect() as graphs, torch.no_grad():
        y = c(x)
    assert torch.allclose(y, m(x), atol=1e-5)
    print(json.dumps([{"rule": p["rule"], "verdict": p["verdict"], "cached": p["cached"]}
                      for g in graphs for p in g.proofs]))
""")


def compile_in_fresh_process(cache_dir, installed_proofs_on):
    env = dict(os.environ, VERIFUSE_CACHE_DIR=str(cache_dir),
               VERIFUSE_INSTALLED_PROOFS="1" if installed_proofs_on else "0")
    out = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_install = pytest.mark.skipif(
    FROM_SOURCE_TREE and not os.path.isfile(installed_proofs.installed_store()),
    reason="verifuse imported from the source tree: the proof store is made by `pip install` (make install)")


@needs_install
def test_the_installed_package_holds_proved_rules():
    assert os.path.getsize(installed_proofs.installed_store()) > 10_000


@needs_install
def test_first_compile_in_a_new_cache_takes_the_installed_proofs(tmp_path):
    proofs = compile_in_fresh_process(tmp_path / "on", installed_proofs_on=True)
    assert proofs and all(p["verdict"] == "Proved" for p in proofs), proofs
    assert all(p["cached"] for p in proofs), proofs  # no Z3 query for any rule
    assert os.path.isfile(tmp_path / "on" / "proofs" / installed_proofs.STORE_FILE)

    cold = compile_in_fresh_process(tmp_path / "off", installed_proofs_on=False)
    assert sorted(p["rule"] for p in cold) == sorted(p["rule"] for p in proofs)
    assert all(p["verdict"] == "Proved" for p in cold), cold
    assert not any(p["cached"] for p in cold), cold  # the same rules, proved by this compile


def test_seeding_never_replaces_an_existing_store(tmp_path, monkeypatch):
    source = tmp_path / "installed.vfstore"
    source.write_bytes(b"installed")
    monkeypatch.setattr(installed_proofs, "installed_store", lambda: str(source))
    monkeypatch.setattr(installed_proofs, "_seeded", set())
    mine = tmp_path / "mine" / "proofs" / installed_proofs.STORE_FILE
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"mine")
    assert installed_proofs.seed_cache(str(tmp_path / "mine")) is False
    assert mine.read_bytes() == b"mine"

    assert installed_proofs.seed_cache(str(tmp_path / "new")) is True
    assert (tmp_path / "new" / "proofs" / installed_proofs.STORE_FILE).read_bytes() == b"installed"
    assert [p.name for p in (tmp_path / "new" / "proofs").iterdir()] == [installed_proofs.STORE_FILE]  # no temp left

    monkeypatch.setenv("VERIFUSE_INSTALLED_PROOFS", "0")
    assert installed_proofs.seed_cache(str(tmp_path / "off")) is False
    assert not (tmp_path / "off").exists()
