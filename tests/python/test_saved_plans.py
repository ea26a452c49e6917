"""Saved plans (issue 18): aot_compile save/load in a second process, the plan cache of plain
torch.compile, refusals (other weights, another CPU/environment), the cache corruption matrix,
and a loaded function under 8 threads.

A replayed plan runs no Z3 query and no timing: `stats()["solver_queries"]` and
`stats()["timings_run"]` count them (the layer check of a small folded conv asks Z3 on every
fresh compile, so a test that expects 0 fails when the plan is compiled instead of replayed).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch.nn as nn

import verifuse
from verifuse import report as _report

HERE = os.path.abspath(__file__)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


def build(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    m = Net()
    for bn in (m.bn1, m.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
    return m.eval()


def example() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(7))


def counters() -> dict:
    keys = ("solver_queries", "timings_run", "plans_loaded", "plans_compiled", "plans_refused", "plan_cache_hits")
    return {k: verifuse.stats().get(k, 0) for k in keys}


def max_diff(out, model, x) -> float:
    out = out[0] if isinstance(out, (list, tuple)) else out
    with torch.no_grad():
        return float((out - model(x)).abs().max())


# --- child processes --------------------------------------------------------------------------

def _child(mode: str, path: str, cache: str) -> None:
    x = example()
    result: dict = {}
    if mode == "load":
        seed = int(os.environ.get("CHILD_SEED", "0"))
        model = build(seed)
        fn = verifuse.load(path)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            out = fn(model, x)
            again = fn(model, x)
        result["warnings"] = [str(w.message) for w in caught if issubclass(w.category, verifuse.VerifusePlanWarning)]
        result["max_diff"] = max(max_diff(out, model, x), max_diff(again, model, x))
    else:  # plain torch.compile with the plan cache in `cache`
        model = build(0)
        compiled = torch.compile(model, backend="verifuse", options={"cache_dir": cache, "strict": True})
        with _report.collect() as graphs, torch.no_grad():
            out = compiled(x)
        result["max_diff"] = max_diff(out, model, x)
        result["sources"] = [g.plan_source for g in graphs]
    result["stats"] = counters()
    print("RESULT " + json.dumps(result), flush=True)


def _spawn(mode: str, path: str, cache: str, **env: str) -> subprocess.Popen:
    e = dict(os.environ)
    e.update(env)
    return subprocess.Popen([sys.executable, HERE, "--child", mode, path, cache], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# --- aot_compile save / load -------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One saved function (autotuned, its tuning in a private cache_dir), made in this process."""
    d = tmp_path_factory.mktemp("saved")
    path = str(d / "net.vfplan")
    verifuse.reset_stats()
    verifuse.save(build(0), (example(),), path, cache_dir=str(d / "cache"), strict=True)
    made = counters()
    assert made["plans_compiled"] == 1 and made["solver_queries"] > 0 and made["timings_run"] > 0, made
    return path, str(d / "cache")


def test_saved_function_loads_in_a_fresh_process_without_solver_or_timing(saved):
    path, cache = saved
    procs = {
        "same": _spawn("load", path, cache),
        # Same architecture, other weights: the plan was validated for others, so it is refused
        # and the graph compiled (and validated) from scratch on these weights.
        "weights": _spawn("load", path, cache, CHILD_SEED="1"),
        # Another CPU (the environment key's ISA): refused too.
        "cpu": _spawn("load", path, cache, VERIFUSE_TEST_CPU_ISA="foreign_isa"),
    }
    same, weights, cpu = (_result(procs[k]) for k in ("same", "weights", "cpu"))

    assert same["max_diff"] < 1e-4, same
    assert same["stats"]["plans_loaded"] == 1 and same["stats"]["plans_compiled"] == 0, same
    assert same["stats"]["solver_queries"] == 0 and same["stats"]["timings_run"] == 0, same
    assert same["warnings"] == [], same

    assert weights["max_diff"] < 1e-4, weights
    assert weights["stats"]["plans_refused"] == 1 and weights["stats"]["plans_loaded"] == 0, weights
    assert weights["stats"]["solver_queries"] > 0, weights  # re-validated: the layer checks ran
    assert len(weights["warnings"]) == 1 and "saved plan refused" in weights["warnings"][0], weights
    assert "differs from the one the plan was validated for" in weights["warnings"][0], weights

    assert cpu["max_diff"] < 1e-4, cpu
    assert cpu["stats"]["plans_refused"] == 1 and cpu["stats"]["plans_loaded"] == 0, cpu
    assert "another environment" in cpu["warnings"][0] and "foreign_isa" in cpu["warnings"][0], cpu


