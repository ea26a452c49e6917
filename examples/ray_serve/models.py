"""The served models, built the same way in every process (fixed seeds, random weights, no
downloads): ResNet-50 (the bench's torchvision-equivalent definition, bench/verifuse_bench/models.py)
and BERT-base (transformers ``BertModel`` with its default, bert-base-uncased sized config)."""
from __future__ import annotations

import os

import torch
import torch.nn as nn

BERT_SEQ = 128


class BertEncoder(nn.Module):
    """BERT-base taking token ids, returning the last hidden state (a tensor, not a ModelOutput)."""

    def __init__(self) -> None:
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import transformers

        transformers.logging.set_verbosity_error()
        self.bert = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).last_hidden_state


def build(name: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """(model in eval mode, one example input)."""
    torch.manual_seed(seed)
    if name == "resnet50":
        from verifuse_bench.models import resnet50

        return resnet50().eval(), inputs(name, 1)[0]
    if name == "bert":
        return BertEncoder().eval(), inputs(name, 1)[0]
    raise ValueError(f"unknown model {name!r}; expected resnet50 or bert")


def inputs(name: str, count: int, seed: int = 1) -> list[torch.Tensor]:
    """``count`` distinct request payloads (batch 1)."""
    g = torch.Generator().manual_seed(seed)
    if name == "resnet50":
        return [torch.randn(1, 3, 224, 224, generator=g) for _ in range(count)]
    if name == "bert":
        return [torch.randint(1000, 30000, (1, BERT_SEQ), generator=g) for _ in range(count)]
    raise ValueError(name)


# Output tolerance against eager (float32; verifuse's folds are exact over the reals, not bit-exact).
TOLERANCE = {"resnet50": dict(atol=2e-3, rtol=1e-3), "bert": dict(atol=2e-3, rtol=1e-3)}
