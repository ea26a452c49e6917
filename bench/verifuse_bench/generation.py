"""Generation benchmark (issue 42): Hugging Face ``generate()`` (greedy) on eager, inductor, OpenVINO,
zentorch and verifuse, and llama.cpp on the same random weights.

``PYTHONPATH=bench python -m verifuse_bench.generation --models small --backends eager,verifuse,llamacpp``

The method (bench/README.md, "Generation benchmark", has it in full):

* Models come from a config with random weights (seeded; nothing downloaded). One *prepare*
  process builds each model once, saves it (float32 safetensors) and, for llama.cpp, writes the
  same weights as GGUF and quantizes them (:mod:`verifuse_bench.gguf_export`).
* Every backend runs in a process of its own per configuration (model x dtype x cache x batch x
  prompt x threads), so its peak RSS (``VmHWM``) is its own. The backend compiles
  ``model.forward`` (HF's torch.compile recipe for generation); ``generate()`` is greedy with EOS
  switched off, so every call produces exactly ``--new-tokens`` tokens.
* A logits processor stamps the time each token's logits exist: time to first token = the
  ``generate()`` call to the first stamp (prefill, with generate's own setup); decode = the
  stamps' spacing over the remaining ``N - 1`` steps. llama.cpp runs the same greedy loop over
  ``Llama.eval`` with the same stamps.
* Token equality against eager of the same dtype and cache (llama.cpp: against eager float32),
  and for llama.cpp f32 the first step's logits against eager's.
* Share of the memory-bandwidth floor: the bytes a decode step must read (weights in their stored
  precision, the LM head once, the KV cache at the mean context) over a large-array read
  bandwidth measured in the same run on the same thread count.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "verifuse-bench-generation/1"
HF_BACKENDS: tuple[str, ...] = ("eager", "inductor", "openvino", "zentorch", "verifuse")
ALL_BACKENDS: tuple[str, ...] = (*HF_BACKENDS, "llamacpp")
LLAMACPP_QUANTS: tuple[str, ...] = ("f32", "bf16", "q8_0", "q4_0")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# The precisions --dtype takes: the model's activation dtype and the bytes each weight of a linear
# occupies (the floor's count; every other weight is read in the activation dtype). The weight-only
# ones are the float32 model (float32 activations, KV cache, embedding table and norms) with torchao
# applied to every nn.Linear (quantize_weights):
# * "int8-weight-only": Int8WeightOnlyConfig, s8 weights with a float32 scale per output row: 1 byte
#   (the per-row scale is left out, 4 bytes per row of thousands);
# * "int4-weight-only": IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
#   symmetric, as llama.cpp's Q4_0 (32 weights per block); 0.65625 bytes = the format's ideal bytes:
#   0.5 (a packed nibble) + 4/32 (a float32 scale per group of 32) + 1/32 (an int8 zero point per
#   group, stored although symmetric makes it 0). torchao's IntxUnpackedToInt8Tensor holds each
#   int4 value in an int8 (1 byte), so a kernel that reads that layout as is cannot reach this floor.
PRECISIONS = {"float32": ("float32", 4.0), "bfloat16": ("bfloat16", 2.0), "int8-weight-only": ("float32", 1.0),
              "int4-weight-only": ("float32", 0.5 + 4 / 32 + 1 / 32)}
INT4_GROUP_SIZE = 32
LLAMACPP_KV_BYTES = 2  # llama.cpp's default KV cache type is f16
LOGITS_REL_TOLERANCE = 1e-3  # llama.cpp f32 vs eager float32, relative to max |eager logit|
BANDWIDTH_FLOATS = 1 << 28  # 1 GiB of float32 (and of bf16): far beyond any cache


@dataclass(frozen=True)
class GenModel:
    name: str
    arch: str  # "llama" or "qwen2": the transformers class and the GGUF arch
    description: str
    config: dict[str, Any]
    # Default HF init (0.02) makes the small models repeat one token forever: attention is nearly
    # uniform and greedy decoding ignores the context, which would also hide a broken KV cache from
    # the token comparison. Each model gets the smallest init scale (HF's own where it suffices)
    # whose greedy output varies; the report records the argmax margins it gives.
    initializer_range: float


MODELS: dict[str, GenModel] = {m.name: m for m in (
    GenModel("tiny", "llama", "Llama d64 x 2 layers, 4/2 heads, FFN 128, vocab 1000 (smoke tests)",
             dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True, max_position_embeddings=2048),
             initializer_range=0.2),
    GenModel("small", "llama", "Llama d512 x 4 layers, 8/2 heads, FFN 1536, vocab 32000, untied (the hf suite's Llama)",
             dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=False, max_position_embeddings=2048),
             initializer_range=0.05),
    GenModel("qwen2.5-0.5b", "qwen2", "Qwen2.5-0.5B-class: d896 x 24 layers, 14/2 heads, FFN 4864, vocab 151936, tied",
             dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                  max_position_embeddings=2048, rms_norm_eps=1e-6),
             initializer_range=0.02),
    GenModel("llama-3.2-1b", "llama", "Llama-3.2-1B-class: d2048 x 16 layers, 32/8 heads (head_dim 64), FFN 8192, "
             "vocab 128256, tied", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                                        tie_word_embeddings=True, rope_theta=5e5, max_position_embeddings=2048,
                                        rms_norm_eps=1e-5),
             initializer_range=0.02),
)}


@dataclass
class GenOptions:
    models: list[str] = field(default_factory=lambda: ["small"])
    backends: list[str] = field(default_factory=lambda: list(ALL_BACKENDS))
    caches: list[str] = field(default_factory=lambda: ["static"])
    batches: list[int] = field(default_factory=lambda: [1])
    prompts: list[int] = field(default_factory=lambda: [128])
    new_tokens: int = 64
    threads: list[int] = field(default_factory=lambda: [1])
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    llamacpp_quants: list[str] = field(default_factory=lambda: list(LLAMACPP_QUANTS))
    repeats: int = 3
    warmup: int = 1
    seed: int = 0
    verifuse_options: dict[str, Any] | None = None
    job_timeout_s: float = 3600.0


# --------------------------------------------------------------------------------------------
# Pure helpers (no torch): token comparison and the bandwidth floor
# --------------------------------------------------------------------------------------------


def first_difference(reference: list[list[int]], candidate: list[list[int]]) -> dict[str, int] | None:
    """The first generated position where ``candidate`` differs from ``reference`` (rows are the
    batch's sequences): ``{"row", "position"}`` of the earliest position over all rows, or None
    when every row is equal. A missing row or a shorter row differs where it ends."""
    earliest: dict[str, int] | None = None
    for row in range(max(len(reference), len(candidate))):
        ref = reference[row] if row < len(reference) else []
        got = candidate[row] if row < len(candidate) else []
        position = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)
        if position is None and len(ref) != len(got):
            position = min(len(ref), len(got))
        if position is not None and (earliest is None or position < earliest["position"]):
            earliest = {"row": row, "position": position}
    return earliest


def kv_bytes_per_step(config: dict[str, Any], batch: int, prompt: int, new_tokens: int, element_bytes: int) -> float:
    """KV-cache bytes one decode step reads at the mean context: step k (1..N-1) attends over
    prompt + k positions, whose mean is prompt + N/2."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    mean_context = prompt + new_tokens / 2
    return (batch * config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim
            * mean_context * element_bytes)


def floor_share(weight_bytes: float, kv_bytes: float, bandwidth_gb_s: float, step_ms: float | None) -> dict[str, Any]:
    """The bandwidth floor of one decode step and the measured step's share of it (100% = the
    step took no longer than reading its bytes once)."""
    floor_ms = (weight_bytes + kv_bytes) / (bandwidth_gb_s * 1e9) * 1e3
    return {"weight_bytes": int(weight_bytes), "kv_bytes": int(kv_bytes), "bandwidth_gb_s": round(bandwidth_gb_s, 2),
            "floor_ms_per_step": round(floor_ms, 4),
            "share_of_floor_pct": round(100 * floor_ms / step_ms, 1) if step_ms else None}


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 4), "min": round(min(samples), 4),
            "max": round(max(samples), 4), "n": len(samples), "samples": [round(s, 4) for s in samples]}


