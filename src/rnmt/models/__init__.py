"""Architectures, one file each, buildable by name through the registry."""

from rnmt.models import dtmt, gnmt, rnnsearch, seq2seq, srnmt, stacked, transformer  # noqa: F401  (registers)
from rnmt.models.base import DecoderState, Seq2Seq
from rnmt.models.registry import MODELS, build_model, register_model

__all__ = ["MODELS", "DecoderState", "Seq2Seq", "build_model", "register_model"]