def test_loaded_function_under_8_threads_binds_once(saved):
    path, _ = saved
    model = build(0)
    verifuse.reset_stats()
    fn = verifuse.load(path)
    inputs = [torch.randn(2, 3, 16, 16) for _ in range(8)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    errors: list = []
    barrier = threading.Barrier(8)

    def worker(t: int) -> None:
        try:
            barrier.wait()  # all threads race the first call, which binds the weights
            with torch.no_grad():
                for k in range(50):
                    x = inputs[(t + k) % 8]
                    out = fn(model, x)
                    out = out[0] if isinstance(out, (list, tuple)) else out
                    torch.testing.assert_close(out, expected[(t + k) % 8], atol=1e-4, rtol=1e-4)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:3]
    c = counters()
    assert c["plans_loaded"] == 1 and c["solver_queries"] == 0 and c["timings_run"] == 0, c


def test_loaded_plan_refuses_inputs_of_another_shape_even_without_dynamo_guards(tmp_path):
    # skip_all_guards_unsafe (what a transformers model needs to be saved at all) drops Dynamo's
    # shape guards; the loaded plan still checks each input against the traced shape.
    path = str(tmp_path / "noguards.vfplan")
    model = build(0)
    verifuse.save(model, (example(),), path, cache_dir=str(tmp_path / "c"), strict=True,
                  guard_filter_fn=torch.compiler.skip_all_guards_unsafe)
    fn = verifuse.load(path)
    with torch.no_grad():
        assert max_diff(fn(model, example()), model, example()) < 1e-4
        with pytest.raises(RuntimeError, match=r"saved plan was compiled for \(2, 3, 16, 16\)"):
            fn(model, torch.randn(1, 3, 16, 16))


def test_a_graph_verifuse_did_not_compile_cannot_be_saved(tmp_path):
    # Grad mode on and parameters requiring grad: verifuse runs the graph eagerly (one warning),
    # and saving it says why instead of writing a function without a plan.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.enable_grad():
            compiled = _aot_with_grad(build(0), example())
    with pytest.raises(RuntimeError, match="cannot be saved: autograd is recording"):
        compiled.save_compiled_function(str(tmp_path / "x.vfplan"))


def _aot_with_grad(model, x):
    import torch._dynamo.config as dynamo_config

    from verifuse.saved import _call_model

    with dynamo_config.patch(enable_aot_compile=True):
        fn = torch.compile(_call_model, backend="verifuse", fullgraph=True)
        return fn.aot_compile(((model, x), {}))


# --- the plan cache of plain torch.compile -----------------------------------------------------

def test_plan_cache_second_process_reuses_the_plan_and_concurrent_compiles_work_once(tmp_path):
    cache = str(tmp_path / "cache")
    # Two processes compile the same model at once into one empty cache_dir (replicas starting
    # together): one compiles while the other waits for its plan (a lock per cache key), then
    # replays it; neither fails or damages the store.
    first = [_spawn("cache", "", cache), _spawn("cache", "", cache)]
    results = [_result(p) for p in first]
    for r in results:
        assert r["max_diff"] < 1e-4, r
    assert sorted(r["sources"][0] for r in results) == ["compiled", "plan-cache"], results
    assert sorted(r["stats"]["solver_queries"] > 0 for r in results) == [False, True], results
    later = _result(_spawn("cache", "", cache))
    assert later["max_diff"] < 1e-4, later
    assert later["sources"] == ["plan-cache"], later
    assert later["stats"]["solver_queries"] == 0 and later["stats"]["timings_run"] == 0, later


def _compile_once(cache: str, model: nn.Module) -> tuple[str, dict, float]:
    torch._dynamo.reset()
    verifuse.reset_stats()
    x = example()
    compiled = torch.compile(model, backend="verifuse", options={"cache_dir": cache, "strict": True})
    with _report.collect() as graphs, torch.no_grad():
        out = compiled(x)
    return graphs[0].plan_source, counters(), max_diff(out, model, x)


def test_plan_cache_ignores_an_entry_from_another_cpu(tmp_path, monkeypatch):
    cache = str(tmp_path)
    model = build(0)
    assert _compile_once(cache, model)[0] == "compiled"
    assert _compile_once(cache, model)[0] == "plan-cache"
    monkeypatch.setenv("VERIFUSE_TEST_CPU_ISA", "foreign_isa")
    source, stats, diff = _compile_once(cache, model)
    assert source == "compiled" and stats["solver_queries"] > 0 and diff < 1e-4, (source, stats)
    # Other weights: another key, never the first model's plan.
    monkeypatch.delenv("VERIFUSE_TEST_CPU_ISA")
    source, stats, diff = _compile_once(cache, build(3))
    assert source == "compiled" and diff < 1e-4, (source, stats)


