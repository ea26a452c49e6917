"""Tests of the generation benchmark (bench/verifuse_bench/generation.py, issue 42): the token
comparator, a whole run of the tiny model (eager + verifuse, + llama.cpp where installed) and the
GGUF writer's round trip through llama.cpp. No timing is asserted on.

transformers is a bench dependency (``make bench-deps``) and llama-cpp-python / gguf come from
``make bench-llm-deps``; the cases that need them skip with the reason when they are missing.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench_source import use_source_tree_bench  # noqa: E402

use_source_tree_bench()

from verifuse_bench import generation, gguf_export  # noqa: E402

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
HAS_LLAMA_CPP = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "gguf"))
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed (make bench-deps)")
needs_llama_cpp = pytest.mark.skipif(not HAS_LLAMA_CPP,
                                     reason="llama-cpp-python or gguf not installed (make bench-llm-deps)")


def test_first_difference_finds_the_earliest_differing_token():
    reference = [[5, 6, 7, 8], [1, 2, 3, 4]]
    assert generation.first_difference(reference, [[5, 6, 7, 8], [1, 2, 3, 4]]) is None
    assert generation.first_difference(reference, [[5, 6, 9, 8], [1, 2, 3, 4]]) == {"row": 0, "position": 2}
    # the earliest position over all rows wins, whichever row it is in
    assert generation.first_difference(reference, [[5, 6, 9, 8], [1, 0, 3, 4]]) == {"row": 1, "position": 1}
    # a shorter row, or a missing one, differs where it ends
    assert generation.first_difference(reference, [[5, 6, 7], [1, 2, 3, 4]]) == {"row": 0, "position": 3}
    assert generation.first_difference(reference, [[5, 6, 7, 8]]) == {"row": 1, "position": 0}


def test_token_verdict_flags_a_changed_token_with_the_reference_margin():
    eager = {"status": "ok", "tokens": [[5, 6, 7, 8]], "argmax_margin": {"per_step": [0.5, 0.4, 0.01, 0.3]}}
    same = {"status": "ok", "tokens": [[5, 6, 7, 8]]}
    changed = {"status": "ok", "tokens": [[5, 6, 9, 8]]}
    generation.token_verdict(same, eager, "eager float32 static cache")
    generation.token_verdict(changed, eager, "eager float32 static cache")
    assert same["tokens_equal"] is True and same["first_diff"] is None
    assert changed["tokens_equal"] is False
    assert changed["first_diff"] == {"row": 0, "position": 2}
    assert changed["reference_margin_at_first_diff"] == 0.01
    missing = {"status": "ok", "tokens": [[5, 6, 7, 8]]}
    generation.token_verdict(missing, {"status": "failed"}, "eager float32 static cache")
    assert missing["tokens_equal"] is None


def test_bandwidth_floor_counts_weights_and_the_mean_kv_context():
    config = generation.MODELS["small"].config  # 4 layers, 2 KV heads of 64
    # step k of N attends over prompt + k positions: mean prompt + N/2 = 128 + 32
    kv = generation.kv_bytes_per_step(config, batch=2, prompt=128, new_tokens=64, element_bytes=2)
    assert kv == 2 * 4 * 2 * 2 * 64 * 160 * 2
    floor = generation.floor_share(weight_bytes=1e9, kv_bytes=0, bandwidth_gb_s=10, step_ms=200)
    assert floor["floor_ms_per_step"] == 100 and floor["share_of_floor_pct"] == 50


@pytest.mark.slow
@needs_transformers
def test_tiny_run_reports_timings_memory_floor_and_equal_tokens(tmp_path, monkeypatch):
    monkeypatch.setattr(generation, "BANDWIDTH_FLOATS", 1 << 22)  # the report's structure, not the number
    backends = ["eager", "verifuse"] + (["llamacpp"] if HAS_LLAMA_CPP else [])
    opts = generation.GenOptions(models=["tiny"], backends=backends, caches=["static"], prompts=[16], new_tokens=4,
                                 repeats=1, warmup=0, llamacpp_quants=["f32"], job_timeout_s=300)
    json_path = tmp_path / "generation.json"
    report = generation.Run(opts, json_path, argv=[], log=lambda line: None).run()

    assert json.loads(json_path.read_text())["schema"] == generation.SCHEMA
    assert report["environment"]["tier"]["tier"]
    assert report["bandwidth"]["1"]["used_gb_s"] > 0
    assert report["models"]["tiny"]["status"] == "ok", report["models"]["tiny"]
    rows = {row["backend"]: row for row in report["results"]}
    assert set(rows) == set(backends)
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row.get("reason"), row.get("log_tail"))
        assert len(row["tokens"][0]) == 4 and row["tokens_stable"]
        assert row["ttft_ms"]["median"] > 0 and row["decode_tok_s"]["median"] > 0
        assert row["peak_rss_mb"] > 0 and row["floor"]["share_of_floor_pct"] > 0
        assert len(row["load_avg_before"]) == len(row["load_avg_after"]) == 3
    assert rows["verifuse"]["tokens_equal"] is True, rows["verifuse"].get("first_diff")
    assert rows["verifuse"]["tokens_reference"] == "eager float32 static cache"
    if HAS_LLAMA_CPP:
        assert rows["llamacpp"]["tokens_equal"] is True, rows["llamacpp"].get("first_diff")
        assert rows["llamacpp"]["first_step_logits_vs_eager"]["exact_context"]["ok"]
    # the comparator used on these very rows notices one changed token
    changed = {"status": "ok", "tokens": [rows["verifuse"]["tokens"][0][:3] + [rows["verifuse"]["tokens"][0][3] + 1]]}
    generation.token_verdict(changed, rows["eager"], "eager")
    assert changed["tokens_equal"] is False and changed["first_diff"] == {"row": 0, "position": 3}
    markdown = json_path.with_suffix(".md").read_text()
    assert "| tiny | float32 | static | 1 | 16 | verifuse |" in markdown and "TTFT ms" in markdown


def _tiny_weight_only_run(tmp_path, monkeypatch, precision):
    """The tiny model in ``precision`` on eager and verifuse: its rows by backend (checked to be ok,
    verifuse's tokens equal to eager's of the same precision) and its prepared-model facts."""
    pytest.importorskip("torchao")
    monkeypatch.setattr(generation, "BANDWIDTH_FLOATS", 1 << 22)
    opts = generation.GenOptions(models=["tiny"], backends=["eager", "verifuse"], caches=["static"], prompts=[16],
                                 new_tokens=4, repeats=1, warmup=0, dtypes=[precision], job_timeout_s=300)
    report = generation.Run(opts, tmp_path / "generation.json", argv=[], log=lambda line: None).run()
    rows = {row["backend"]: row for row in report["results"]}
    assert all(row["status"] == "ok" for row in rows.values()), rows
    assert rows["verifuse"]["tokens_equal"] is True, rows["verifuse"].get("first_diff")
    assert rows["verifuse"]["tokens_reference"] == f"eager {precision} static cache"
    return rows, report["models"]["tiny"]


@pytest.mark.slow
@needs_transformers
def test_int8_weight_only_precision_runs_torchao_weights_and_counts_one_byte(tmp_path, monkeypatch):
    rows, prepared = _tiny_weight_only_run(tmp_path, monkeypatch, "int8-weight-only")
    int8 = {"Int8Tensor int8 block (1, 64)": 13, "Int8Tensor int8 block (1, 128)": 2}  # per row; down_proj's K is 128
    assert rows["eager"]["linear_weights"] == rows["verifuse"]["linear_weights"] == int8
    linear, read = prepared["linear_weight_params"], prepared["weight_params_read_per_token"]
    assert linear == TINY_LINEAR_WEIGHTS and read - linear == TINY_NORM_WEIGHTS
    assert generation.weight_bytes(prepared, "int8-weight-only") == linear * 1 + (read - linear) * 4


# the tiny model's nn.Linear weights (2 layers of q 64x64, k and v 32x64, o 64x64, gate and up 128x64,
# down 64x128, and the LM head 1000x64, tied to the embedding) and its RMSNorm weights (2 per layer + 1)
TINY_LINEAR_WEIGHTS = 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64) + 1000 * 64
TINY_NORM_WEIGHTS = 5 * 64


@pytest.mark.slow
@needs_transformers
def test_int4_weight_only_precision_runs_torchao_int4_groups_of_32(tmp_path, monkeypatch):
    rows, prepared = _tiny_weight_only_run(tmp_path, monkeypatch, "int4-weight-only")
    # every linear (the LM head included) got int4 in groups of 32, in both processes
    int4 = {"IntxUnpackedToInt8Tensor int4 block (1, 32)": 15}
    assert rows["eager"]["linear_weights"] == rows["verifuse"]["linear_weights"] == int4
    assert prepared["linear_weight_params"] == TINY_LINEAR_WEIGHTS
    # a packed nibble, a float32 scale and an int8 zero point per 32; norms stay float32
    expected = TINY_LINEAR_WEIGHTS * 0.65625 + TINY_NORM_WEIGHTS * 4
    assert generation.weight_bytes(prepared, "int4-weight-only") == expected
    assert rows["verifuse"]["floor"]["weight_bytes"] == int(expected)


@needs_transformers
def test_quantize_weights_int4_is_symmetric_groups_of_32_with_an_untied_float32_embedding():
    pytest.importorskip("torchao")
    import torch
    from torchao.quantization import IntxUnpackedToInt8Tensor

    model = generation.build_model(generation.MODELS["tiny"], seed=0)
    float_head = model.lm_head.weight.detach().clone()
    generation.quantize_weights(model, "int4-weight-only")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 15 and model.lm_head in linears
    for linear in linears:
        weight = linear.weight
        assert isinstance(weight, IntxUnpackedToInt8Tensor)
        assert weight.target_dtype == torch.int4 and tuple(weight.block_size) == (1, 32)
        assert weight.qdata.min() >= -8 and weight.qdata.max() <= 7
        assert bool((weight.zero_point == 0).all())  # symmetric
        assert weight.scale.dtype == torch.float32 and weight.scale.shape == (weight.shape[0], weight.shape[1] // 32)
    embedding = model.get_input_embeddings().weight
    assert type(embedding) is torch.nn.Parameter and embedding.dtype == torch.float32
    assert torch.equal(embedding, float_head)  # the tied table is left as it was
    # dequantized, the LM head is within half a quantization step of the float32 one
    step = model.lm_head.weight.scale.repeat_interleave(32, dim=1)
    assert bool(((model.lm_head.weight.dequantize() - float_head).abs() <= 0.5 * step + 1e-6).all())


def test_permute_rope_rows_makes_rotate_half_pairs_adjacent():
    import numpy as np

    # one head of 8 rows: rotate_half pairs row i with row i + 4; llama.cpp pairs rows 2i, 2i + 1
    rows = np.arange(16, dtype=np.float32).reshape(16, 1)
    permuted = gguf_export.permute_rope_rows(rows, n_heads=2)[:, 0].tolist()
    assert permuted == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


TINY_QWEN2 = generation.GenModel(
    "tiny-qwen2", "qwen2", "Qwen2 d64 x 2 layers (q/k/v biases, rope halves layout)",
    dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         vocab_size=1000, tie_word_embeddings=True, max_position_embeddings=256), initializer_range=0.2)


@needs_transformers
@needs_llama_cpp
@pytest.mark.parametrize("spec", [generation.MODELS["tiny"], TINY_QWEN2], ids=lambda spec: spec.name)
def test_gguf_round_trip_gives_eager_logits(spec, tmp_path):
    """The GGUF file holds the same model: llama.cpp's first-step logits (float32 weights, float32 KV
    cache, no flash attention) equal eager float32's to far better than 1e-3 of their scale. A wrong
    q/k layout is off by more than the logits' scale (measured: 1.5x)."""
    import llama_cpp
    import numpy as np
    import torch

    model = build_with_random_biases(spec)
    path = gguf_export.write_gguf(model, tmp_path / "model.gguf", spec.name)
    ids = generation.prompt_ids(model.config.vocab_size, 1, 24, seed=0)
    with torch.no_grad():
        eager = model(ids).logits[0, -1].numpy()
    llm = llama_cpp.Llama(str(path), n_ctx=32, n_threads=1, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                          type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    llm.eval(ids[0].tolist())
    ours = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    assert np.abs(ours - eager).max() <= 1e-4 * np.abs(eager).max()
    summary = gguf_export.gguf_tensor_summary(path)
    assert summary["lm_head_type"] == "F32"  # tied: the embedding table is the LM head and is read
    assert summary["weight_bytes_read_per_token"] == sum(p.numel() for p in model.parameters()) * 4


def build_with_random_biases(spec: generation.GenModel):
    """HF initializes biases to zero, which would hide a bias left out of the GGUF file."""
    import torch

    model = generation.build_model(spec, seed=0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.normal_(0, 0.5)
    return model
