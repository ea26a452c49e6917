"""Backend options, parsed once per torch.compile call into an immutable object.

Options travel in ``torch.compile(m, backend="verifuse", options={...})``, never in global torch
config: dynamo/inductor config is per-thread in torch 2.12+.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional

__all__ = ["Options", "OptionsError"]

_VERIFY_LEVELS = ("off", "rules", "instances")
_DTYPES = ("float32", "bfloat16")
_LINEAR_WEIGHTS = ("auto", "packed", "in-place")


class OptionsError(ValueError):
    """An unknown option or a bad option value."""


@dataclasses.dataclass(frozen=True)
class Options:
    verify: str = "instances"
    autotune: bool = True
    strict: bool = False
    cache_dir: str = dataclasses.field(
        default_factory=lambda: os.environ.get(
            "VERIFUSE_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "verifuse")
        )
    )
    dtype: str = "float32"
    # End-to-end Z3 check of folded layers with at most 4,096 weights (verify="instances"): how
    # many weights one compile may check, in graph order. It costs about 0.06 ms per weight, so the
    # default covers one full-size layer (ResNet-50's 64x64 conv); -1: no limit, 0: off.
    layer_check_weights: int = 4096
    # How linears on oneDNN hold their weights: "packed" (a prepacked copy: faster on AVX-512 CPUs,
    # twice the weight memory), "in-place" (the parameters themselves: weights held once), or
    # "auto" (timed per shape when autotuning, below 256 rows; packed on AVX-512 otherwise).
    # explain() reports the copies each partition holds.
    linear_weights: str = "auto"

    @classmethod
    def valid_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def parse(cls, options: Optional[Mapping[str, Any]]) -> "Options":
        """Validates a user options dict. Raises OptionsError naming the valid options."""
        options = dict(options or {})
        valid = cls.valid_names()
        unknown = sorted(k for k in options if k not in valid)
        if unknown:
            raise OptionsError(
                f"verifuse: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"valid options are: {', '.join(valid)}"
            )
        if os.environ.get("VERIFUSE_STRICT") == "1":
            options.setdefault("strict", True)
        parsed = cls(**options)
        parsed._validate()
        return parsed

    def _validate(self) -> None:
        if self.verify not in _VERIFY_LEVELS:
            raise OptionsError(f"verifuse: option verify={self.verify!r}; expected one of {_VERIFY_LEVELS}")
        if self.dtype not in _DTYPES:
            raise OptionsError(f"verifuse: option dtype={self.dtype!r}; expected one of {_DTYPES}")
        for name in ("autotune", "strict"):
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(f"verifuse: option {name} must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.layer_check_weights, bool) or not isinstance(self.layer_check_weights, int) \
                or self.layer_check_weights < -1:
            raise OptionsError("verifuse: option layer_check_weights must be an int >= -1 "
                               f"(-1: no limit), got {self.layer_check_weights!r}")
        if self.linear_weights not in _LINEAR_WEIGHTS:
            raise OptionsError(f"verifuse: option linear_weights={self.linear_weights!r}; expected one of "
                               f"{_LINEAR_WEIGHTS}")
        if not isinstance(self.cache_dir, (str, os.PathLike)):
            raise OptionsError(f"verifuse: option cache_dir must be a path, got {self.cache_dir!r}")