def _fnv1a64(data: bytes, h: int = 0xcbf29ce484222325) -> int:
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def _rewrite_payloads(path: str, change) -> None:
    """Rewrites every inline record of a record store with change(payload), checksums valid."""
    data = open(path, "rb").read()
    lines = data.split(b"\n", 1)
    out, rest = [lines[0] + b"\n"], lines[1]
    count = 0
    while rest.startswith(b"rec "):
        header, rest = rest.split(b"\n", 1)
        _, created, klen, plen, _ = header.split(b" ")
        key, payload, rest = rest[:int(klen)], rest[int(klen):int(klen) + int(plen)], rest[int(klen) + int(plen) + 1:]
        payload = change(payload)
        prefix = b"rec %s %d %d" % (created, len(key), len(payload))
        out.append(prefix + b" %016x\n" % _fnv1a64(payload, _fnv1a64(key, _fnv1a64(prefix))) + key + payload + b"\n")
        count += 1
    assert count >= 1 and rest.startswith(b"end "), rest[:80]
    out.append(rest)
    open(path, "wb").write(b"".join(out))


def _damage(store: str, how: str) -> None:
    data = open(store, "rb").read()
    if how == "truncated":
        open(store, "wb").write(data[: len(data) // 2])
    elif how == "flipped-byte":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x40
        open(store, "wb").write(bytes(b))
    elif how == "foreign-file":
        open(store, "wb").write(os.urandom(4096))
    elif how == "empty-file":
        open(store, "wb").write(b"")
    elif how == "undecodable-plan":  # checksums valid, the plan inside cut short
        _rewrite_payloads(store, lambda p: p[: len(p) // 3])
    elif how == "older-plan-format":
        _rewrite_payloads(store, lambda p: p.replace(b"16:verifuse-plan-v1", b"16:verifuse-plan-v0", 1))
    elif how == "other-weights-in-plan":  # a plan whose fingerprints are not this model's
        _rewrite_payloads(store, _zero_first_print)
    else:
        raise AssertionError(how)


def _zero_first_print(p: bytes) -> bytes:
    # The first weight fingerprint follows the first weight name: "<len>:<name>16:<16 hex>".
    i = p.index(b"conv1.weight16:") + len(b"conv1.weight16:")
    return p[:i] + b"0" * 16 + p[i + 16:]


@pytest.mark.parametrize("how", ["truncated", "flipped-byte", "foreign-file", "empty-file", "undecodable-plan",
                                 "older-plan-format", "other-weights-in-plan"])
def test_plan_cache_survives_a_damaged_store(tmp_path, how):
    cache = str(tmp_path)
    model = build(0)
    assert _compile_once(cache, model)[0] == "compiled"
    store = os.path.join(cache, "plans-v1.vfstore")
    assert os.path.isfile(store)
    _damage(store, how)
    # Never used, never a failure: compiled again (and validated), with eager's results ...
    source, stats, diff = _compile_once(cache, model)
    assert source == "compiled" and stats["solver_queries"] > 0 and diff < 1e-4, (how, source, stats)
    # ... and the fresh plan replaced the damaged entry: the next compile replays it.
    source, stats, diff = _compile_once(cache, model)
    assert source == "plan-cache" and stats["solver_queries"] == 0 and diff < 1e-4, (how, source, stats)


if __name__ == "__main__" and len(sys.argv) > 4 and sys.argv[1] == "--child":
    # Through the module's own name: Dynamo's saved guards check the model's class as
    # test_saved_plans.Net, which __main__.Net is not.
    import test_saved_plans

    test_saved_plans._child(sys.argv[2], sys.argv[3], sys.argv[4])


def test_default_guard_filter_drops_weight_guards_and_verifuse_still_checks_weights(tmp_path):
    """save's default filter leaves the weights to verifuse (Dynamo's per-weight guards were most of
    a load's time): a loaded function then called with another model's weights, or after an in-place
    weight update, still gives that model's result, never the saved weights'."""
    from verifuse.saved import drop_weight_guards

    class Entry:
        def __init__(self, name, guard_type, value, is_global=False):
            self.name, self.guard_type, self.value, self.has_value = name, guard_type, value, True
            self.is_global = is_global

    p = nn.Parameter(torch.ones(2))
    flags = drop_weight_guards([Entry("L['model']._modules['fc']._parameters['weight']", "TENSOR_MATCH", p),
                                Entry("L['model']._modules['bn1']._buffers['running_mean']", "TENSOR_MATCH", torch.ones(2)),
                                Entry("L['x']", "TENSOR_MATCH", torch.ones(2)),
                                Entry("L['x'].dim()", "EQUALS_MATCH", 4),
                                Entry("G['torch']", "MODULE_MATCH", torch, is_global=True)])
    assert flags == [False, False, True, True, False]  # torch's aot_compile default drops the last

    path = str(tmp_path / "net.vfplan")
    a, b, x = build(0), build(1), example()
    verifuse.save(a, (x,), path, cache_dir=str(tmp_path / "cache"))
    fn = verifuse.load(path)
    with torch.no_grad():
        assert max_diff(fn(a, x), a, x) < 1e-4
        assert max_diff(fn(b, x), b, x) < 1e-4  # other weights: re-validated, not the saved plan's
        a.fc.weight.mul_(2.0)  # an in-place update of a weight the plan folded or packed
        assert max_diff(fn(a, x), a, x) < 1e-4
