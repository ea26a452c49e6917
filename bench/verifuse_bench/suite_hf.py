"""``--suite hf``: Hugging Face transformers models built from their ``*Config()`` objects (random
weights, nothing downloaded; ``HF_HUB_OFFLINE=1``), in eval mode, with the library's default
attention implementation (recorded per result as ``attn_implementation``).

Text inputs are random token ids (deterministic per seed and batch) and an all-ones attention
mask (no padding). What is compared against eager is named in each entry (``output``).

The Llama entries (a small ``LlamaConfig``: hidden 512, 4 layers, 8 heads, 2 KV heads, FFN 1536,
vocab 32000):

* ``hf_llama_prefill`` (no KV cache): ``LlamaForCausalLM(input_ids, attention_mask,
  use_cache=False)`` over a 128-token prompt; compared: ``logits`` [B, 128, 32000].
* ``hf_llama_decode`` (KV cache): one decode step. Input: one new token per sequence
  (``input_ids`` [B, 1], ``position_ids`` = 128, ``attention_mask`` ones [B, 129]) and a cache
  prefilled with 128 positions (random keys/values [B, 2, 128, 64] per layer; their values do not
  change the work). Each call builds a ``DynamicCache`` from those fixed tensors inside the
  compiled forward and runs the model with it, so every call does the same work: the timed region
  is the cache append (``torch.cat`` per layer, as HF's default cache does at every generated
  token), attention of 1 query over 129 keys, the MLPs and the LM head. Compared: ``logits``
  [B, 1, 32000]. The inputs are never mutated, so repeated calls are identical.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn

from .suites import BenchModel, Inputs, image_inputs, select_key


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import transformers

    try:
        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover
        pass
    return transformers


def _gen(batch: int, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1_000_003 * (seed + 1) + batch)


def text_inputs(seq: int, vocab: int, low: int = 3, mask: bool = True) -> Any:
    def make(batch: int, seed: int) -> Inputs:
        g = _gen(batch, seed)
        ids = torch.randint(low, vocab, (batch, seq), generator=g)
        kw = {"attention_mask": torch.ones(batch, seq, dtype=torch.long)} if mask else {}
        return Inputs((ids,), kw)

    return make


class NoCache(nn.Module):
    """Calls a decoder with ``use_cache=False`` (no cache object in the output)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)


