"""Dynamo's graph to ATen in one trace (verifuse/aten_trace.py): a plain inference graph skips
aot_autograd, in-place operators on intermediates included (the trace makes them functional);
graphs that write an input, alias an input in an output or have symbolic sizes still go through
it. Every one gives eager's results and eager's side effects."""
import torch
import torch.nn.functional as F

import pytest

import verifuse  # noqa: F401  (registers the backend)
from verifuse import report


class _Block(torch.nn.Module):
    """A transformer block's shapes: layer norm, QKV, SDPA with an additive mask, GELU MLP."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(x)))


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    mask = torch.zeros(2, 1, 16, 16)
    mask[1, :, :, 12:] = float("-inf")
    return x, mask


def _compile(model, *args, **compile_kwargs):
    compiled = torch.compile(model, backend="verifuse", options={"strict": True}, **compile_kwargs)
    with report.collect() as graphs, torch.no_grad():
        out = compiled(*args)
    return out, graphs


def _counting(monkeypatch, module, name) -> list:
    """Counts the calls of ``module.name`` (one entry per call), still calling it."""
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def _aot_calls(monkeypatch) -> list:
    """Counts aot_autograd's entry point (the backend reaches it through Dynamo's wrapper)."""
    import torch._dynamo.backends.common as common

    return _counting(monkeypatch, common, "aot_module_simplified")


def test_a_plain_inference_graph_is_traced_once_without_aot(monkeypatch):
    calls = _aot_calls(monkeypatch)
    model = _Block().eval()
    x, mask = _inputs()
    out, graphs = _compile(model, x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=1e-5, atol=1e-5)
    assert [g.aten_trace for g in graphs] == ["one trace"]
    assert calls == []
    # The plan still froze the weights and fused: the one-trace graph is a full compile.
    (g,) = graphs
    assert g.engine == "verifuse" and g.num_constants > 0 and g.rewrites


def test_turned_off_every_graph_goes_through_aot(monkeypatch):
    monkeypatch.setenv("VERIFUSE_ONE_TRACE", "0")
    calls = _aot_calls(monkeypatch)
    model = _Block().eval()
    x, mask = _inputs()
    out, graphs = _compile(model, x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=1e-5, atol=1e-5)
    assert graphs[0].aten_trace == "aot_autograd (VERIFUSE_ONE_TRACE=0)"
    assert calls == [1]


class _InPlaceIntermediate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        y[:, 0] = 0.0  # setitem: a copy_ into a slice of an intermediate
        return y * 2


class _HiddenInPlace(torch.nn.Module):
    """The Dynamo graph spells it F.relu(..., inplace=True): only the ATen trace shows relu_."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return F.relu(self.fc(x), inplace=True) + 1


@pytest.mark.parametrize("model_type", [_InPlaceIntermediate, _HiddenInPlace])
def test_in_place_operators_on_intermediates_become_functional_in_the_one_trace(model_type, monkeypatch):
    calls = _aot_calls(monkeypatch)
    torch.manual_seed(0)
    model = model_type().eval()
    x = torch.randn(4, 8)
    out, graphs = _compile(model, x)
    torch.testing.assert_close(out, model(x))
    assert graphs[0].aten_trace == "one trace"
    assert calls == []


def test_a_graph_spelling_no_write_is_traced_once_without_functionalization(monkeypatch):
    from verifuse import aten_trace

    functionalized = _counting(monkeypatch, aten_trace, "_functionalized")
    model = _Block().eval()
    x, mask = _inputs()
    out, graphs = _compile(model, x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=1e-5, atol=1e-5)
    assert graphs[0].aten_trace == "one trace"
    assert functionalized == []


@pytest.mark.parametrize("model_type", [_InPlaceIntermediate, _HiddenInPlace])
def test_a_write_the_dynamo_graph_hides_is_traced_again_functionalized(model_type, monkeypatch):
    """The Dynamo-graph check is a hint: with it blind, the writing operator in the first (not
    functionalized) ATen graph sends the graph through a second, functionalized trace."""
    from verifuse import aten_trace

    monkeypatch.setattr(aten_trace, "_dynamo_graph_may_write", lambda gm: False)
    functionalized = _counting(monkeypatch, aten_trace, "_functionalized")
    traces = _counting(monkeypatch, torch.fx.experimental.proxy_tensor, "make_fx")
    calls = _aot_calls(monkeypatch)
    torch.manual_seed(0)
    model = model_type().eval()
    x = torch.randn(4, 8)
    out, graphs = _compile(model, x)
    torch.testing.assert_close(out, model(x))
    assert graphs[0].aten_trace == "one trace" and calls == []
    assert len(traces) == 2 and len(functionalized) == 1


