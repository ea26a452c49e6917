"""Shape guards under dynamic shapes: which of the plan's shape assumptions (derived in C++ from the
planned graph, backend/src/shape_guards) Dynamo's guards entail (Python hands them over once,
verifuse.guards), the guards verifuse adds for the rest and checks in C++ on every call, the
exported shape program (re-checked with python z3, an independent solver), and compile counts for
batch 1..16 under plain ``dynamic=True`` (verifuse.dynamic_tracing: no 0/1 specialization, no
guards from ATen's convolution heuristics, only while a frame is traced for verifuse).
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn

import verifuse
from verifuse import report as _report
from verifuse import dynamic_tracing
from verifuse.guards import ShapeGuardError, to_term

z3 = pytest.importorskip("z3")

try:
    from verifuse import _C

    HAVE_ENGINE = hasattr(_C, "analyze_shapes")
except ImportError:  # pragma: no cover - the extension is part of the build
    HAVE_ENGINE = False
pytestmark = pytest.mark.skipif(not HAVE_ENGINE, reason="verifuse._C.analyze_shapes is not built")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    verifuse.reset_stats()
    yield
    torch._dynamo.reset()


class TinyEncoder(nn.Module):
    """Post-norm transformer encoder layer from explicit Linear / LayerNorm / softmax matmuls
    (nn.TransformerEncoderLayer takes a fused fast path in eval + no_grad)."""

    def __init__(self, hidden: int = 32, heads: int = 4, ffn: int = 64):
        super().__init__()
        self.heads, self.dh = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ffn)
        self.ff2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.dh ** 0.5, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ff2(torch.relu(self.ff1(x))))


def small_resnet() -> nn.Module:
    from verifuse.models import SmallResNet, randomize_batchnorm

    torch.manual_seed(0)
    return randomize_batchnorm(SmallResNet(width=8)).eval()


def shape_entries(graphs, kind: str) -> list[dict]:
    return [e for g in graphs for e in g.shape_guards if e["type"] == kind]


# --------------------------------------------------------------------------------------------
# the one translator: sympy -> the C++ term language
# --------------------------------------------------------------------------------------------

def test_translated_terms_agree_with_python_and_z3() -> None:
    """sympy -> _C.SymExpr (to_term) keeps Python's semantics: the C++ evaluation (what the per-call
    guard check computes), the Python text (what the report shows) and the SMT-LIB text (what the
    engine and the exported program use, read here by z3) all give sympy's value."""
    import sympy
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, Min, PythonMod

    a, b = sympy.Symbol("s0", integer=True), sympy.Symbol("s1", integer=True)
    names = {a: "x_size0", b: "x_size1"}
    exprs = [FloorDiv(a - 1, 2) + 1, PythonMod(a, 3), FloorDiv(a, b), PythonMod(a, b), Max(a, 3 * b), Min(a, b - 4),
             a * b - 2 * a ** 2 + 7, CeilDiv(a, 4)]
    x0, x1 = z3.Ints("x_size0 x_size1")
    for e in exprs:
        term = to_term(e, names)
        smt = term.smt()
        parsed = z3.parse_smt2_string(f"(declare-const x_size0 Int)(declare-const x_size1 Int)(assert (= 0 {smt}))")[0]
        for va, vb in itertools.product([-7, -1, 0, 1, 2, 5, 13], [-3, -1, 1, 2, 4]):
            want = int(e.subs({a: va, b: vb}))
            assert term.evaluate({"x_size0": va, "x_size1": vb}) == want, (e, va, vb)
            assert eval(str(term), {"max": max, "min": min}, {"x_size0": va, "x_size1": vb}) == want  # noqa: S307
            got = z3.simplify(z3.substitute(parsed.arg(1), (x0, z3.IntVal(va)), (x1, z3.IntVal(vb))))
            assert got.as_long() == want, (e, va, vb, smt)
    cond = to_term(sympy.And(sympy.Ge(a, 5), sympy.Ne(PythonMod(a, b), 0)), names)
    assert cond.is_condition and str(cond) == "((x_size0 >= 5) and ((x_size0 % x_size1) != 0))"
    assert cond.evaluate({"x_size0": 7, "x_size1": 3}) is True


