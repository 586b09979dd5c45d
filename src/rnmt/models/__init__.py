"""Architectures, one file each, buildable by name through the registry (rnmt.models.registry).

The registry imports every module of this package when it is first imported, so a new architecture's file
registers itself (`@register_model`) without a list to keep. The package itself imports nothing: planning
(every `snakemake` command) reads its model settings (rnmt.models.settings) and its catalog of
architectures (rnmt.models.catalog) without importing torch."""

from __future__ import annotations

from typing import Any

__all__ = ["MODELS", "DecoderState", "Seq2Seq", "build_model", "register_model"]


def __getattr__(name: str) -> Any:
    """The package's names, imported where first asked for."""
    if name in ("DecoderState", "Seq2Seq"):
        from rnmt.models import base
        return getattr(base, name)
    if name in ("MODELS", "build_model", "register_model"):
        from rnmt.models import registry
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
