"""Architecture registry: `@register_model("name")` on a Seq2Seq subclass makes it buildable by name. Importing
this module imports every module of rnmt.models (at its end), so each architecture's file registers itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

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
    except (TypeError, ValueError) as e:       # a setting the constructor lacks, or values that do not fit
        raise InputError(f"architecture {arch!r}: {e}") from None


def check_model(arch: str, **settings: Any) -> None:
    """Build the model on PyTorch's meta device (no memory, no weights), raising InputError for settings
    that do not build."""
    with torch.device("meta"), _NoFill():
        build_model(arch, 64, 64, **settings)


class _NoFill(TorchFunctionMode):
    """Meta tensors hold no values, so filling them is skipped: torch runs the meta device's random fills
    through its Python reference kernels, which cost most of building 57 models (5.7 s of 5.9 s, importing
    torch._dynamo included) in every `snakemake` command; skipped, 0.59 s (benchmarks/README.md)."""

    FILLS = {"normal_", "uniform_", "fill_", "zero_"}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")       # torch.nn.init passes it by name
        if getattr(func, "__name__", "") in self.FILLS and getattr(target, "is_meta", False):
            return target
        return func(*args, **kwargs)


def model_defaults(arch: str) -> tuple[str, dict[str, Any]]:
    """(where they are written, the defaults of the model settings architecture `arch`'s constructor takes):
    a subclass's default over its parent's."""
    import inspect

    cls = MODELS[arch]
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters
        for n, p in params.items():
            if p.default is not p.empty:
                out.setdefault(n, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return f"{cls.__name__} in {cls.__module__}", out


def accepted_settings(arch: str) -> set[str] | None:
    """The model settings an architecture's constructor takes (None: it takes any, or is unknown)."""
    import inspect

    if arch not in MODELS:
        return None
    cls = MODELS[arch]
    names: set[str] = set()
    for klass in cls.__mro__:                      # subclasses that pass **settings on take their parent's
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters
        names |= {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD} - {"self", "src_vocab_size",
                                                                                  "tgt_vocab_size"}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names
    return None


def _register_all() -> None:
    """Import every module of rnmt.models: each architecture's file registers itself, without a list to keep."""
    import importlib
    import pkgutil

    import rnmt.models

    for module in pkgutil.iter_modules(rnmt.models.__path__):
        importlib.import_module(f"rnmt.models.{module.name}")


_register_all()
