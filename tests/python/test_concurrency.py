"""Concurrency and recompiles (issue 7).

* 8 threads x 1,000 calls on each of three models (a small CNN with BN, an MLP, a small
  transformer encoder layer), all threads on one compiled callable, starting together on a
  not-yet-compiled model (so the first calls race the compile): no error, and every output
  bitwise identical to a serial call on the same input. (Dynamo compiles a frame once per thread
  that races its first call, whatever the backend; a server should warm up before going
  concurrent. verifuse adds no compiles of its own.) Models are tiny so the 24,000 calls stay
  within CI's budget on 2 cores.
* Varying batch sizes under dynamic=True (and under Dynamo's default automatic dynamic) compile a
  bounded number of graphs (<= 3 for 11 sizes), not one per size, and no more than Dynamo's own
  eager backend compiles for the same calls: the counts are asserted and printed.
* Dynamo's recompile limit: hitting it is reported (RecompileLimitWarning, a
  VerifuseFallbackWarning, and verifuse.stats().get("recompile_limit_hits", 0)), and is an error under
  strict mode; hits for other backends are not reported as verifuse's.
"""
import threading
import warnings

import pytest
import torch
import torch.nn as nn

import verifuse
from verifuse import recompiles

THREADS = 8
CALLS = 1000
DISTINCT_INPUTS = 16


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.SiLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    with torch.no_grad():
        for bn in (m[1], m[5]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return m.eval()


def mlp() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 8)).eval()


def encoder() -> nn.Module:
    torch.manual_seed(2)
    # A callable activation (not "relu"/"gelu") keeps nn.TransformerEncoderLayer off its fused
    # fast path, so the graph has the real linear/softmax/layer_norm nodes.
    return nn.TransformerEncoderLayer(32, 4, 64, activation=nn.SiLU(), batch_first=True).eval()