# --------------------------------------------------------------------------------------------
# Worker side: model building, the prepare job, one HF backend, llama.cpp
# --------------------------------------------------------------------------------------------


def _transformers():
    from .suite_hf import _transformers as quiet_transformers

    return quiet_transformers()


def build_model(spec: GenModel, seed: int):
    """The float32 model with seeded random weights (HF's own init at ``spec.initializer_range``)."""
    import torch

    transformers = _transformers()
    config_cls, model_cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                             "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[spec.arch]
    config = config_cls(**spec.config, initializer_range=spec.initializer_range)
    torch.manual_seed(seed)
    return model_cls(config).eval()


def prompt_ids(vocab_size: int, batch: int, prompt: int, seed: int):
    """Random prompt token ids, the same for every backend (ids 0-2 are left out: the GGUF
    vocabulary's <unk>, <s>, </s>)."""
    import torch

    generator = torch.Generator().manual_seed(1_000_003 * (seed + 1) + prompt)
    return torch.randint(3, vocab_size, (batch, prompt), generator=generator)


def run_prepare(job: dict[str, Any]) -> dict[str, Any]:
    """Build one model, save it for the HF workers, and write its GGUF files for llama.cpp."""
    import torch

    spec = MODELS[job["model"]]
    started = time.perf_counter()
    model = build_model(spec, job["seed"])
    build_s = time.perf_counter() - started
    params = {id(p): p.numel() for p in model.parameters()}  # tied weights are one parameter
    embedding = model.get_input_embeddings().weight.numel()
    result: dict[str, Any] = {
        "build_s": round(build_s, 2), "params": sum(params.values()), "embedding_params": embedding,
        "tied_embeddings": bool(model.config.tie_word_embeddings),
        # a decode step reads every weight but the embedding table (one row looked up), which is
        # read in full when it is also the LM head
        "weight_params_read_per_token": sum(params.values()) - (0 if model.config.tie_word_embeddings else embedding),
        # of those, the nn.Linear weights (the LM head's included, tied or not): what a weight-only
        # precision quantizes; biases, norms and the embedding table stay in the activation dtype
        "linear_weight_params": sum({id(m.weight): m.weight.numel() for m in model.modules()
                                     if isinstance(m, torch.nn.Linear)}.values()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }
    started = time.perf_counter()
    model.save_pretrained(job["hf_dir"])
    result["save_s"] = round(time.perf_counter() - started, 2)
    if job["quants"]:
        from . import gguf_export

        work = Path(job["gguf_dir"])
        started = time.perf_counter()
        f32 = gguf_export.write_gguf(model, work / "f32.gguf", spec.name)
        result["gguf_write_s"] = round(time.perf_counter() - started, 2)
        del model
        gc.collect()
        files: dict[str, Any] = {}
        for quant in job["quants"]:
            started = time.perf_counter()
            path = f32 if quant == "f32" else gguf_export.quantize_gguf(f32, work / f"{quant}.gguf", quant,
                                                                         job["threads"])
            files[quant] = {"quantize_s": round(time.perf_counter() - started, 2),
                            **gguf_export.gguf_tensor_summary(path)}
        result["gguf"] = files
    return result


class StepClock:
    """A logits processor that stamps the time each generated token's logits exist (generate()
    calls it once per token, right after the forward that produced them). With ``record`` it also
    keeps the first step's logits (row 0) and each step's argmax margin (top-1 minus top-2 logit,
    the smallest over the batch); never in a timed call."""

    def __init__(self, record: bool = False):
        self.record = record
        self.stamps: list[float] = []
        self.first_logits = None
        self.margins: list[float] = []

    def __call__(self, input_ids, scores):
        self.stamps.append(time.perf_counter())
        if self.record:
            if self.first_logits is None:
                self.first_logits = scores[0].float().numpy().copy()
            top2 = scores.float().topk(2, dim=-1).values
            self.margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        return scores


def _status_mb(field_name: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:
        pass
    return None


def _peak_rss_mb() -> float | None:
    """This process's peak RSS (VmHWM). Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries the
    parent's peak across fork and exec into it, so every worker would report at least the parent's
    peak (its 1 GiB bandwidth array included)."""
    return _status_mb("VmHWM")


def _end_of_loading(result: dict[str, Any]) -> None:
    """Record loading's RSS and peak, then restart the peak from here: a bf16 model is read from
    the float32 file and converted, a transient the serving peak must not include. (harness.py has
    the same reset; it is not imported here, to keep the llama.cpp worker free of torch.)"""
    gc.collect()
    result["rss_after_load_mb"] = _status_mb("VmRSS")
    result["load_peak_rss_mb"] = _peak_rss_mb()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := the current RSS (Linux >= 4.0)
    except OSError:
        result["peak_reset"] = False


def _dynamo_counts() -> dict[str, Any]:
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    return {"graphs": int(counters["stats"]["unique_graphs"]), "graph_breaks": int(sum(breaks.values())),
            "graph_break_reasons": [_break_reason(reason) for reason in list(breaks)[:5]]}


def _break_reason(reason: str) -> str:
    """Dynamo's graph-break message in one line: its title and the developer context, which names
    the operation (the hint in between is generic)."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    context = next((line for line in lines if line.startswith("Developer debug context")), "")
    return (lines[0] + (f" ({context})" if context else ""))[:400] if lines else ""


def compile_forward(model, backend: str, job: dict[str, Any]) -> dict[str, Any]:
    """Compile ``model.forward`` for ``backend`` (HF's recipe: generate() then calls the compiled
    forward); returns what the report should know about how. Static cache: ``dynamic=False``
    (prefill and decode are one static graph each, as HF's guide intends); dynamic cache: Dynamo's
    default automatic dynamic shapes (the KV length grows every step, so static shapes would
    recompile each step)."""
    import torch

    from . import backends as bk

    if backend == "eager":
        return {}
    dynamic = False if job["cache"] == "static" else None
    info: dict[str, Any] = {"dynamic": dynamic}
    options: dict[str, Any] | None = None
    if backend in ("inductor", "zentorch"):
        import torch._inductor.config as inductor_config

        # one backend per process: set globally, so every graph (prefill, decode, recompiles) freezes
        inductor_config.freezing = True
        info["freezing"] = True
        if backend == "zentorch":
            import zentorch  # noqa: F401  (registers backend="zentorch")
    elif backend == "openvino":
        ok, reason, _ = bk._openvino_avail()  # imports openvino.torch, which registers the backend
        if not ok:
            raise RuntimeError(reason)
        options = bk.openvino_options(job["threads"], PRECISIONS[job["dtype"]][0])
        info["openvino_options"] = options
    elif backend == "verifuse":
        options = job.get("verifuse_options") or None
    model.forward = torch.compile(model.forward, backend=backend, dynamic=dynamic, options=options)
    return info


@contextlib.contextmanager
def backend_evidence(backend: str, info: dict[str, Any]):
    """Around every compiling call: what each backend says about falling back (verifuse's
    warnings and stats, OpenVINO's subgraphs run in PyTorch or inductor, zentorch's passes)."""
    from . import backends as bk

    with contextlib.ExitStack() as stack:
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        ov_compile = stack.enter_context(bk.capture_logs("openvino.frontend.pytorch.torchdynamo.backend"))
        ov_execute = stack.enter_context(bk.capture_logs("openvino.frontend.pytorch.torchdynamo.execute"))
        zentorch_log = stack.enter_context(bk.capture_logs("zentorch", 20))
        stats_before = bk.verifuse_stats() if backend == "verifuse" else None
        yield
    if backend == "verifuse":
        fallbacks = [f"{w.category.__name__}: {w.message}" for w in caught
                     if w.category.__name__.startswith("Verifuse") or str(w.message).startswith("verifuse")]
        info.setdefault("fallback_warnings", []).extend(fallbacks[:5])
        now = bk.verifuse_stats()
        if isinstance(now, dict) and isinstance(stats_before, dict):
            delta = info.setdefault("verifuse_stats_delta", {})
            for key, value in now.items():
                if isinstance(value, (int, float)) and value != stats_before.get(key, 0):
                    delta[key] = delta.get(key, 0) + value - stats_before.get(key, 0)
    elif backend == "openvino":
        info["fell_back_to_inductor"] = info.get("fell_back_to_inductor", 0) + sum(
            "Failed in OpenVINO" in m for (_, _, m) in ov_compile)
        in_pytorch = [_openvino_failure(m) for (_, _, m) in ov_execute
                      if "Falling back to native PyTorch" in m or m.startswith("OpenVINO execution failed")]
        info["ran_in_pytorch"] = info.get("ran_in_pytorch", 0) + len(in_pytorch)
        if in_pytorch:
            info.setdefault("ran_in_pytorch_reasons", []).extend(in_pytorch[:3])
    elif backend == "zentorch" and zentorch_log:
        if any("only available on CPUs with AVX-512" in m for (_, _, m) in zentorch_log):
            info["zentorch_optimize"] = "skipped: no AVX-512"
        elif any("Optimizing the fx_graph with zentorch ops" in m for (_, _, m) in zentorch_log):
            info["zentorch_optimize"] = "ran"


def _openvino_failure(message: str) -> str:
    """OpenVINO's many-line conversion report cut to the operations it could not convert."""
    failed = re.search(r"Conversion is failed for: ([^\n]*)", message)
    return f"conversion failed for: {failed.group(1).strip()}" if failed else message[:300]


def quantize_weights(model, precision: str) -> None:
    """A weight-only precision's torchao config on every nn.Linear, the LM head included (PRECISIONS
    says which). quantize_ gives the LM head a weight of its own, so a tied embedding table stays
    float32 (one row looked up per token). The float precisions are left as loaded."""
    if precision not in ("int8-weight-only", "int4-weight-only"):
        return
    import torch

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import torchao.quantization as tq  # (its optional CUDA extensions print on import)
        from torchao.quantization.granularity import PerGroup
    if precision == "int8-weight-only":
        config = tq.Int8WeightOnlyConfig()
    else:
        # symmetric is the default mapping; Int4WeightOnlyConfig needs CUDA-only packing formats in
        # torchao 0.18, this is the int4 weight-only path that runs on CPU
        config = tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(INT4_GROUP_SIZE))
    tq.quantize_(model, config)


def linear_weight_formats(model) -> dict[str, int]:
    """How the model's nn.Linear weights are held, counted: e.g. ``{"IntxUnpackedToInt8Tensor int4
    block (1, 32)": 15}`` (the report's evidence of what a precision quantized) or ``{"Parameter
    float32": 15}``."""
    import torch

    formats: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            weight = module.weight
            stored = getattr(weight, "target_dtype", None) or getattr(getattr(weight, "qdata", None), "dtype", None)
            kind = f"{type(weight).__name__} {str(stored or weight.dtype).removeprefix('torch.')}"
            block = getattr(weight, "block_size", None)
            if block is not None:
                kind += f" block {tuple(block)}"
            formats[kind] = formats.get(kind, 0) + 1
    return formats


def run_hf(job: dict[str, Any]) -> dict[str, Any]:
    """One backend, one configuration: load, compile, first generate(), warm-up, timed generate()s."""
    import numpy as np
    import torch

    from . import backends as bk

    torch.set_num_threads(job["threads"])
    torch._dynamo.config.recompile_limit = 64  # a dynamic cache recompiles until its shapes are dynamic
    transformers = _transformers()
    backend, dtype = job["backend"], getattr(torch, PRECISIONS[job["dtype"]][0])
    result: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    started = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(job["hf_dir"], dtype=dtype).eval()
    if backend == "openvino" and dtype == torch.bfloat16:
        # OpenVINO's torch.compile backend cannot take bf16 tensors (backends.py): the float32 upcast
        # of the bf16-rounded weights, with its bf16 precision hint
        model = model.float()
        result["bf16_via"] = bk.OPENVINO_BF16_VIA
    quantize_weights(model, job["dtype"])
    result["linear_weights"] = linear_weight_formats(model)
    result["load_s"] = round(time.perf_counter() - started, 2)
    _end_of_loading(result)

    generation = model.generation_config
    generation.do_sample = False
    generation.eos_token_id = None  # no early stop: every call makes exactly N tokens
    generation.pad_token_id = 0
    generation.max_new_tokens = job["new_tokens"]
    generation.disable_compile = True  # the backend under test compiles, never generate() itself
    if job["cache"] == "static":
        generation.cache_implementation = "static"
    ids = prompt_ids(model.config.vocab_size, job["batch"], job["prompt"], job["seed"])
    mask = torch.ones_like(ids)

    def generate(clock: StepClock) -> tuple[list[list[int]], float]:
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, logits_processor=transformers.LogitsProcessorList([clock]))
        return out[:, ids.shape[1]:].tolist(), start

    info = compile_forward(model, backend, job)
    result.update(info)
    with torch.no_grad():
        first = StepClock(record=True)
        with backend_evidence(backend, result):
            tokens, start = generate(first)
            result["first_generate_s"] = round(time.perf_counter() - start, 3)
            result["after_first_generate"] = _dynamo_counts() if backend != "eager" else None
            warmups, stable = [], True
            for _ in range(job["warmup"]):
                warm_tokens, start = generate(StepClock())
                warmups.append(round(time.perf_counter() - start, 3))
                stable = stable and warm_tokens == tokens
        result["warmup_s"] = warmups
        before_timing = _dynamo_counts() if backend != "eager" else None
        ttft, step_ms, tok_s = [], [], []
        gc.disable()
        try:
            for _ in range(job["repeats"]):
                clock = StepClock()
                timed_tokens, start = generate(clock)
                stable = stable and timed_tokens == tokens
                decode_s = clock.stamps[-1] - clock.stamps[0]
                steps = len(clock.stamps) - 1
                ttft.append((clock.stamps[0] - start) * 1e3)
                step_ms.append(decode_s / steps * 1e3)
                tok_s.append(job["batch"] * steps / decode_s)
        finally:
            gc.enable()
    if backend != "eager":
        after = _dynamo_counts()
        result["dynamo"] = after
        result["graphs_compiled_while_timing"] = after["graphs"] - before_timing["graphs"]
    result.update(tokens=tokens, tokens_stable=stable, ttft_ms=summary(ttft), decode_ms_per_step=summary(step_ms),
                  decode_tok_s=summary(tok_s), peak_rss_mb=_peak_rss_mb(),
                  argmax_margin={"min": round(min(first.margins), 5),
                                 "median": round(statistics.median(first.margins), 5),
                                 "per_step": [round(m, 5) for m in first.margins]})
    np.save(job["logits_out"], first.first_logits)
    return result


def run_llamacpp(job: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp on the GGUF file: the same prompt (row 0), the same greedy loop, the same stamps.
    With ``exact_logits_out`` (the f32 file) it also writes the first step's logits from a context
    without flash attention and with a float32 KV cache: the benchmark's own context (flash
    attention, f16 KV, llama.cpp's defaults) rounds K and V to f16, ~1e-3 of the logits' scale,
    which would hide a layout error no better than that."""
    import llama_cpp
    import numpy as np

    prompt = job["prompt_tokens"]  # the parent's: this process stays free of torch, so its RSS is llama.cpp's
    n_new = job["new_tokens"]
    # n_batch and n_ubatch hold the whole prompt, so prefill is one llama_decode call. flash_attn:
    # llama.cpp's own default ("auto") turns it on for the CPU; llama-cpp-python's False turns it off.
    batch = max(512, len(prompt))
    context = dict(model_path=job["gguf"], n_ctx=len(prompt) + n_new, n_batch=batch, n_ubatch=batch,
                   n_threads=job["threads"], n_threads_batch=job["threads"], seed=job["seed"], verbose=False)
    started = time.perf_counter()
    llm = llama_cpp.Llama(**context, flash_attn=True)
    result: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 2),
                              "llama_cpp_version": llama_cpp.__version__, "n_batch": batch,
                              "n_ctx": len(prompt) + n_new, "flash_attn": True, "kv_cache_type": "f16"}
    _end_of_loading(result)

    def last_logits(model) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.ctx, -1), shape=(model.n_vocab(),))

    def greedy(record: bool = False) -> tuple[list[int], list[float], float]:
        llm.reset()  # position 0 again; eval() drops the cache from there
        start = time.perf_counter()
        llm.eval(prompt)
        stamps = [time.perf_counter()]
        logits = last_logits(llm)
        if record:
            np.save(job["logits_out"], logits)
        tokens = [int(np.argmax(logits))]
        for _ in range(n_new - 1):
            llm.eval([tokens[-1]])
            stamps.append(time.perf_counter())
            tokens.append(int(np.argmax(last_logits(llm))))
        return tokens, stamps, start

    started = time.perf_counter()
    tokens, _, _ = greedy(record=True)
    result["first_generate_s"] = round(time.perf_counter() - started, 3)
    for _ in range(job["warmup"]):
        greedy()
    ttft, step_ms, tok_s, stable = [], [], [], True
    gc.disable()
    try:
        for _ in range(job["repeats"]):
            timed_tokens, stamps, start = greedy()
            stable = stable and timed_tokens == tokens
            ttft.append((stamps[0] - start) * 1e3)
            step_ms.append((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3)
            tok_s.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
    finally:
        gc.enable()
    result.update(tokens=[tokens], tokens_stable=stable, ttft_ms=summary(ttft), decode_ms_per_step=summary(step_ms),
                  decode_tok_s=summary(tok_s), peak_rss_mb=_peak_rss_mb())
    if job.get("exact_logits_out"):
        llm.close()
        exact = llama_cpp.Llama(**context, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                                type_v=llama_cpp.GGML_TYPE_F32)
        exact.eval(prompt)
        np.save(job["exact_logits_out"], last_logits(exact))
    return result


def worker_main(spec_path: str) -> int:
    job = json.loads(Path(spec_path).read_text())
    run = {"prepare": run_prepare, "hf": run_hf, "llamacpp": run_llamacpp}[job["kind"]]
    try:
        result = {"status": "ok", **run(job)}
    except Exception as e:
        result = {"status": "failed", "reason": f"{type(e).__name__}: {e}"[:2000],
                  "traceback_tail": traceback.format_exc()[-3000:]}
    Path(job["out"]).write_text(json.dumps(result, default=str))
    return 0


# --------------------------------------------------------------------------------------------
# Parent side: availability, bandwidth, jobs, comparison, report
# --------------------------------------------------------------------------------------------


def read_bandwidth_gb_s(threads: int, repeats: int = 5) -> float:
    """Large-array read bandwidth on ``threads`` threads: the best of ``repeats`` sums of a 1 GiB
    array, in float32 and in bfloat16 (on this Zen 4 VM the bf16 sum reads faster, 29 vs 27 GB/s
    on one thread: the floor takes the better read). The arrays are written first: an untouched
    ``torch.empty`` would read the kernel's shared zero page and measure the cache."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    best_gb_s = 0.0
    try:
        for dtype, elements in ((torch.float32, BANDWIDTH_FLOATS), (torch.bfloat16, 2 * BANDWIDTH_FLOATS)):
            data = torch.ones(elements, dtype=dtype)
            data.sum()
            for _ in range(repeats):
                start = time.perf_counter()
                data.sum()
                best_gb_s = max(best_gb_s, data.numel() * data.element_size() / (time.perf_counter() - start) / 1e9)
            del data
        return best_gb_s
    finally:
        torch.set_num_threads(previous)


def backend_availability(backends: list[str]) -> dict[str, dict[str, Any]]:
    """Which backends can run here (never raising), with versions; zentorch only with AVX-512,
    where its passes run (without it, it is inductor plus freezing under another name)."""
    import importlib.util

    from . import backends as bk

    found: dict[str, dict[str, Any]] = {}
    for name in backends:
        if name == "llamacpp":
            missing = [m for m in ("llama_cpp", "gguf") if importlib.util.find_spec(m) is None]
            entry = ({"status": "unavailable", "reason": f"not installed: {', '.join(missing)} (make bench-llm-deps)"}
                     if missing else {"status": "available", "version": bk._version("llama_cpp_python"),
                                      "gguf_version": bk._version("gguf")})
        else:
            ok, reason, _, details = bk.availability(name)
            if ok and name == "zentorch" and details.get("avx512_supported") is False:
                ok, reason = False, "zentorch refuses CPUs without AVX-512 (its passes do not run there)"
            entry = {"status": "available" if ok else "unavailable", "reason": reason,
                     **{k: v for k, v in details.items() if k in ("version", "avx512_supported")}}
        found[name] = entry
    return found


def spawn_job(job: dict[str, Any], work: Path, timeout_s: float) -> dict[str, Any]:
    """Run one job in a fresh process (its own RSS); the result, or a failure saying why, with the
    load averages around it (another process on the 2 cores shows there)."""
    load_before = load_average()
    result = _spawn(job, work, timeout_s)
    result.update(load_avg_before=load_before, load_avg_after=load_average())
    return result


def _spawn(job: dict[str, Any], work: Path, timeout_s: float) -> dict[str, Any]:
    from .orchestrate import _child_env, _kill

    label = job["label"]
    spec_path, out_path, log_path = (work / f"{label}.{ext}" for ext in ("spec.json", "out.json", "log"))
    job["out"] = str(out_path)
    spec_path.write_text(json.dumps(job, default=str))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "verifuse_bench.generation", "--worker", str(spec_path)],
                                env=_child_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        why = None
        try:
            rc = proc.wait(timeout=timeout_s)
            if rc != 0:
                why = f"the process exited with status {rc}" if rc > 0 else f"the process was killed by signal {-rc}"
        except subprocess.TimeoutExpired:
            _kill(proc)
            why = f"the process was killed after the {timeout_s:.0f}s job timeout"
        except BaseException:
            _kill(proc)
            raise
    if out_path.exists() and why is None:
        return json.loads(out_path.read_text())
    tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
    return {"status": "failed", "reason": why or "the process wrote no result", "log_tail": tail}


def load_average() -> list[float] | None:
    """harness.py's, imported only when called: a module-level import of harness would bring torch
    into the llama.cpp worker too."""
    from .harness import load_average as harness_load_average

    return harness_load_average()


def weight_bytes(prepared: dict[str, Any], dtype: str) -> float:
    """The weight bytes a decode step reads: the linear weights at the precision's bytes per weight,
    the other weights read (norms, biases) in its activation dtype. (A report without
    ``linear_weight_params`` counts every weight as a linear one.)"""
    activation, per_linear_weight = PRECISIONS[dtype]
    read = prepared["weight_params_read_per_token"]
    linear = prepared.get("linear_weight_params", read)
    return linear * per_linear_weight + (read - linear) * DTYPE_BYTES[activation]


def compare_logits(reference_path: str, candidate_path: str, rel_tolerance: float | None = None) -> dict[str, Any]:
    """Max abs / relative (to max |reference|) difference of two saved logit vectors; ``ok`` when a
    tolerance is given."""
    import numpy as np

    reference, candidate = np.load(reference_path), np.load(candidate_path)
    if reference.shape != candidate.shape:
        return {"error": f"shapes differ: {reference.shape} vs {candidate.shape}", "ok": False}
    max_abs = float(np.abs(reference - candidate).max())
    scale = float(np.abs(reference).max())
    compared = {"max_abs_diff": max_abs, "ref_max_abs": scale, "max_rel_diff": max_abs / scale if scale else None}
    if rel_tolerance is not None:
        compared.update(rel_tolerance=rel_tolerance, ok=max_abs <= rel_tolerance * scale)
    return compared


def token_verdict(result: dict[str, Any], reference: dict[str, Any] | None, reference_name: str) -> None:
    """Fill ``tokens_equal`` and ``first_diff`` of ``result`` against ``reference`` (eager)."""
    result["tokens_reference"] = reference_name
    if reference is None or reference.get("status") != "ok":
        result["tokens_equal"] = None
        result["tokens_note"] = f"no {reference_name} result to compare with"
        return
    diff = first_difference(reference["tokens"], result["tokens"])
    result["tokens_equal"] = diff is None
    result["first_diff"] = diff
    if diff is not None and diff["row"] == 0 and diff["position"] < len(reference["argmax_margin"]["per_step"]):
        # a tiny margin there means the reference itself nearly tied: a rounding difference, not a bug
        result["reference_margin_at_first_diff"] = reference["argmax_margin"]["per_step"][diff["position"]]


class Run:
    """One benchmark run: the jobs in order, the report written after each one."""

    def __init__(self, opts: GenOptions, json_path: Path, argv: list[str], log=print):
        self.opts, self.json_path, self.log = opts, json_path, log
        self.report: dict[str, Any] = {"schema": SCHEMA, "created": _now(), "argv": argv,
                                       "settings": _settings(opts), "results": [], "errors": []}

    def run(self) -> dict[str, Any]:
        from .harness import environment_info

        opts = self.opts
        self.report["environment"] = environment_info()
        self.report["environment"]["load_avg_start"] = load_average()
        self.log("checking backends ...")
        self.report["backends"] = availability = backend_availability(opts.backends)
        for name, entry in availability.items():
            if entry["status"] != "available":
                self.log(f"  {name}: unavailable ({entry['reason']})")
        self.report["bandwidth"] = {}
        for threads in opts.threads:
            start_gb_s = round(read_bandwidth_gb_s(threads), 2)
            self.report["bandwidth"][str(threads)] = {"start_gb_s": start_gb_s, "used_gb_s": start_gb_s}
        self.log("read bandwidth: " + ", ".join(f"{t} thread(s) {v['start_gb_s']} GB/s"
                                                for t, v in self.report["bandwidth"].items()))
        self.write()
        llamacpp = availability.get("llamacpp", {}).get("status") == "available"
        with tempfile.TemporaryDirectory(prefix="verifuse-generation-") as tmp:
            work = Path(tmp)
            self.report["models"] = {}
            for model in opts.models:
                self.prepare(model, work, llamacpp)
                if self.report["models"][model].get("status") != "ok":
                    continue
                for threads in opts.threads:
                    for batch in opts.batches:
                        for prompt in opts.prompts:
                            self.configuration(model, threads, batch, prompt, work, availability)
                shutil.rmtree(work / model, ignore_errors=True)  # the next model's files may be GBs too
        for threads, entry in self.report["bandwidth"].items():
            entry["end_gb_s"] = round(read_bandwidth_gb_s(int(threads)), 2)
            # the higher reading is the floor's denominator: the floor is what the machine can do
            entry["used_gb_s"] = max(entry["start_gb_s"], entry["end_gb_s"])
        for row in self.report["results"]:
            self.add_floor(row)
        self.report["environment"]["load_avg_end"] = load_average()
        self.report["finished"] = _now()
        self.write()
        return self.report

    def prepare(self, model: str, work: Path, llamacpp: bool) -> None:
        spec = MODELS[model]
        model_dir = work / model
        (model_dir / "gguf").mkdir(parents=True)
        self.log(f"[{model}] building the model{' and its GGUF files' if llamacpp else ''} ...")
        job = {"kind": "prepare", "label": f"{model}-prepare", "model": model, "seed": self.opts.seed,
               "hf_dir": str(model_dir / "hf"), "gguf_dir": str(model_dir / "gguf"),
               "quants": list(self.opts.llamacpp_quants) if llamacpp else [], "threads": max(self.opts.threads)}
        prepared = spawn_job(job, work, self.opts.job_timeout_s)
        prepared.update(description=spec.description, arch=spec.arch, config=spec.config,
                        initializer_range=spec.initializer_range)
        self.report["models"][model] = prepared
        if prepared["status"] != "ok":
            self.report["errors"].append({"model": model, "stage": "prepare", "error": prepared.get("reason"),
                                          "log_tail": prepared.get("log_tail")})
            self.log(f"  failed: {prepared.get('reason')}")
        self.write()

    def configuration(self, model: str, threads: int, batch: int, prompt: int, work: Path,
                      availability: dict[str, dict[str, Any]]) -> None:
        opts, prepared = self.opts, self.report["models"][model]
        base = {"model": model, "threads": threads, "batch": batch, "prompt": prompt, "new_tokens": opts.new_tokens,
                "seed": opts.seed, "repeats": opts.repeats, "warmup": opts.warmup}
        hf_backends = [b for b in HF_BACKENDS if b in opts.backends or b == "eager"]
        eager_float32: dict[str, Any] | None = None  # llama.cpp's reference: the first float32 cache run
        eager_float32_logits = None
        for dtype in opts.dtypes:
            for cache in opts.caches:
                eager: dict[str, Any] | None = None
                for backend in hf_backends:
                    label = f"{model}-{dtype}-{cache}-b{batch}-p{prompt}-t{threads}-{backend}"
                    logits_path = str(work / f"{label}.logits.npy")
                    row = {**base, "backend": backend, "precision": dtype, "dtype": dtype, "cache": cache}
                    if availability.get(backend, {"status": "available"})["status"] != "available":
                        row.update(status="unavailable", reason=availability[backend]["reason"])
                    else:
                        self.log(f"[{label}] ...")
                        job = {**base, "kind": "hf", "label": label, "backend": backend, "dtype": dtype, "cache": cache,
                               "hf_dir": str(work / model / "hf"), "verifuse_options": opts.verifuse_options,
                               "logits_out": logits_path}
                        row.update(spawn_job(job, work, opts.job_timeout_s))
                    if backend == "eager":
                        eager = row
                        if dtype == "float32" and eager_float32 is None:
                            eager_float32, eager_float32_logits = row, logits_path
                    elif row["status"] == "ok":
                        token_verdict(row, eager, f"eager {dtype} {cache} cache")
                    self.record(row)
        if "llamacpp" not in opts.backends:
            return
        for quant in opts.llamacpp_quants:
            label = f"{model}-llamacpp-{quant}-b{batch}-p{prompt}-t{threads}"
            row = {**base, "backend": "llamacpp", "precision": quant, "dtype": None, "cache": "llama.cpp"}
            if availability["llamacpp"]["status"] != "available":
                row.update(status="unavailable", reason=availability["llamacpp"]["reason"])
            elif batch != 1:
                row.update(status="skipped", reason="llama.cpp is measured at batch 1 only (llama-cpp-python's "
                                                    "Llama object decodes one sequence)")
            else:
                self.log(f"[{label}] ...")
                gguf = prepared["gguf"][quant]
                tokens = prompt_ids(MODELS[model].config["vocab_size"], 1, prompt, opts.seed)[0].tolist()
                logits_path, exact_path = (str(work / f"{label}.{kind}.npy") for kind in ("logits", "exact-logits"))
                check_logits = quant == "f32" and eager_float32_logits is not None
                job = {**base, "kind": "llamacpp", "label": label, "gguf": str(work / model / "gguf" / f"{quant}.gguf"),
                       "prompt_tokens": tokens,
                       "logits_out": logits_path, "exact_logits_out": exact_path if check_logits else None}
                row.update(spawn_job(job, work, opts.job_timeout_s))
                row["gguf"] = gguf
                if row["status"] == "ok":
                    reference = f"eager float32 {eager_float32['cache']} cache" if eager_float32 else "eager float32"
                    token_verdict(row, eager_float32, reference)
                    if check_logits and eager_float32.get("status") == "ok":
                        row["first_step_logits_vs_eager"] = {
                            "exact_context": compare_logits(eager_float32_logits, exact_path, LOGITS_REL_TOLERANCE),
                            "benchmark_context": compare_logits(eager_float32_logits, logits_path)}
            self.record(row)

    def record(self, row: dict[str, Any]) -> None:
        self.add_floor(row)
        self.report["results"].append(row)
        if row["status"] == "failed":
            self.report["errors"].append({"label": _row_label(row), "stage": "run", "error": row.get("reason"),
                                          "tail": (row.get("traceback_tail") or row.get("log_tail") or "")[-1500:]})
        self.log("  " + _one_line(row))
        self.write()

    def add_floor(self, row: dict[str, Any]) -> None:
        """The row's bandwidth floor (again at the end of the run, with the final bandwidth)."""
        if row.get("status") != "ok":
            return
        prepared = self.report["models"][row["model"]]
        bandwidth = self.report["bandwidth"][str(row["threads"])]["used_gb_s"]
        if row["backend"] == "llamacpp":
            weights = row["gguf"]["weight_bytes_read_per_token"]
            kv = kv_bytes_per_step(prepared["config"], 1, row["prompt"], row["new_tokens"], LLAMACPP_KV_BYTES)
        else:
            # OpenVINO's bf16 runs on the float32 upcast; the floor is still the bf16 model's
            weights = weight_bytes(prepared, row["dtype"])
            kv = kv_bytes_per_step(prepared["config"], row["batch"], row["prompt"], row["new_tokens"],
                                   DTYPE_BYTES[PRECISIONS[row["dtype"]][0]])
        row["floor"] = floor_share(weights, kv, bandwidth, row["decode_ms_per_step"]["median"])

    def write(self) -> None:
        self.json_path.parent.mkdir(parents=True, exist_ok=True)
        self.json_path.write_text(json.dumps(self.report, indent=1, default=str))
        self.json_path.with_suffix(".md").write_text(to_markdown(self.report))


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


def _settings(opts: GenOptions) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(opts)


def _row_label(row: dict[str, Any]) -> str:
    return (f"{row['model']} {row['precision']} {row['cache']} b{row['batch']} p{row['prompt']} "
            f"t{row['threads']} {row['backend']}")


def _one_line(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['backend']}: {row['status']}: {row.get('reason')}"
    equal = {True: "tokens equal", False: f"tokens differ at {row.get('first_diff')}", None: "tokens not compared"}
    return (f"{row['backend']}: first generate {row['first_generate_s']:.1f}s, TTFT {row['ttft_ms']['median']:.1f} ms, "
            f"decode {row['decode_tok_s']['median']:.1f} tok/s ({row['floor']['share_of_floor_pct']}% of the floor), "
            f"peak RSS {row['peak_rss_mb']:.0f} MB"
            + ("" if row["backend"] == "eager" else f", {equal[row.get('tokens_equal')]}"))


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _tokens_cell(row: dict[str, Any]) -> str:
    if row["backend"] == "eager":
        return "reference"
    equal = row.get("tokens_equal")
    if equal is None:
        return "not compared"
    if equal:
        return "yes"
    diff = row["first_diff"]
    margin = row.get("reference_margin_at_first_diff")
    return f"no (row {diff['row']}, token {diff['position']}" + (f", eager margin {margin:.3g})" if margin is not None
                                                                 else ")")


def _fallback_cell(row: dict[str, Any]) -> str:
    """What ran other than the backend under test, or was compiled again: details in the notes."""
    parts = []
    if row.get("fallback_warnings"):
        parts.append(f"{len(row['fallback_warnings'])} verifuse fallback(s)")
    if row.get("ran_in_pytorch"):
        parts.append(f"{row['ran_in_pytorch']} graph(s) in PyTorch")
    if row.get("fell_back_to_inductor"):
        parts.append(f"{row['fell_back_to_inductor']} subgraph(s) on inductor")
    if row.get("zentorch_optimize", "ran") != "ran":
        parts.append(f"zentorch passes {row['zentorch_optimize']}")
    breaks = (row.get("dynamo") or {}).get("graph_breaks")
    if breaks:
        parts.append(f"{breaks} graph break(s)")
    if row.get("graphs_compiled_while_timing"):
        parts.append(f"{row['graphs_compiled_while_timing']} compile(s) while timing")
    if not row.get("tokens_stable", True):
        parts.append("tokens changed between calls")
    return ", ".join(parts)


def to_markdown(report: dict[str, Any]) -> str:
    env = report.get("environment", {})
    tier = (env.get("tier") or {}).get("tier")
    settings = report["settings"]
    lines = [f"# Generation benchmark ({report['created']})", "",
             f"- CPU: {env.get('cpu_model')} ({env.get('isa_summary')}), verifuse tier {tier}, "
             f"torch {env.get('torch_version')}, commit {env.get('git_commit')}",
             f"- greedy `generate()`, {settings['new_tokens']} new tokens, {settings['repeats']} timed calls "
             f"(medians), threads {settings['threads']}, load average start {env.get('load_avg_start')} / end "
             f"{env.get('load_avg_end')}"]
    for threads, bw in report.get("bandwidth", {}).items():
        lines.append(f"- read bandwidth, {threads} thread(s): {bw.get('start_gb_s')} GB/s at the start, "
                     f"{bw.get('end_gb_s')} at the end (floor uses {bw.get('used_gb_s')})")
    lines.append("- % of floor: the time a decode step needs to read its bytes once (weights in their stored "
                 "precision, KV cache at the mean context) at that bandwidth, over the measured step; above 100% "
                 "the step read memory faster than the array sum did")
    for name, entry in report.get("backends", {}).items():
        if entry["status"] != "available":
            lines.append(f"- {name}: unavailable ({entry['reason']})")
    lines += ["", "| model | precision | cache | batch | prompt | backend | first generate s | TTFT ms | decode tok/s "
                  "| % of floor | peak RSS MB | tokens equal | fallbacks, breaks |",
              "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for row in report["results"]:
        head = (f"| {row['model']} | {row['precision']} | {row['cache']} | {row['batch']} | {row['prompt']} "
                f"| {row['backend']} |")
        if row["status"] != "ok":
            lines.append(head + f" {row['status']}: {str(row.get('reason'))[:120]} | | | | | | |")
            continue
        share = (row.get("floor") or {}).get("share_of_floor_pct")
        lines.append(head + f" {row['first_generate_s']:.1f} | {row['ttft_ms']['median']:.1f} "
                            f"| {row['decode_tok_s']['median']:.1f} | {'' if share is None else f'{share:.0f}%'} "
                            f"| {row['peak_rss_mb']:.0f} | {_tokens_cell(row)} | {_fallback_cell(row)} |")
    notes = _notes(report)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    if report.get("errors"):
        lines += ["", "Errors:", ""] + [f"- {e.get('label') or e.get('model')} ({e['stage']}): {e['error']}"
                                        for e in report["errors"]]
    return "\n".join(lines) + "\n"


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 10 * 2**20 else f"{size / 2**20:.2f} MiB"


def _relative(compared: dict[str, Any]) -> str:
    return f"{compared['max_rel_diff']:.2g}" if compared.get("max_rel_diff") is not None else str(compared.get("error"))


def _notes(report: dict[str, Any]) -> list[str]:
    notes = []
    for name, model in report.get("models", {}).items():
        if model.get("status") == "ok":
            notes.append(f"{name}: {model['description']}; {model['params'] / 1e6:.1f}M parameters, "
                         f"init std {model['initializer_range']}")
    for row in report["results"]:
        if row["status"] != "ok":
            continue
        label = _row_label(row)
        for message in row.get("fallback_warnings") or []:
            notes.append(f"{label}: {message[:300]}")
        for message in dict.fromkeys(row.get("ran_in_pytorch_reasons") or []):
            notes.append(f"{label}: OpenVINO ran a graph in PyTorch: {message}")
        for reason in (row.get("dynamo") or {}).get("graph_break_reasons") or []:
            notes.append(f"{label}: graph break: {reason}")
        logits = row.get("first_step_logits_vs_eager")
        if logits:
            exact, bench = logits["exact_context"], logits["benchmark_context"]
            notes.append(f"{label}: first-step logits vs eager float32, max difference relative to max |logit|: "
                         f"{_relative(exact)} without flash attention and with an f32 KV cache "
                         f"({'within' if exact['ok'] else 'OUTSIDE'} {LOGITS_REL_TOLERANCE:g}), {_relative(bench)} as "
                         f"benchmarked (flash attention, f16 KV)")
        if row.get("gguf"):
            types = ", ".join(f"{kind} {_mib(size)}" for kind, size in row["gguf"]["bytes_by_type"].items())
            notes.append(f"{label}: GGUF {types}; LM head {row['gguf']['lm_head_type']}")
        if row.get("bf16_via"):
            notes.append(f"{label}: {row['bf16_via']}")
    return notes


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _list(kind):
    def parse(text: str):
        return [kind(x.strip()) for x in text.split(",") if x.strip()]

    return parse


def parse_args(argv: list[str]) -> tuple[GenOptions, Path]:
    p = argparse.ArgumentParser(prog="python -m verifuse_bench.generation", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=_list(str), default=["small"], help=f"of {', '.join(MODELS)}")
    p.add_argument("--backends", default="all", help=f"'all' or of {', '.join(ALL_BACKENDS)} (eager is always run)")
    p.add_argument("--cache", type=_list(str), default=["static"], help="static,dynamic")
    p.add_argument("--batch", type=_list(int), default=[1])
    p.add_argument("--prompt", type=_list(int), default=[128], help="prompt lengths")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=_list(int), default=[1])
    p.add_argument("--dtype", type=_list(str), default=["float32"], help=f"of {', '.join(PRECISIONS)}")
    p.add_argument("--llamacpp-quants", type=_list(str), default=list(LLAMACPP_QUANTS))
    p.add_argument("--repeats", type=int, default=3, help="timed generate() calls per backend")
    p.add_argument("--warmup", type=int, default=1, help="untimed generate() calls after the first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verifuse-options", type=json.loads, default=None, help="JSON for torch.compile options=")
    p.add_argument("--job-timeout", type=float, default=3600.0, help="seconds before a job's process is killed")
    p.add_argument("--json", type=Path, default=None, help="report path (PATH.md next to it)")
    args = p.parse_args(argv)
    backends = list(ALL_BACKENDS) if args.backends == "all" else _list(str)(args.backends)
    problems = ([f"unknown model {m!r}" for m in args.models if m not in MODELS]
                + [f"unknown backend {b!r}" for b in backends if b not in ALL_BACKENDS]
                + [f"unknown cache {c!r}" for c in args.cache if c not in ("static", "dynamic")]
                + [f"unknown dtype {d!r}" for d in args.dtype if d not in PRECISIONS]
                + [f"unknown llama.cpp quant {q!r}" for q in args.llamacpp_quants if q not in LLAMACPP_QUANTS])
    if args.new_tokens < 2:
        problems.append("--new-tokens must be at least 2 (decode is timed over tokens 2..N)")
    if problems:
        p.error("; ".join(problems))
    opts = GenOptions(models=args.models, backends=backends, caches=args.cache, batches=args.batch,
                      prompts=args.prompt, new_tokens=args.new_tokens, threads=args.threads, dtypes=args.dtype,
                      llamacpp_quants=args.llamacpp_quants, repeats=args.repeats, warmup=args.warmup, seed=args.seed,
                      verifuse_options=args.verifuse_options, job_timeout_s=args.job_timeout)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path = args.json or Path(__file__).resolve().parents[1] / "results" / f"generation-{stamp}.json"
    return opts, json_path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1])
    opts, json_path = parse_args(argv)
    report = Run(opts, json_path, argv).run()
    print(f"wrote {json_path} and {json_path.with_suffix('.md')}")
    eager_failed = any(r["backend"] == "eager" and r["status"] == "failed" for r in report["results"])
    nothing_ran = bool(report["errors"]) and not report["results"]  # e.g. every model failed to build
    return 1 if eager_failed or nothing_ran else 0


if __name__ == "__main__":
    sys.exit(main())
