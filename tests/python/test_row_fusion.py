"""Row fusion (issue 16, deliverable 3) end to end: transformer pieces compiled under strict mode
match eager within float32 tolerances AND run as verifuse::rowwise nodes on the row engine (so
these tests fail when the rule is switched off); a near miss (a mean over dim 0) stays on ATen and
explain(verbose=True) names the reason; small transformers models built from config (no
downloads) match eager with their norms/softmaxes/rotary fused.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import verifuse
from verifuse import _C

TOL = dict(rtol=1.3e-6, atol=1e-5)


class RMSNorm(nn.Module):
    """As HF Llama writes it (the float32 upcast is a no-op on float32)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.eps = eps

    def forward(self, h):
        dtype = h.dtype
        h = h.to(torch.float32)
        v = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(v + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaPieces(nn.Module):
    """RMSNorm, a q projection viewed to heads with rotary, silu(gate) * up."""

    def __init__(self, d: int = 32, heads: int = 2):
        super().__init__()
        self.norm = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.heads = heads

    def forward(self, x, cos, sin, gate, up):
        h = self.norm(x)
        b, t, d = h.shape
        q = self.q(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q = q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1)
        return q, F.silu(gate) * up


class BertOutput(nn.Module):
    """dense + dropout + residual, LayerNorm (BERT's SelfOutput), and a norm of x*2 + resid."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.dense = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, resid):
        return self.ln(self.drop(self.dense(x)) + resid), self.ln(x * 2.0 + resid)


class MaskedSoftmax(nn.Module):
    def forward(self, scores, mask):
        return torch.softmax(scores * 0.125 + mask, dim=-1)


class GeluBiasResidual(nn.Module):
    def forward(self, x, b, r):
        return F.gelu(x + b) + r, F.gelu(x, approximate="tanh") * 0.5


class MaskedFill(nn.Module):
    """where with a bool mask inside a chain (a padding mask applied to scores)."""

    def forward(self, x, keep, y):
        return torch.where(keep, x * 2.0, y).sigmoid() + 1.0


class NearMiss(nn.Module):
    def forward(self, x):
        return (x - x.mean(0, keepdim=True)) * 2.0


def _rowwise_runs(compiled, args):
    before = _C.engine_run_counts()
    out = compiled(*args)
    after = _C.engine_run_counts()
    return out, after.get("rowwise", 0) - before.get("rowwise", 0)


def _check(model, args, min_rowwise):
    with torch.no_grad():
        expected = model(*args)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(*args)  # compile (and tune)
        got, rows = _rowwise_runs(compiled, args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, **TOL)
    assert rows >= min_rowwise, f"{rows} rowwise runs, expected >= {min_rowwise}"
    return got


def _report_rowwise(report):
    """(rowwise nodes, the engines of their partitions) from an explain() report's partition table."""
    nodes = [n for g in report.graphs for n in g.nodes if n["op"] == "verifuse::rowwise"]
    parts = [p for p in report.to_dict()["partitions"] if "verifuse::rowwise" in p["ops"]]
    return nodes, {p["engine"] for p in parts}


def test_llama_pieces_fuse_and_match_eager():
    torch.manual_seed(0)
    m = LlamaPieces().eval()
    args = (torch.randn(2, 5, 32), torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 64),
            torch.randn(2, 5, 64))
    _check(m, args, min_rowwise=3)  # RMSNorm, rotary, silu*mul
    report = verifuse.explain(m, *args, strict=True)
    nodes, engines = _report_rowwise(report)
    assert len(nodes) == 3 and engines == {"rowwise"}
    fused = [f for f in report.to_dict()["fusions"] if f["rule"] == "row-fusion"]
    assert len(fused) == 3 and all(f["verdict"] == "Proved" for f in fused)


def test_bert_layer_norm_and_residual():
    torch.manual_seed(0)
    m = BertOutput().eval()
    args = (torch.randn(2, 7, 32), torch.randn(2, 7, 32))
    _check(m, args, min_rowwise=2)
    report = verifuse.explain(m, *args, strict=True)
    d = report.to_dict()
    # The residual add stays the linear's sum post-op; the layer norms are the rowwise nodes.
    assert any(f["rule"] == "residual-add-sum-postop" for f in d["fusions"])
    nodes, engines = _report_rowwise(report)
    assert len(nodes) == 2 and engines == {"rowwise"}


def test_softmax_with_scale_and_mask():
    torch.manual_seed(0)
    args = (torch.randn(2, 3, 6, 9), torch.randn(2, 1, 6, 9))
    _check(MaskedSoftmax(), args, min_rowwise=1)


def test_gelu_bias_residual_chains():
    torch.manual_seed(0)
    args = (torch.randn(4, 24), torch.randn(24), torch.randn(4, 24))
    _check(GeluBiasResidual(), args, min_rowwise=2)


def test_where_with_a_bool_mask():
    torch.manual_seed(0)
    args = (torch.randn(3, 10), torch.rand(3, 10) > 0.5, torch.randn(1, 10))
    _check(MaskedFill(), args, min_rowwise=1)


def test_near_miss_mean_over_dim0_is_not_fused_and_explained():
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    m = NearMiss()
    _check(m, (x,), min_rowwise=1)  # the sub and mul after the mean still fuse
    report = verifuse.explain(m, x, strict=True, verbose=True)
    ops = [n["op"] for g in report.graphs for n in g.nodes]
    assert "aten::mean.dim" in ops
    text = str(report)
    assert "row-fusion" in text and "mean over dim 0, not the last dim" in text, text


transformers = pytest.importorskip("transformers")


def _hf(name):
    t = transformers
    if name == "llama":
        return t.LlamaModel(t.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=100, num_hidden_layers=2))
    if name == "bert":
        return t.BertModel(t.BertConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                        vocab_size=100, num_hidden_layers=2))
    if name == "gpt2":
        return t.GPT2Model(t.GPT2Config(n_embd=64, n_head=4, vocab_size=100, n_layer=2))
    return t.T5EncoderModel(t.T5Config(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=100, num_layers=2))


@pytest.mark.slow
@pytest.mark.parametrize("name,min_rowwise", [("llama", 9), ("bert", 5), ("gpt2", 5), ("t5", 5)])
def test_transformers_models_match_eager_with_rows_fused(name, min_rowwise):
    torch.manual_seed(0)
    model = _hf(name).eval()
    ids = torch.randint(0, 100, (1, 12))
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(input_ids=ids)
        before = _C.engine_run_counts()
        got = compiled(input_ids=ids).last_hidden_state
        rows = _C.engine_run_counts().get("rowwise", 0) - before.get("rowwise", 0)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert rows >= min_rowwise, rows


def test_strided_rows_are_copied_dense_for_the_row_engine():
    """A chain reading rows through a permuted NCHW view (stride H*W along the row) still runs on the
    row engine: the input is copied dense once, instead of the program being interpreted op by op on
    ATen (one aten::mean/sub/... per instruction)."""
    from torch.profiler import profile

    class NormAfterPermute(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(16)

        def forward(self, x):
            return self.ln(x.permute(0, 2, 3, 1)) * 2.0 + 1.0

    torch.manual_seed(0)
    model = NormAfterPermute().eval()
    x = torch.randn(2, 16, 5, 7)
    with torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x)
        with profile() as prof:
            got = compiled(x)
        expected = model(x)
    names = [e.name for e in prof.events()]
    assert "verifuse::rowwise@rowwise" in names, names
    assert not any(n in ("aten::mean", "aten::sub", "aten::rsqrt") for n in names), names
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
