"""The generation benchmark's weights for llama.cpp: a Hugging Face Llama or Qwen2 model written as
GGUF (float32) with the ``gguf`` package, then quantized by llama.cpp's own quantizer.

What llama.cpp expects, taken from its ``convert_hf_to_gguf.py`` (the copy bundled with
llama-cpp-python 0.3.36, ``conversion/llama.py`` and ``conversion/qwen.py``):

* tensor names ``token_embd``, ``blk.N.attn_norm / attn_q / attn_k / attn_v / attn_output /
  ffn_norm / ffn_gate / ffn_up / ffn_down``, ``output_norm``, ``output`` (left out when the
  embeddings are tied: llama.cpp then reads ``token_embd`` as the LM head), and for Qwen2 the
  biases ``attn_q / attn_k / attn_v.bias``;
* arch ``llama``: llama.cpp rotates *adjacent* pairs of a head's dimensions (its rope type NORM),
  Hugging Face rotates the two *halves* (``rotate_half``), so the converter permutes the rows of
  ``q_proj`` and ``k_proj`` (``LlamaModel.permute``; per KV head for ``k_proj``). :func:`permute_rope_rows`
  is that permutation;
* arch ``qwen2``: llama.cpp uses the halves layout (rope type NEOX) there, so nothing is permuted.

The vocabulary is synthetic: the benchmark feeds token ids, so the tokenizer only has to load. It is
a SentencePiece-style list (``tokenizer.ggml.model = "llama"``): ``<unk> <s> </s>``, the 256 byte
tokens (llama.cpp looks up ``<0x0A>`` as the newline token) and ``<tN>`` for the rest.

Quantized files come from ``llama_model_quantize`` (what ``llama-quantize`` runs), so they hold the
mix of types a user's file would: for ``q4_0`` the LM head (here the tied embedding) becomes Q6_K,
or Q8_0 where its rows are not a multiple of 256 (Qwen2.5-0.5B's 896); 1-D tensors stay float32. :func:`gguf_tensor_summary` reads back the types and the bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np

# llama.cpp's file types (llama.h, enum llama_ftype) for the precisions the benchmark offers
LLAMA_FTYPES: dict[str, int] = {"f32": 0, "bf16": 32, "q8_0": 7, "q4_0": 2}
BYTE_TOKENS = 256
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")


def gguf_arch(config: Any) -> str:
    kind = getattr(config, "model_type", None)
    if kind not in ("llama", "qwen2"):
        raise ValueError(f"no GGUF export for model_type {kind!r} (llama and qwen2 only)")
    return kind


def head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def permute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a q/k projection from Hugging Face's rotate-half layout to llama.cpp's adjacent-pair
    layout: within each head, row ``i`` of the first half and row ``i`` of the second half become
    rows ``2i`` and ``2i+1`` (convert_hf_to_gguf.py, ``LlamaModel.permute``)."""
    rows = weight.shape[0]
    return (weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2)
            .reshape(weight.shape))


def gguf_tensors(model: Any) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) for every tensor llama.cpp reads, from a Hugging Face
    ``LlamaForCausalLM`` / ``Qwen2ForCausalLM``."""
    config = model.config
    arch = gguf_arch(config)
    state = {k: v.detach().float().contiguous().numpy() for k, v in model.state_dict().items()}
    yield "token_embd.weight", state["model.embed_tokens.weight"]
    yield "output_norm.weight", state["model.norm.weight"]
    if not config.tie_word_embeddings:
        yield "output.weight", state["lm_head.weight"]
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                 "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
                 "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
                 "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                 "mlp.down_proj.weight": "ffn_down.weight"}
    if arch == "qwen2":
        per_layer.update({"self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
                          "self_attn.v_proj.bias": "attn_v.bias"})
    heads = {"self_attn.q_proj": config.num_attention_heads, "self_attn.k_proj": config.num_key_value_heads}
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in per_layer.items():
            tensor = state[f"model.layers.{layer}.{hf_name}"]
            projection = hf_name.rsplit(".", 1)[0]
            if arch == "llama" and projection in heads:
                tensor = permute_rope_rows(tensor, heads[projection])
            yield f"blk.{layer}.{gguf_name}", tensor


def synthetic_vocab(vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a SentencePiece-style vocabulary of ``vocab_size`` tokens."""
    from gguf import TokenType

    if vocab_size < len(SPECIAL_TOKENS) + BYTE_TOKENS:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the special and byte tokens")
    tokens = list(SPECIAL_TOKENS) + [f"<0x{b:02X}>" for b in range(BYTE_TOKENS)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * BYTE_TOKENS
    tokens += [f"<t{i}>" for i in range(len(tokens), vocab_size)]
    types += [TokenType.NORMAL] * (vocab_size - len(types))
    return tokens, [0.0] * vocab_size, [int(t) for t in types]


def rope_theta(config: Any) -> float:
    """The rope base: transformers 5 keeps it in ``rope_parameters``, older versions as ``rope_theta``."""
    params = getattr(config, "rope_parameters", None) or {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return theta if theta is not None else config.rope_theta


def write_gguf(model: Any, path: str | Path, name: str) -> Path:
    """Write ``model``'s weights (float32) and hyperparameters as a GGUF file llama.cpp loads."""
    import gguf

    config = model.config
    arch = gguf_arch(config)
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim(config))
    writer.add_value_length(head_dim(config))
    writer.add_rope_dimension_count(head_dim(config))
    writer.add_rope_freq_base(float(rope_theta(config)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_file_type(LLAMA_FTYPES["f32"])
    tokens, scores, types = synthetic_vocab(config.vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for tensor_name, array in gguf_tensors(model):
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize_gguf(source: str | Path, target: str | Path, precision: str, threads: int) -> Path:
    """``source`` (a float32 GGUF) quantized to ``precision`` by llama.cpp's ``llama_model_quantize``."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPES[precision]
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize to {precision} failed with status {status}")
    return Path(target)


def gguf_tensor_summary(path: str | Path) -> dict[str, Any]:
    """What a GGUF file stores: bytes per tensor type, the LM head's type, and the bytes one decode
    step reads (every tensor but the embedding table, which a step only looks one row up in; when
    there is no ``output.weight`` the table is also the LM head and is counted)."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    by_type: dict[str, int] = {}
    for tensor in tensors.values():
        by_type[tensor.tensor_type.name] = by_type.get(tensor.tensor_type.name, 0) + int(tensor.n_bytes)
    lm_head = tensors.get("output.weight") or tensors["token_embd.weight"]
    read_per_token = sum(int(t.n_bytes) for t in tensors.values())
    if "output.weight" in tensors:
        read_per_token -= int(tensors["token_embd.weight"].n_bytes)
    return {"bytes_by_type": by_type, "weight_bytes_read_per_token": read_per_token,
            "lm_head_type": lm_head.tensor_type.name}