def test_what_counts_as_a_write_in_dynamos_spelling():
    from verifuse.aten_trace import _dynamo_graph_may_write

    def spelled(fn, *args):
        seen = []

        def capture(gm, inputs):
            seen.append(_dynamo_graph_may_write(gm))
            return gm

        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(fn, backend=capture, fullgraph=True)(*args)
        return seen == [True]

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    a, b = torch.rand(4, 4) > 0.5, torch.rand(4, 4) > 0.5

    def masks(x, a, b):
        return x.masked_fill((a & b) | ~a, 0.0)  # operator.and_ / or_: no write

    def adds(x, y):
        z = x * 2
        z += y  # operator.iadd on an intermediate
        return z

    assert not spelled(masks, x, a, b)
    assert spelled(adds, x, y)
    assert spelled(lambda x: (x * 2).add_(1), x)
    assert spelled(lambda x: F.relu(x * 2, inplace=True), x)
    assert not spelled(lambda x: F.relu(x) + x.transpose(0, 1), x)


def test_the_trace_runs_on_dynamos_own_fake_inputs(monkeypatch):
    """No real tensor converted to a fake again (203 parameters of BERT-base were 30 ms), unless a
    fake no longer describes its tensor."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from verifuse import aten_trace

    conversions = _counting(monkeypatch, FakeTensorMode, "from_tensor")
    model = _Block().eval()
    x, mask = _inputs()
    out, graphs = _compile(model, x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=1e-5, atol=1e-5)
    assert graphs[0].aten_trace == "one trace"
    dynamo_conversions = len(conversions)

    # A fake that no longer matches its tensor: every input converted afresh, same results.
    monkeypatch.setattr(aten_trace, "_describes", lambda fake, real, mode: False)
    conversions.clear()
    torch._dynamo.reset()
    out, graphs = _compile(model, x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=1e-5, atol=1e-5)
    assert len(conversions) == dynamo_conversions + 2 + len(list(model.parameters()))


def test_a_fake_describes_its_tensor_only_with_the_same_metadata():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from verifuse.aten_trace import _describes

    mode = FakeTensorMode()
    real = torch.randn(4, 6)
    fake = mode.from_tensor(real)
    assert _describes(fake, real, mode)
    assert not _describes(fake, real.t().contiguous().t(), mode)  # other strides
    assert not _describes(fake, real.double(), mode)
    assert not _describes(fake, real[1:].contiguous(), mode)
    assert not _describes(fake, real.requires_grad_(), mode)
    assert not _describes(fake, torch.randn(4, 6), FakeTensorMode())  # another mode's fake
    assert not _describes(real, real, mode)


class _MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x * 2


def test_an_input_mutation_is_replayed_like_eager():
    """A written input is traced once too (a static KV cache's graphs took AOT's two traces): its
    new value is the graph's last output, copied back after each call as AOT's wrapper does."""
    x, x_eager = torch.ones(4, 8), torch.ones(4, 8)
    out, graphs = _compile(_MutatesInput(), x)
    expected = _MutatesInput()(x_eager)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, x_eager)  # the caller's tensor was updated, as in eager
    assert graphs[0].aten_trace == "one trace"


class _WritesACacheRow(torch.nn.Module):
    """A static KV cache's update: a row of the caller's buffer written, then the buffer read."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, cache, x, pos):
        cache.index_copy_(0, pos, self.proj(x))
        return cache.sum(0) * 2


def test_a_written_cache_matches_eager_step_after_step():
    torch.manual_seed(0)
    model = _WritesACacheRow().eval()
    cache, cache_eager = torch.zeros(6, 8), torch.zeros(6, 8)
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    with report.collect() as graphs, torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 8), torch.tensor([step])
            torch.testing.assert_close(compiled(cache, x, pos), model(cache_eager, x, pos))
            torch.testing.assert_close(cache, cache_eager)
    assert [g.aten_trace for g in graphs] == ["one trace"], graphs


def test_a_written_input_the_graph_also_returns():
    """Dynamo returns an input the graph updated in place (a step counter, as HF's static cache
    layers keep): the same tensor comes back, updated, and the graph computes it once."""

    class Counts(torch.nn.Module):
        def forward(self, counter, x):
            counter.add_(16)
            return x * 2, counter

    model = Counts()
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    counter, counter_eager = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    with report.collect() as graphs, torch.no_grad():
        for _ in range(3):
            x = torch.randn(4)
            (y, c), (y_eager, c_eager) = compiled(counter, x), model(counter_eager, x)
            torch.testing.assert_close(y, y_eager)
            torch.testing.assert_close(c, c_eager)
            torch.testing.assert_close(counter, counter_eager)
            assert c.data_ptr() == counter.data_ptr()  # the caller's tensor, as eager returns it
    assert [g.aten_trace for g in graphs] == ["one trace"], graphs