# --------------------------------------------------------------------------------------------
# end to end
# --------------------------------------------------------------------------------------------

def test_dynamo_guards_entail_the_window_assumptions() -> None:
    """Dynamo's guards (the convolution and pooling meta checks) entail the plan's window
    assumptions (kernel 5 without padding, pooling, dilated conv); traced size-obliviously the
    batch may be 0 as far as they go, so ``size0 >= 1`` is the one guard verifuse adds."""
    m = nn.Sequential(nn.Conv2d(3, 4, 5), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(4, 4, 3, dilation=2)).eval()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    with _report.collect() as graphs, torch.no_grad():
        for shape in [(2, 3, 20, 20), (3, 3, 21, 25), (5, 3, 30, 19)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-4)
    assumptions = shape_entries(graphs, "assumption")
    kinds = {a["kind"] for a in assumptions}
    assert {"convolution window fits", "pooling window fits", "positive size"} <= kinds
    not_entailed = {a["text"] for a in assumptions if not a["entailed"]}
    assert not_entailed == {"args_0_size0 >= 1"}, not_entailed
    assert {g["text"] for g in shape_entries(graphs, "added_guard")} == {"args_0_size0 >= 1"}
    assert shape_entries(graphs, "dynamo_guard")


def test_resnet_one_graph_for_batch_1_to_16_with_added_guards() -> None:
    m = small_resnet()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    with _report.collect() as graphs, torch.no_grad():
        for b in range(1, 17):
            x = torch.randn(b, 3, 32, 32)
            y = compiled(x)
            torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-4)
        assert verifuse.stats()["graphs_compiled"] == 1
        # Traced size-obliviously, a size may be 0 as far as Dynamo's guards go: verifuse adds
        # guards for the sizes its plan assumes positive and runs such inputs eagerly.
        added = [g["text"] for g in shape_entries(graphs, "added_guard") if g["checked_at_runtime"]]
        assert "x_size0 >= 1" in added and "x_size2 >= 1" in added, added
        x0 = torch.randn(0, 3, 32, 32)
        with pytest.warns(UserWarning, match="shape guard failed"):
            y0 = compiled(x0)
        assert y0.shape == (0, 10)
    assert verifuse.stats()["shape_guard_fallbacks"] == 1
    assert verifuse.stats()["graphs_compiled"] == 1
    report = _report.Report(list(graphs), 0.0)
    d = report.to_dict()
    assert any(e["type"] == "added_guard" for e in d["shape_guards"])
    check_program_with_z3(report.shape_program_smt2(), [e for e in graphs[-1].shape_guards if e["type"] == "assumption"])


def test_strict_mode_raises_on_a_violated_added_guard() -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()).eval()
    compiled = torch.compile(m, backend="verifuse", dynamic=True, options={"strict": True})
    with torch.no_grad():
        compiled(torch.randn(2, 3, 8, 8))
        with pytest.raises(ShapeGuardError, match="shape guard failed"):
            compiled(torch.randn(0, 3, 8, 8))


def test_encoder_one_graph_for_batch_and_sequence() -> None:
    torch.manual_seed(0)
    m = TinyEncoder().eval()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    shapes = [(b, s) for b in (1, 2, 3, 8, 16) for s in (16, 17, 64, 127, 128)]
    with _report.collect() as graphs, torch.no_grad():
        for b, s in shapes:
            x = torch.randn(b, s, 32)
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-4)
    assert verifuse.stats()["graphs_compiled"] == 1
    assumptions = shape_entries(graphs, "assumption")
    assert any(a["kind"] == "view keeps element count" for a in assumptions)
    assert any(a["entailed"] for a in assumptions)
    check_program_with_z3(graphs[-1].shape_program_smt2,
                          [e for e in graphs[-1].shape_guards if e["type"] == "assumption"])


def test_size_oblivious_tracing_is_what_gives_one_graph(monkeypatch) -> None:
    """Switched off, Dynamo's default tracing specializes batch 1 and recompiles for batch 2."""
    monkeypatch.setenv("VERIFUSE_SIZE_OBLIVIOUS_TRACING", "0")
    m = small_resnet()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    with torch.no_grad():
        for b in (1, 2):
            compiled(torch.randn(b, 3, 32, 32))
    assert verifuse.stats()["graphs_compiled"] == 2


