"""Architectures, one file each, buildable by name through the registry.

Every module of this package is imported here, so a new architecture's file registers itself
(`@register_model`) without a list to keep."""

import importlib
import pkgutil

from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.registry import MODELS, build_model, register_model

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MODELS", "DecoderState", "Seq2Seq", "build_model", "register_model"]
