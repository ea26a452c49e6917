"""The attention engine (issue 16): SDPA nodes (attention-to-sdpa's result, or SDPA as transformers
call it) run on verifuse's oneDNN attention kernel or ATen's fused CPU kernel, chosen per partition.

Under strict mode every case must match eager within float32 tolerances AND, with
VERIFUSE_ATTENTION=onednn (the knob that forces attention partitions onto one engine without
timing), every SDPA node must have run on oneDNN (torch.profiler events
"aten::_scaled_dot_product_flash_attention_for_cpu@onednn"), so these tests fail when the engine
is switched off. The untimed heuristic (small attention stays on ATen) and the tuner (both engines
timed on the real shape) are checked too.
"""
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import profile

import verifuse
from verifuse import _C

SDPA = "aten::_scaled_dot_product_flash_attention_for_cpu"
TOL = dict(rtol=1e-5, atol=1e-5)


def _engine_runs(compiled, args, kwargs=None):
    """(outputs, Counter of the engines SDPA nodes ran on) for one call. The oneDNN engine hands
    inputs its kernel does not take to ATen's op, which the profiler then records by its own name:
    counted as "aten inside onednn"."""
    with profile() as prof:
        out = compiled(*args, **(kwargs or {}))
    runs = Counter(e.name.split("@")[1] for e in prof.events() if e.name.startswith(SDPA + "@"))
    inner = sum(1 for e in prof.events() if e.name == SDPA)
    if inner and runs.get("onednn"):
        runs["aten inside onednn"] = inner
    return out, runs


def _check(model, args, engine="onednn", expect_runs=1, monkeypatch=None, options=None):
    monkeypatch.setenv("VERIFUSE_ATTENTION", engine)
    with torch.no_grad():
        expected = model(*args)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True, **(options or {})})
        compiled(*args)
        got, runs = _engine_runs(compiled, args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, **TOL)
        assert g.stride() == e.stride(), (g.stride(), e.stride())
    assert runs == Counter({engine: expect_runs}), runs
    return got