class DecodeStep(nn.Module):
    """One decode step of a causal LM against a prefilled KV cache (see the module docstring)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        self.config = lm.config

    def forward(self, input_ids, attention_mask, position_ids, past_keys, past_values):
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=list(zip(past_keys, past_values)), config=self.config)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      past_key_values=cache, use_cache=True)
        return out.logits


def decode_inputs(cfg_kw: dict, past: int) -> Any:
    layers = cfg_kw["num_hidden_layers"]
    kv_heads = cfg_kw["num_key_value_heads"]
    head_dim = cfg_kw["hidden_size"] // cfg_kw["num_attention_heads"]
    vocab = cfg_kw["vocab_size"]

    def make(batch: int, seed: int) -> Inputs:
        g = _gen(batch, seed)
        ids = torch.randint(3, vocab, (batch, 1), generator=g)
        ks = [torch.randn(batch, kv_heads, past, head_dim, generator=g) for _ in range(layers)]
        vs = [torch.randn(batch, kv_heads, past, head_dim, generator=g) for _ in range(layers)]
        return Inputs((), {"input_ids": ids, "attention_mask": torch.ones(batch, past + 1, dtype=torch.long),
                           "position_ids": torch.full((batch, 1), past, dtype=torch.long),
                           "past_keys": ks, "past_values": vs})

    return make


LLAMA_SMALL = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048)
LLAMA_TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128)
BERT_TINY = dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64)


def _llama(cfg_kw: dict, decode: bool):
    def build(seed: int) -> nn.Module:
        tf = _transformers()
        lm = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg_kw))
        return DecodeStep(lm) if decode else NoCache(lm)

    return build


def _simple(cls_name: str, cfg_name: str, cfg_kw: dict | None = None, module_path: str | None = None,
            **model_kw):
    def build(seed: int) -> nn.Module:
        tf = _transformers()
        cfg = getattr(tf, cfg_name)(**(cfg_kw or {}))
        if module_path:
            import importlib

            cls = getattr(importlib.import_module(module_path), cls_name)
        else:
            cls = getattr(tf, cls_name)
        return cls(cfg, **model_kw)

    return build


def _e(name, family, description, builder, inputs, input_desc, output, batches, tiny=False, notes=""):
    return BenchModel(name=name, suite="hf", family=family, description=description, builder=builder,
                      inputs=inputs, input_desc=input_desc, output=output, select=select_key(output),
                      default_batches=batches, requires=("transformers",), tiny=tiny, notes=notes)


TEXT_BATCHES = (1, 8)
IMAGE_BATCHES = (1, 32)

WHISPER_TINY = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                    decoder_layers=4, decoder_attention_heads=6, decoder_ffn_dim=1536, num_mel_bins=80,
                    max_source_positions=1500)


def hf_entries() -> list[BenchModel]:
    lh = "last_hidden_state"
    return [
        _e("hf_bert_base", "transformer", "BertModel(BertConfig()): BERT-base, 12x768, seq 128",
           _simple("BertModel", "BertConfig"), text_inputs(128, 30522),
           "input_ids + attention_mask [128]", lh, TEXT_BATCHES),
        _e("hf_distilbert", "transformer", "DistilBertModel(DistilBertConfig()): 6x768, seq 128",
           _simple("DistilBertModel", "DistilBertConfig"), text_inputs(128, 30522),
           "input_ids + attention_mask [128]", lh, TEXT_BATCHES),
        _e("hf_roberta_base", "transformer", "RobertaModel(RobertaConfig()): RoBERTa-base, 12x768, seq 128",
           _simple("RobertaModel", "RobertaConfig"), text_inputs(128, 50265),
           "input_ids + attention_mask [128]", lh, TEXT_BATCHES),
        _e("hf_gpt2", "transformer", "GPT2Model(GPT2Config()): GPT-2 small, 12x768, seq 64, use_cache=False",
           _simple("GPT2Model", "GPT2Config", {"use_cache": False}), text_inputs(64, 50257),
           "input_ids + attention_mask [64]", lh, TEXT_BATCHES),
        _e("hf_vit_base", "transformer", "ViTModel(ViTConfig()): ViT-base/16, 224x224",
           _simple("ViTModel", "ViTConfig"), image_inputs(224), "pixel_values 3x224x224", lh, TEXT_BATCHES),
        _e("hf_t5_small_encoder", "transformer", "T5EncoderModel(T5Config()): t5-small encoder, 6x512, seq 128",
           _simple("T5EncoderModel", "T5Config"), text_inputs(128, 32128),
           "input_ids + attention_mask [128]", lh, TEXT_BATCHES),
        _e("hf_whisper_encoder", "transformer",
           "WhisperEncoder, whisper-tiny sized (d384, 4 layers, 6 heads), 80x3000 mel",
           _simple("WhisperEncoder", "WhisperConfig", WHISPER_TINY,
                   module_path="transformers.models.whisper.modeling_whisper"),
           _mel_inputs(80, 3000), "input_features 80x3000", lh, (1, 4)),
        _e("hf_llama_prefill", "transformer",
           "LlamaForCausalLM (d512, 4 layers, 8/2 heads, vocab 32000), 128-token prompt, no KV cache",
           _llama(LLAMA_SMALL, decode=False), text_inputs(128, 32000),
           "input_ids + attention_mask [128]", "logits", TEXT_BATCHES),
        _e("hf_llama_decode", "transformer",
           "LlamaForCausalLM (same), one decode step against a prefilled 128-position KV cache",
           _llama(LLAMA_SMALL, decode=True), decode_inputs(LLAMA_SMALL, 128),
           "input_ids [1] + KV cache 4 layers x [2, 128, 64]", "logits", TEXT_BATCHES,
           notes="DynamicCache built from fixed tensors inside the forward; append + 1-token step timed"),
        _e("hf_convnext_tiny", "cnn", "ConvNextForImageClassification(ConvNextConfig()): ConvNeXt-tiny, 224",
           _simple("ConvNextForImageClassification", "ConvNextConfig", {"num_labels": 1000}),
           image_inputs(224), "pixel_values 3x224x224", "logits", IMAGE_BATCHES),
        _e("hf_resnet50", "cnn", "ResNetForImageClassification(ResNetConfig()): ResNet-50, 224",
           _simple("ResNetForImageClassification", "ResNetConfig", {"num_labels": 1000}),
           image_inputs(224), "pixel_values 3x224x224", "logits", IMAGE_BATCHES),
        # ---- tiny stand-ins (tests, smoke runs) ---------------------------------------------------
        _e("hf_bert_tiny", "transformer", "BertModel, 2x32, seq 16 (tests)",
           _simple("BertModel", "BertConfig", BERT_TINY), text_inputs(16, 1000),
           "input_ids + attention_mask [16]", lh, (2,), tiny=True),
        _e("hf_llama_tiny_decode", "transformer", "LlamaForCausalLM 2x32, decode step against 8 cached positions",
           _llama(LLAMA_TINY, decode=True), decode_inputs(LLAMA_TINY, 8),
           "input_ids [1] + KV cache 2 layers x [2, 8, 8]", "logits", (2,), tiny=True),
    ]


def _mel_inputs(bins: int, frames: int):
    def make(batch: int, seed: int) -> Inputs:
        return Inputs((torch.randn(batch, bins, frames, generator=_gen(batch, seed)),))

    return make