def test_tracing_settings_apply_only_to_verifuse_compiles() -> None:
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.callback import callback_handler
    from torch._dynamo.testing import CompileCounter

    m = small_resnet()
    with torch.no_grad():
        torch.compile(m, backend="verifuse", dynamic=True)(torch.randn(1, 3, 32, 32))
        assert not dynamic_tracing.active() and fx_config.backed_size_oblivious is False
        counter = CompileCounter()
        other = torch.compile(m, backend=counter, dynamic=True)
        for b in (1, 2, 16):
            other(torch.randn(b, 3, 32, 32))
    # Another backend keeps Dynamo's defaults: batch 1 specialized, then ATen's conv heuristics.
    assert counter.frame_count == 3
    torch._dynamo.reset()  # clears every compile callback; verifuse's come back
    assert dynamic_tracing._on_compile_start in callback_handler.start_callbacks
    assert dynamic_tracing._on_compile_end in callback_handler.end_callbacks


def test_channels_last_and_strided_inputs_under_dynamic_shapes() -> None:
    """Inputs that are not plainly contiguous take Dynamo's own fake convolution (the output
    memory format depends on ATen's kernel choice there); results still match eager."""
    m = small_resnet()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    with torch.no_grad():
        for b in (1, 3, 16):
            x = torch.randn(b, 3, 32, 32).to(memory_format=torch.channels_last)
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-4)
            x = torch.randn(b, 3, 32, 64)[..., ::2]
            torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-4)


def test_explain_lists_dynamo_guards_assumptions_and_added_guards() -> None:
    report = verifuse.explain(small_resnet(), torch.randn(1, 3, 32, 32), dynamic=True)
    text = str(report)
    assert "shape guards, graph" in text
    assert "    dynamo:   x_size1 == 3" in text  # channels are fixed by the first convolution
    assert "    assumes:  x_size0 >= 1  [positive size; NOT entailed" in text
    assert "    added:    x_size0 >= 1  [checked on every call]" in text
    assert "[implied by the other added guards]" in text
    assert report.shape_program_smt2().startswith("; verifuse shape program")
    torch._dynamo.reset()  # else automatic dynamic shapes remembers the batch changed
    assert "shape guards" not in str(verifuse.explain(small_resnet(), torch.randn(2, 3, 32, 32)))


def test_static_shapes_skip_the_analysis() -> None:
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    compiled = torch.compile(m, backend="verifuse", dynamic=False)
    with _report.collect() as graphs, torch.no_grad():
        compiled(torch.randn(1, 3, 8, 8))
    assert graphs and all(not g.shape_guards and not g.shape_program_smt2 for g in graphs)
    assert _report.Report(list(graphs), 0.0).shape_program_smt2() == ""


# --------------------------------------------------------------------------------------------
# independent check of the exported program
# --------------------------------------------------------------------------------------------

def check_program_with_z3(program: str, assumptions: list[dict]) -> None:
    """The shape program parses in z3 and in verifuse's engine; every assumption reported entailed
    is implied by Dynamo's guards according to z3, every one reported not entailed is not."""
    from verifuse import shapes

    assert program.startswith("; verifuse shape program")
    rep = shapes.analyze(program, redundant=True)
    assert rep["verdict"] == "sat"
    lines = program.splitlines()
    decls = "\n".join(ln for ln in lines if ln.startswith(("(declare-const", "(define-fun guard_")))
    guards = [ln.split()[1] for ln in lines if ln.startswith("(define-fun guard_")]
    written = [ln for ln in lines if ln.startswith("(define-fun assume_")]
    assert written
    for line in written:
        name = line.split()[1]
        a = assumptions[int(name.removeprefix("assume_"))]  # assume_<i> is the i-th assumption
        s = z3.Solver()
        s.set("timeout", 10000)
        s.add(z3.parse_smt2_string(decls + "\n" + line + "\n" + "".join(f"(assert {g})" for g in guards)
                                   + f"(assert (not {name}))"))
        r = s.check()
        if a["entailed"]:
            assert r == z3.unsat, (a, s.model() if r == z3.sat else r)
        else:
            assert r == z3.sat, (a, r)