class Projected(nn.Module):
    """q/k/v projections viewed to heads (permuted views of [B,S,H,D]) into F.sdpa, as transformers do."""

    def __init__(self, d=32, heads=4, kv_heads=None, causal=False):
        super().__init__()
        self.h, self.kvh, self.causal = heads, kv_heads or heads, causal
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d // heads * self.kvh)

    def forward(self, x, y, mask=None):
        b, s, d = x.shape
        kv = y.shape[1]
        q = self.q(x).view(b, s, self.h, d // self.h).transpose(1, 2)
        k, v = self.kv(y).view(b, kv, 2 * self.kvh, d // self.h).transpose(1, 2).chunk(2, dim=1)
        if self.kvh != self.h:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


@pytest.mark.parametrize("mask_shape", [None, "b1sk", "b11k", "sk", "bhsk"])
def test_projected_attention_with_masks(mask_shape, monkeypatch):
    torch.manual_seed(0)
    b, s, kv, h = 2, 13, 21, 4  # cross attention: KV != S
    x, y = torch.randn(b, s, 32), torch.randn(b, kv, 32)
    shapes = {"b1sk": (b, 1, s, kv), "b11k": (b, 1, 1, kv), "sk": (s, kv), "bhsk": (b, h, s, kv)}
    args = (x, y) if mask_shape is None else (x, y, torch.randn(shapes[mask_shape]))
    _check(Projected().eval(), args, monkeypatch=monkeypatch)


def test_padding_mask_with_the_most_negative_float(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 9, 32)
    mask = torch.zeros(2, 1, 1, 9)
    # The padded key of the second sequence. One only: the executor's NaN/Inf check sums each graph
    # input in float32, and two finfo.min entries overflow it to -inf (the whole call would then
    # run the exact ATen plan; masks transformers build inside the graph are not inputs).
    mask[1, ..., 8] = torch.finfo(torch.float32).min
    _check(Projected().eval(), (x, x, mask), monkeypatch=monkeypatch)


@pytest.mark.parametrize("s,kv", [(11, 11), (7, 15), (15, 7)])
def test_causal(s, kv, monkeypatch):
    torch.manual_seed(0)
    _check(Projected(causal=True).eval(), (torch.randn(2, s, 32), torch.randn(2, kv, 32)), monkeypatch=monkeypatch)


def test_grouped_query_kv_heads(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(1, 10, 32)
    _check(Projected(heads=4, kv_heads=2, causal=True).eval(), (x, x), monkeypatch=monkeypatch)


def test_long_sequence_several_row_blocks(monkeypatch):
    # S = 700 rows at KV 700 (a 2 MiB score tile holds 736 rows: one block) and S = 1100 (two
    # blocks, the second one shorter).
    torch.manual_seed(0)
    for s in (700, 1100):
        x = torch.randn(1, s, 32)
        _check(Projected(heads=2).eval(), (x, x), monkeypatch=monkeypatch)
        torch._dynamo.reset()


class EagerAttention(nn.Module):
    """Attention written out (bmm, scale, mask, softmax): attention-to-sdpa turns it into SDPA."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        # A padding mask as BERT builds it (the rule needs to see that it is float32).
        mask = (keep.to(torch.float32)[:, None, None, :] - 1.0) * 10000.0
        a = torch.matmul(q, k.transpose(-1, -2)) * (d // self.h) ** -0.5 + mask
        return torch.matmul(a.softmax(-1), v).transpose(1, 2).reshape(b, t, d)


def test_eager_attention_rewritten_then_run_on_onednn(monkeypatch):
    torch.manual_seed(0)
    m = EagerAttention().eval()
    x = torch.randn(2, 12, 32)
    keep = torch.ones(2, 12, dtype=torch.bool)
    keep[1, 9:] = False
    _check(m, (x, keep), monkeypatch=monkeypatch)
    report = verifuse.explain(m, x, keep, strict=True)
    # The eager graph has no SDPA: the node that ran on oneDNN is the rule's.
    assert [n["engine"] for g in report.graphs for n in g.nodes if n["op"] == SDPA] == ["onednn"]


class BothOutputs(nn.Module):
    def forward(self, q, k, v, mask):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask,
                                                                          scale=0.3)


def test_logsumexp_when_read(monkeypatch):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 9, 3, 8).transpose(1, 2) for _ in range(3))
    out, lse = _check(BothOutputs().eval(), (q, k, v, torch.randn(2, 1, 9, 9)), monkeypatch=monkeypatch)
    assert lse.shape == (2, 3, 9)


def test_aten_knob_and_heuristic_keep_small_attention_on_aten(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 9, 32)
    _check(Projected().eval(), (x, x), engine="aten", monkeypatch=monkeypatch)
    torch._dynamo.reset()
    # Untimed and unforced: 9 x 9 keys x (8 + 8) per head is below the measured crossover (2^17).
    monkeypatch.delenv("VERIFUSE_ATTENTION")
    m = Projected().eval()
    report = verifuse.explain(m, x, x, strict=True, autotune=False)
    parts = [p for p in report.to_dict()["partitions"] if SDPA in p["ops"]]
    assert [(p["engine"], p["how"]) for p in parts] == [("aten", "heuristic: autotune off")], parts
    # ... and a big enough one (128 x 128 keys x (16 + 16) = 2^19 per head) takes the attention
    # engine where it has its own AVX-512 tiles; below that tier float32 stays on ATen (measured
    # ahead there: Capabilities::attentionOwnTilesF32).
    y = torch.randn(1, 128, 32)
    torch._dynamo.reset()  # a new shape would otherwise recompile with dynamic shapes
    report = verifuse.explain(Projected(heads=2).eval(), y, y, strict=True, autotune=False)
    parts = [p for p in report.to_dict()["partitions"] if SDPA in p["ops"]]
    own_tiles = _C.capabilities()["usable"]["avx512f"]
    assert [p["engine"] for p in parts] == ["onednn" if own_tiles else "aten"], (own_tiles, parts)


def test_tuner_times_both_engines(monkeypatch, tmp_path):
    monkeypatch.delenv("VERIFUSE_ATTENTION", raising=False)
    torch.manual_seed(0)
    m = Projected().eval()
    x = torch.randn(1, 40, 32)
    with torch.no_grad():
        report = verifuse.explain(m, x, x, strict=True, autotune=True, cache_dir=str(tmp_path))
    parts = [p for p in report.to_dict()["partitions"] if SDPA in p["ops"]]
    assert len(parts) == 1 and parts[0]["how"] == "tuned", parts
    assert set(parts[0]["candidates"]) == {"onednn", "aten"}, parts
    best = min(parts[0]["candidates"], key=parts[0]["candidates"].get)
    assert parts[0]["engine"] == best, parts


class RepeatedKv(Projected):
    """Grouped-query attention written as transformers' repeat_kv: the kv heads copied to the
    query's head count (unsqueeze, expand, reshape) before SDPA."""

    def forward(self, x, y, mask=None):
        b, s, d = x.shape
        kv, group = y.shape[1], self.h // self.kvh
        q = self.q(x).view(b, s, self.h, d // self.h).transpose(1, 2)
        k, v = self.kv(y).view(b, kv, 2 * self.kvh, d // self.h).transpose(1, 2).chunk(2, dim=1)

        def repeat(t):
            return t[:, :, None].expand(b, self.kvh, group, kv, d // self.h).reshape(b, self.h, kv, d // self.h)

        return F.scaled_dot_product_attention(q, repeat(k), repeat(v), attn_mask=mask, is_causal=self.causal)


@pytest.mark.parametrize("engine", ["onednn", "aten"])
def test_repeated_kv_heads_are_read_grouped(engine, monkeypatch):
    # sdpa-grouped-kv: SDPA reads the 2 kv heads directly (head h reads kv head h / 2), so the
    # repeat's copy goes; both engines take the grouped key/value.
    torch.manual_seed(0)
    model = RepeatedKv(heads=4, kv_heads=2, causal=True).eval()
    x, y = torch.randn(1, 6, 32), torch.randn(1, 9, 32)
    _check(model, (x, y), engine=engine, monkeypatch=monkeypatch)
    report = verifuse.explain(model, x, y, strict=True)
    graph = report.graphs[0]
    assert graph.rewrites.get("sdpa-grouped-kv") == 1, graph.rewrites
    assert not any(op.startswith("aten::clone") or op.startswith("aten::expand") for op in graph.ops), graph.ops


class ContiguousHeads(nn.Module):
    """Whisper's attention: q, k and v made contiguous per head before SDPA, the output too."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        heads = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2).contiguous()  # noqa: E731
        o = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)))
        return o.transpose(1, 2).contiguous().reshape(b, s, d)


@pytest.mark.parametrize("engine", ["onednn", "aten"])
def test_contiguous_keys_and_values_are_read_in_place(engine, monkeypatch):
    # remove-clone: attention reads k and v by index whatever their strides, so their
    # .contiguous() copies go; q's stays (the output is laid out like q, and the reshape after the
    # output's transpose relies on that), and so does the output's.
    torch.manual_seed(0)
    model = ContiguousHeads().eval()
    x = torch.randn(2, 7, 32)
    _check(model, (x,), engine=engine, monkeypatch=monkeypatch)
    report = verifuse.explain(model, x, strict=True)
    graph = report.graphs[0]
    assert graph.rewrites.get("remove-clone") == 2, graph.rewrites
    assert graph.ops.get("aten::clone") == 2, graph.ops


class PermutedBiasMask(nn.Module):
    """T5's attention mask: a relative-position bias embedded as [q, kv, heads], permuted to heads
    first, masked by where() (whose result keeps the permuted layout) and made contiguous."""

    def __init__(self, s=6, heads=4, contiguous=True):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(s, s, heads))
        self.proj = Projected(heads=heads)
        self.contiguous = contiguous

    def forward(self, x, keep):
        bias = self.bias.permute(2, 0, 1).unsqueeze(0)
        mask = torch.where(keep, bias, torch.finfo(x.dtype).min)
        return self.proj(x, x, mask.contiguous() if self.contiguous else mask)


def test_a_mask_made_contiguous_keeps_its_clone(monkeypatch):
    # remove-clone takes attention's keys and values only: a mask whose keys are not adjacent (here
    # the key stride is the number of heads, as T5's) is gathered per query row in every layer that
    # reads it, and T5's one copy for all its layers costs less.
    torch.manual_seed(0)
    model = PermutedBiasMask().eval()
    x = torch.randn(1, 6, 32)
    keep = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    keep[..., -2:] = False
    _check(model, (x, keep), engine="onednn", monkeypatch=monkeypatch)
    graph = verifuse.explain(model, x, keep, strict=True).graphs[0]
    assert graph.ops.get("aten::clone") == 1, graph.ops
    assert "remove-clone" not in graph.rewrites, graph.rewrites


def test_a_permuted_mask_runs_on_the_engine(monkeypatch):
    # The same mask without the .contiguous(): the engine gathers its rows (before, it refused key
    # strides other than 0 and 1 and the call went to ATen's kernel inside the oneDNN step).
    torch.manual_seed(0)
    model = PermutedBiasMask(contiguous=False).eval()
    x = torch.randn(2, 6, 32)
    keep = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    keep[1, ..., -2:] = False
    _check(model, (x, keep), engine="onednn", monkeypatch=monkeypatch)


transformers = pytest.importorskip("transformers")


def _hf(name):
    t = transformers
    if name == "bert":
        return t.BertModel(t.BertConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                        vocab_size=100, num_hidden_layers=2))
    if name == "gpt2":
        return t.GPT2Model(t.GPT2Config(n_embd=64, n_head=4, vocab_size=100, n_layer=2))
    if name == "llama":
        return t.LlamaModel(t.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=100, num_hidden_layers=2))
    if name == "t5":
        return t.T5EncoderModel(t.T5Config(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=100, num_layers=2))
    if name == "vit":
        return t.ViTModel(t.ViTConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_hidden_layers=2, image_size=32, patch_size=8))
    return t.WhisperModel(t.WhisperConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
                                          encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128,
                                          decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=50)).encoder


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5", "vit", "whisper"])
def test_transformers_models_run_attention_on_onednn(name, monkeypatch):
    monkeypatch.setenv("VERIFUSE_ATTENTION", "onednn")
    torch.manual_seed(0)
    model = _hf(name).eval()
    if name == "vit":
        kwargs = dict(pixel_values=torch.randn(1, 3, 32, 32))
    elif name == "whisper":
        kwargs = dict(input_features=torch.randn(1, 16, 100))
    else:
        ids = torch.randint(0, 100, (2, 12))
        kwargs = dict(input_ids=ids)
        if name in ("bert", "t5"):
            mask = torch.ones(2, 12, dtype=torch.long)
            mask[1, 8:] = 0  # padding in the second sequence
            kwargs["attention_mask"] = mask
    with torch.no_grad():
        expected = model(**kwargs).last_hidden_state
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(**kwargs)
        out, runs = _engine_runs(compiled, (), kwargs)
    torch.testing.assert_close(out.last_hidden_state, expected, rtol=1e-4, atol=1e-4)
    assert runs == Counter({"onednn": 2}), runs  # both layers' attention


def test_dynamic_shapes_stay_on_aten(monkeypatch):
    # The kernel is made per static shape: under dynamic shapes even the forcing knob leaves ATen.
    monkeypatch.setenv("VERIFUSE_ATTENTION", "onednn")
    torch.manual_seed(0)
    m = Projected().eval()
    with torch.no_grad():
        compiled = torch.compile(m, backend="verifuse", dynamic=True, options={"strict": True})
        for s in (5, 9):
            x = torch.randn(2, s, 32)
            out, runs = _engine_runs(compiled, (x, x))
            torch.testing.assert_close(out, m(x, x), **TOL)
            assert runs == Counter({"aten": 1}), runs
