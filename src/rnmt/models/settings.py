"""The model settings a config, a systems file or a table may give (`model:`), one typed class: each
setting's type, meaning and constraints, written once; the config schema's `model` block is generated
from it (rnmt.settings). Each architecture's constructor takes its own subset with its own defaults
(`rnmt explain` names them), so a setting here has no default of its own: None, on a type that is not
nullable, stands for the architecture's. tests/test_models.py keeps this class and the registered
constructors in step, both ways, names and types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rnmt.settings import setting

_MODULE = {"type": "object", "additionalProperties": False,
           "properties": {"cell": {"type": "string"}, "depth": {"type": "integer", "minimum": 0}}}


@dataclass(frozen=True)
class ModelSettings:
    emb: int = setting(None, "embedding size", minimum=1)
    hidden: int = setting(None, "recurrent state size", minimum=1)
    tgt_emb: int | None = setting(None, "seq2seq: target embedding size (null: emb)", minimum=1)
    layers: int = setting(None, "stacked layers (GNMT, deep RNNSearch, SR-NMT, stacked RNNs, Transformer)",
                          minimum=1)
    dec_layers: int | None = setting(None, "transformer: decoder layers (null: layers)", minimum=1)
    depth: int = setting(None, "DTMT: transition depth", minimum=1)
    d_model: int = setting(None, "transformer: model width", minimum=1)
    ffn: int = setting(None, "transformer: feed-forward width", minimum=1)
    heads: int = setting(None, "attention heads (DTMT, Transformer)", minimum=1)
    dropout: float = setting(None, "dropout rate (where each architecture applies it)", minimum=0, maximum=1)
    rnn_dropout: float = setting(None, "DTMT: dropout on the RNN candidate outputs", minimum=0, maximum=1)
    attention_dropout: float = setting(None, "transformer: dropout on the attention weights", minimum=0,
                                       maximum=1)
    tie_output: bool = setting(None, "the output layer shares the target embedding matrix")
    share_embeddings: bool = setting(None, "transformer: source and target share one embedding matrix")
    input_feeding: bool = setting(None, "stacked: the previous attentional output feeds the decoder")
    positional: bool = setting(None, "DTMT: positional encoding of the source")
    highway: bool = setting(None, "SR-NMT: highway connections")
    layer_norm: bool = setting(None, "SR-NMT: layer normalisation")
    multi_attention: bool = setting(None, "SR-NMT: attention in every decoder layer (off: the last only)")
    cell: str = setting(None, "a cell of src/rnmt/cells (gru, lstm, atr, ...)")
    cell_options: dict[str, Any] | None = setting(None, "the cell's own options (e.g. gate_norm, twin, bias, "
                                                        "reset)")
    gate_norm: bool = setting(None, "DTMT: per-gate layer norm in every cell, T-GRUs included")
    modules: dict[str, Any] | None = setting(
        None, "DTMT: a module's own bottom cell and transition depth, e.g. {query: {cell: gru, depth: 0}}",
        additionalProperties=False, properties={"encoder": _MODULE, "query": _MODULE, "decoder": _MODULE})
    encoder: str = setting(None, "RNNSearch: birnn, or ca (the context-aware encoder)")
    init: str = setting(None, "GNMT, deep RNNSearch: the decoder's initial state (zeros, bridge)")
    factors: dict[str, Any] | None = setting(None, "source factors: {dims: [50], combine: concat | sum}")