MODELS = {
    "cnn": (small_cnn, lambda g: torch.randn(2, 3, 8, 8, generator=g)),
    "mlp": (mlp, lambda g: torch.randn(4, 16, generator=g)),
    "encoder": (encoder, lambda g: torch.randn(2, 6, 32, generator=g)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_threads_match_serial_calls(name, capsys):
    from torch._dynamo.utils import counters

    make_model, make_input = MODELS[name]
    model = make_model()
    gen = torch.Generator().manual_seed(10)
    inputs = [make_input(gen) for _ in range(DISTINCT_INPUTS)]
    verifuse.reset_stats()
    counters.clear()
    compiled = torch.compile(model, backend="verifuse", options={"strict": True})
    outputs = [[None] * CALLS for _ in range(THREADS)]
    errors = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            start.wait()
            with torch.no_grad():
                for i in range(CALLS):
                    outputs[t][i] = compiled(inputs[(t * 7 + i) % DISTINCT_INPUTS])
        except Exception as exc:  # noqa: BLE001
            errors.append(f"thread {t}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:3]
    with torch.no_grad():
        serial = [compiled(x) for x in inputs]
        eager = [model(x) for x in inputs]
    for k in range(DISTINCT_INPUTS):  # the serial results are right, too
        torch.testing.assert_close(serial[k], eager[k], rtol=1e-4, atol=1e-4)
    mismatches = 0
    for t in range(THREADS):
        for i in range(CALLS):
            if not torch.equal(outputs[t][i], serial[(t * 7 + i) % DISTINCT_INPUTS]):
                mismatches += 1
    assert mismatches == 0, f"{mismatches} of {THREADS * CALLS} threaded results differ from serial calls"
    stats = verifuse.stats()
    assert stats["graphs_verifuse"] >= 1 and stats["graphs_fallback"] == 0, stats
    # Dynamo itself compiles the frame once per thread that raced the first call (the same
    # happens with backend="eager" or "inductor"); verifuse adds no compiles of its own.
    assert stats["graphs_compiled"] == counters["frames"]["ok"] <= THREADS, (stats, dict(counters["frames"]))
    with capsys.disabled():
        print(f"\n  {name}: {THREADS}x{CALLS} calls, cold start: {stats['graphs_compiled']} graphs compiled "
              f"({counters['frames']['ok']} Dynamo frame compiles)")


BATCHES = [2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 31, 3, 5, 8]


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic=True", "automatic-dynamic"])
@pytest.mark.parametrize("name", list(MODELS))
def test_varying_batch_sizes_do_not_recompile_per_size(name, dynamic, capsys):
    from torch._dynamo.utils import counters

    make_model, make_input = MODELS[name]
    model = make_model()
    gen = torch.Generator().manual_seed(11)
    base = make_input(gen)
    verifuse.reset_stats()
    counters.clear()
    compiled = torch.compile(model, backend="verifuse", dynamic=dynamic, options={"strict": True})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", verifuse.VerifuseFallbackWarning)
        for b in BATCHES:
            x = torch.randn((b,) + tuple(base.shape[1:]), generator=gen)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    graphs = verifuse.stats()["graphs_compiled"]
    frames = counters["frames"]["ok"]
    # The same calls through Dynamo's own eager backend: the recompiles Dynamo makes anyway (e.g.
    # conv's fake kernel guards the batch at 16 when it picks a conv backend).
    counters.clear()
    torch._dynamo.reset()
    reference = torch.compile(model, backend="eager", dynamic=dynamic)
    with torch.no_grad():
        for b in BATCHES:
            reference(torch.randn((b,) + tuple(base.shape[1:])))
    eager_frames = counters["frames"]["ok"]
    with capsys.disabled():
        print(f"\n  {name} dynamic={dynamic}: {len(set(BATCHES))} batch sizes -> {graphs} verifuse graphs "
              f"({frames} Dynamo frame compiles; backend='eager' needs {eager_frames})")
    assert graphs == frames, "verifuse compiled a graph Dynamo did not ask for"
    assert graphs <= eager_frames, f"verifuse recompiles more than Dynamo's eager backend ({graphs} > {eager_frames})"
    assert graphs <= 3, f"{graphs} graphs for {len(set(BATCHES))} batch sizes"
    assert verifuse.stats().get("recompile_limit_hits", 0) == 0


def test_recompile_limit_hit_is_reported_not_silent(monkeypatch):
    assert recompiles.installed() in ("wrap", "log"), "import verifuse installs the recompile-limit hook"
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    model = mlp()
    verifuse.reset_stats()
    compiled = torch.compile(model, backend="verifuse", dynamic=False)  # static: one graph per batch size
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in (2, 3, 4, 5, 6):
            x = torch.randn(b, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)  # eager past the limit
    hits = [w for w in caught if issubclass(w.category, recompiles.RecompileLimitWarning)]
    assert len(hits) == 1, [str(w.message) for w in caught]
    assert issubclass(hits[0].category, verifuse.VerifuseFallbackWarning)
    assert "recompile_limit (2)" in str(hits[0].message)
    stats = verifuse.stats()
    assert stats.get("recompile_limit_hits", 0) == 1
    assert stats["graphs_compiled"] == 2


def test_recompile_limit_is_an_error_under_strict(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    model = mlp()
    verifuse.reset_stats()
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    with torch.no_grad():
        compiled(torch.randn(2, 16))
        compiled(torch.randn(3, 16))
        with pytest.raises(verifuse.VerifuseError, match="recompile_limit"):
            compiled(torch.randn(4, 16))
    assert verifuse.stats().get("recompile_limit_hits", 0) >= 1


def test_recompile_limit_of_other_backends_is_not_reported(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    verifuse.reset_stats()
    compiled = torch.compile(mlp(), backend="eager", dynamic=False)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in (2, 3, 4):
            compiled(torch.randn(b, 16))
    assert not [w for w in caught if issubclass(w.category, verifuse.VerifuseFallbackWarning)]
    assert verifuse.stats().get("recompile_limit_hits", 0) == 0


def test_install_is_idempotent():
    mode = recompiles.installed()
    assert recompiles.install() == mode
    import torch._dynamo.convert_frame as cf

    if mode == "wrap":
        inner = cf.exceeds_recompile_limit._verifuse_wrapped
        assert getattr(inner, "_verifuse_wrapped", None) is None, "wrapped twice"


def test_cold_start_race_then_new_batch_size_is_not_silent():
    """8 threads racing a cold model fill Dynamo's cache with 8 entries (= the default
    recompile_limit), so the next batch size hits the limit and runs eager from then on. That
    must be reported, not silent (a server should warm up single-threaded, or use dynamic=True)."""
    model = mlp()
    verifuse.reset_stats()
    compiled = torch.compile(model, backend="verifuse")
    barrier = threading.Barrier(THREADS)

    def worker() -> None:
        barrier.wait()
        with torch.no_grad():
            for _ in range(5):
                compiled(torch.randn(4, 16))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    before = verifuse.stats()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(5, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    after = verifuse.stats()
    compiled_again = after["graphs_compiled"] > before["graphs_compiled"]
    reported = after.get("recompile_limit_hits", 0) > before.get("recompile_limit_hits", 0)
    assert compiled_again or reported, "the new batch size ran in eager mode silently"
    if reported:
        assert any(issubclass(w.category, recompiles.RecompileLimitWarning) for w in caught)
