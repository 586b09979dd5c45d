"""Architecture registry: `@register_model("name")` on a Seq2Seq subclass makes it buildable by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rnmt.io import InputError
from rnmt.models.base import Seq2Seq

MODELS: dict[str, type[Seq2Seq]] = {}


def register_model(name: str) -> Callable[[type[Seq2Seq]], type[Seq2Seq]]:
    def add(cls: type[Seq2Seq]) -> type[Seq2Seq]:
        if name in MODELS:
            raise ValueError(f"architecture {name!r} registered twice")
        MODELS[name] = cls
        return cls
    return add


def build_model(arch: str, src_vocab_size: int, tgt_vocab_size: int, **settings: Any) -> Seq2Seq:
    if arch not in MODELS:
        raise InputError(f"unknown architecture {arch!r}; valid architectures: {', '.join(sorted(MODELS))}")
    try:
        return MODELS[arch](src_vocab_size, tgt_vocab_size, **settings)
    except TypeError as e:
        raise InputError(f"architecture {arch!r}: {e}") from None
