"""Cell registry: `@register_cell("name")` on a RecurrentCell subclass makes it available by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rnmt.cells.base import RecurrentCell
from rnmt.io import InputError

CELLS: dict[str, type[RecurrentCell]] = {}


def register_cell(name: str) -> Callable[[type[RecurrentCell]], type[RecurrentCell]]:
    def add(cls: type[RecurrentCell]) -> type[RecurrentCell]:
        if name in CELLS:
            raise ValueError(f"cell {name!r} registered twice")
        CELLS[name] = cls
        return cls
    return add


def build_cell(name: str, input_size: int, hidden_size: int, **options: Any) -> RecurrentCell:
    if name not in CELLS:
        raise InputError(f"unknown cell {name!r}; valid cells: {', '.join(sorted(CELLS))}")
    return CELLS[name](input_size, hidden_size, **options)
