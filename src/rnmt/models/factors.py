"""The `factors` model setting as users write it, turned into what the architectures take.

    factors: {dims: [word_dim, label_dim], combine: concat|sum}   (UD paper: [150, 50], concat), or
    factors: {dims: [label_dim], combine: ...}                     (the word size stays `emb`)

With one size more than there are label vocabularies, the first is the word embedding's (it replaces
`emb`; for the transformer, whose embedding size is d_model, concatenated sizes must add up to d_model
and summed ones equal it). The label vocabulary's size is filled in from the label vocabulary file.
The result is stored in checkpoints, so a model rebuilt for decoding needs no label files.
"""

from __future__ import annotations

import inspect
from typing import Any

from rnmt.io import InputError
from rnmt.models.registry import MODELS


def resolve(model_config: dict[str, Any], label_vocab_sizes: list[int]) -> dict[str, Any]:
    """A model config with `factors` in the architectures' form ({vocab_sizes, dims, combine})."""
    cfg = dict(model_config)
    f = cfg.get("factors")
    if not f:
        if label_vocab_sizes:
            raise InputError("source labels were given but the model has no `factors` setting; add e.g. "
                             "model: {factors: {dims: [150, 50], combine: concat}}")
        return cfg
    if "vocab_sizes" in f:                      # already resolved (a checkpoint's config)
        return cfg
    dims = list(f.get("dims") or [])
    combine = f.get("combine", "concat")
    n = len(label_vocab_sizes)
    if not n or len(dims) not in (n, n + 1):
        raise InputError(f"model setting factors.dims {dims}: give one size per label vocabulary, optionally after "
                         f"the word size ({n} label vocabularies given: pass --src-label-vocab with the label files)")
    if combine not in ("concat", "sum"):
        raise InputError(f"model setting factors.combine must be concat or sum, not {combine!r}")
    arch = cfg.get("arch")
    params = inspect.signature(MODELS[arch].__init__).parameters if arch in MODELS else {}
    if len(dims) == n:                          # label sizes only: the word size is the architecture's own
        cfg["factors"] = {"vocab_sizes": list(label_vocab_sizes), "dims": dims, "combine": combine}
        return cfg
    if "d_model" in params:
        d_model = cfg.get("d_model", params["d_model"].default)
        total = sum(dims) if combine == "concat" else dims[0]
        if total != d_model:
            raise InputError(f"{arch}: factors.dims {dims} ({combine}) must give d_model = {d_model}")
    else:
        cfg["emb"] = dims[0]
    cfg["factors"] = {"vocab_sizes": list(label_vocab_sizes), "dims": dims[1:], "combine": combine}
    return cfg