def test_a_written_input_that_shares_memory_at_run_time_runs_like_eager():
    """The trace saw two separate tensors; called with views of one buffer (Dynamo guards the
    objects, not their memory), the written one is copied back wrongly unless the call notices:
    it runs Dynamo's graph eagerly, which writes as eager."""

    class WritesAReadsB(torch.nn.Module):
        def forward(self, a, b):
            a.add_(1.0)
            return b * 2

    model = WritesAReadsB()
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    with torch.no_grad():
        a, b = torch.zeros(4), torch.ones(4)
        torch.testing.assert_close(compiled(a, b), b * 2)
        torch.testing.assert_close(a, torch.ones(4))
        base, base_eager = torch.zeros(4), torch.zeros(4)
        got = compiled(base, base)  # b is a: eager reads the written value
        want = model(base_eager, base_eager)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(base, base_eager)


def test_an_input_written_through_a_view_of_another_goes_through_aot():
    class WritesAReadsB(torch.nn.Module):
        def forward(self, a, b):
            a.add_(1.0)
            return b * 2

    base = torch.zeros(8)
    a, b = base[:4], base[4:]
    out, graphs = _compile(WritesAReadsB(), a, b)
    torch.testing.assert_close(out, torch.zeros(4))
    torch.testing.assert_close(base[:4], torch.ones(4))
    assert graphs[0].aten_trace.startswith("aot_autograd (the graph writes input 0, which shares memory"), graphs


def test_a_metadata_write_matches_eager():
    """(Dynamo replays x.t_() on the caller's tensor itself; a graph that still records a
    metadata write goes through AOT, whose wrapper replays it.)"""

    class Transposes(torch.nn.Module):
        def forward(self, x):
            x.t_()
            return x + 1

    x, x_eager = torch.ones(2, 3), torch.ones(2, 3)
    out, graphs = _compile(Transposes(), x)
    torch.testing.assert_close(out, Transposes()(x_eager))
    assert x.shape == x_eager.shape and x.stride() == x_eager.stride()


class _ReturnsInputView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x), x.view(-1)


def test_an_output_aliasing_an_input_keeps_eager_aliasing():
    torch.manual_seed(0)
    model = _ReturnsInputView().eval()
    x = torch.randn(4, 8)
    (y, flat), graphs = _compile(model, x)
    torch.testing.assert_close(y, model(x)[0])
    assert flat.data_ptr() == x.data_ptr()  # a view of the caller's tensor, as eager returns
    assert graphs[0].aten_trace == "aot_autograd (an output is a view of a graph input)"


def test_symbolic_sizes_go_through_aot():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU()).eval()
    x = torch.randn(3, 5, 8)
    out, graphs = _compile(model, x, dynamic=True)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert graphs[0].aten_trace.startswith("aot_autograd (")
    assert "symbolic" in graphs[0].aten_trace


def test_new_weights_after_a_one_trace_compile_are_used():
    """The plan is called with Dynamo's arguments directly: a load_state_dict after the compile
    must still reach it (the weight guard rebuilds the plan)."""
    model = _Block().eval()
    x, mask = _inputs()
    compiled = torch.compile(model, backend="verifuse", options={"strict": True})
    with torch.no_grad():
        compiled(x, mask)
        for p in model.parameters():
            p.mul_(0.5)
        torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-5, atol=1e-5)


def _both_traces(model, *args):
    """The ATen graphs of one Dynamo graph from the one-trace path and from aot_autograd."""
    from torch._dynamo.backends.common import aot_autograd
    from verifuse.aten_trace import trace_inference_graph
    from verifuse.backend import decomposition_table

    graphs = {}

    def backend(gm, example_inputs):
        def keep(aot_gm, _inputs):
            graphs["aot"] = aot_gm
            return aot_gm
        compiled = aot_autograd(fw_compiler=keep, inference_compiler=keep, decompositions=decomposition_table(),
                                keep_inference_input_mutations=False)(gm, example_inputs)
        graphs["one"] = trace_inference_graph(gm, example_inputs, decomposition_table()).graph
        return compiled

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*args)
    return graphs["one"], graphs["aot"]


def _ops(gm) -> dict:
    from collections import Counter

    # AOT's functionalization turns an identity (eval dropout) into a clone, which the plan drops.
    return Counter(str(n.target) for n in gm.graph.nodes
                   if n.op == "call_function" and n.target is not torch.ops.aten.clone.default)


class _ChannelsLastMlp(torch.nn.Module):
    """ConvNeXt's block: a linear over the channels of a permuted 4-D conv output."""

    def __init__(self):
        super().__init__()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 32)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = torch.nn.functional.layer_norm(y, (8,))
        y = self.drop(self.fc(y))
        y += 1.0
        return y


@pytest.mark.parametrize("make", [lambda: (_Block().eval(), _inputs()),
                                  lambda: (_ChannelsLastMlp().eval(), (torch.randn(2, 8, 6, 6),))])
def test_the_one_trace_has_aots_operators(make):
    """Same decomposition, same functionalization: the operators AOT's graph has, no more and no
    fewer (a linear over a 4-D input is one addmm in both, not matmul + add)."""
    model, args = make()
    one, aot = _both_traces(model, *args)
    assert _ops(one) == _ops(aot)
    assert "aten.addmm.default" in _ops(one)
