"""Inputs the model writes (a static KV cache's ``index_copy_``): aot_autograd turns the write into a
functional ``index_put`` whose result its runtime wrapper copies back into the input after every
call. The plan writes such an input in place instead (planner pass "write inputs in place") and
hands the input itself back, so neither the clone inside the functional op nor the copy back is
made. These tests check the results and the caller's tensors against eager, that the in-place
form is really used where it may be, and that it is not where it must not be."""
import torch
import torch.nn.functional as F

import verifuse  # noqa: F401  (registers the backend)
from verifuse import report


class CacheStep(torch.nn.Module):
    """One decode step over a static cache: write this step's key and value at ``pos``, attend."""

    def __init__(self, dim=32):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, k_cache, v_cache, x, pos):
        b, h, _, d = k_cache.shape
        kv = self.proj(x).view(b, 1, h, d).transpose(1, 2)
        k_cache.index_copy_(2, pos, kv)
        v_cache.index_copy_(2, pos, kv * 0.5)
        q = kv * 2.0
        return F.scaled_dot_product_attention(q, k_cache, v_cache)


def _caches(seed=0, heads=2, length=8, head_dim=16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, length, head_dim, generator=g), torch.randn(1, heads, length, head_dim, generator=g))


def _steps(n=4, dim=32):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 1, dim, generator=g), torch.tensor([p])) for p in range(n)]


def _compile(model, strict=True):
    torch._dynamo.reset()
    return torch.compile(model, backend="verifuse", options={"strict": strict})


def test_static_cache_writes_run_in_place_with_eager_results():
    torch.manual_seed(0)
    model = CacheStep().eval()
    compiled = _compile(model)
    k_eager, v_eager = _caches()
    k_ours, v_ours = _caches()
    k_ptr = k_ours.data_ptr()
    with report.collect() as graphs, torch.no_grad():
        for x, pos in _steps():
            expected = model(k_eager, v_eager, x, pos)
            got = compiled(k_ours, v_ours, x, pos)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            # The caller's caches hold what eager's hold, after every step.
            torch.testing.assert_close(k_ours, k_eager, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(v_ours, v_eager, rtol=1e-6, atol=1e-6)
    assert k_ours.data_ptr() == k_ptr
    planned = [g for g in graphs if g.engine == "verifuse"]
    assert planned, [g.engine for g in graphs]
    # Both caches are written in place: the pass changed the plan and counted two writes.
    assert planned[-1].in_place_writes == 2, planned[-1].plan_passes
    assert "write inputs in place" in planned[-1].plan_passes
    # Traced once (aten_trace.py): the written caches' new values are the graph's last outputs.
    assert planned[-1].aten_trace == "one trace", planned[-1].aten_trace


def test_in_place_write_leaves_no_copy_of_the_cache_in_the_step():
    """The functional form (aten::index_put) clones the cache before writing it; in place, only
    aten::index_put_ runs on the caller's cache. (aot_autograd's copy back still calls copy_,
    which returns at once for a tensor copied onto itself.)"""
    torch.manual_seed(0)
    model = CacheStep().eval()
    compiled = _compile(model)
    k, v = _caches(length=64)
    steps = _steps()
    with torch.no_grad():
        compiled(k, v, *steps[0])  # compile
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            compiled(k, v, *steps[1])
    names = [e.name for e in prof.events()]
    clones = [e.input_shapes for e in prof.events() if e.name == "aten::clone" and e.input_shapes
              and e.input_shapes[0] == list(k.shape)]
    assert clones == []
    assert names.count("aten::index_put") == 0
    assert names.count("aten::index_put_") == 2


def test_a_cache_also_read_before_its_write_is_updated_functionally():
    """The old value is read (the sum before the write): writing in place would change what that
    reader sees, so the plan keeps the functional form and the wrapper's copy."""

    class ReadThenWrite(torch.nn.Module):
        def forward(self, cache, x, pos):
            before = cache.sum(dim=2, keepdim=True)
            cache.index_copy_(2, pos, x)
            return before + cache.mean(dim=2, keepdim=True)

    model = ReadThenWrite()
    compiled = _compile(model)
    ce, co = _caches()[0], _caches()[0]
    g = torch.Generator().manual_seed(3)
    with report.collect() as graphs, torch.no_grad():
        for p in range(3):
            x = torch.randn(1, 2, 1, 16, generator=g)
            pos = torch.tensor([p])
            torch.testing.assert_close(compiled(co, x, pos), model(ce, x, pos), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(co, ce)
    planned = [g for g in graphs if g.engine == "verifuse"]
    assert planned and planned[-1].in_place_writes == 0


def test_an_accumulating_write_is_not_made_in_place():
    """index_put with accumulate=True would add twice if a call were run again after a hand-over
    to the exact plan: it stays functional (and correct)."""

    class Accumulate(torch.nn.Module):
        def forward(self, cache, x, idx):
            cache.index_put_((idx,), x, accumulate=True)
            return cache * 2

    model = Accumulate()
    compiled = _compile(model)
    ce, co = torch.zeros(6, 4), torch.zeros(6, 4)
    with report.collect() as graphs, torch.no_grad():
        for p in range(3):
            x = torch.full((2, 4), float(p + 1))
            idx = torch.tensor([p, p])
            torch.testing.assert_close(compiled(co, x, idx), model(ce, x, idx))
            torch.testing.assert_close(co, ce)
    planned = [g for g in graphs if g.engine == "verifuse"]
    assert planned and planned[-1].in_place_writes == 0


def test_caches_sharing_storage_are_written_as_eager_writes_them():
    """K and V as two views of one buffer: a write into one must show in the other exactly as in
    eager (aot_autograd merges aliased written inputs; the plan checks the storages again at run
    time and takes the functional form when they are shared)."""
    torch.manual_seed(0)
    model = CacheStep().eval()
    compiled = _compile(model, strict=False)
    base_e = torch.randn(2, 1, 2, 8, 16)
    base_o = base_e.clone()
    with torch.no_grad():
        for x, pos in _steps(3):
            expected = model(base_e[0], base_e[1], x, pos)
            got = compiled(base_o[0], base_o[1], x, pos)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(base_o, base_e, rtol=1e-6, atol=1e-6)


def test_one_tensor_passed_as_both_caches_matches_eager():
    torch.manual_seed(0)
    model = CacheStep().eval()
    compiled = _compile(model, strict=False)
    ce = torch.randn(1, 2, 8, 16)
    co = ce.clone()
    with torch.no_grad():
        for x, pos in _steps(3):
            expected = model(ce, ce, x, pos)
            got = compiled(co, co, x, pos)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(co, ce, rtol=1e-6, atol=1e-6)
