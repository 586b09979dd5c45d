"""Recurrent cells, one file each, available by name through the registry.

Every module of this package is imported here, so a new cell's file registers itself
(`@register_cell`) without a list to keep."""

import importlib
import pkgutil

from rnmt.cells.base import RecurrentCell, run
from rnmt.cells.registry import CELLS, build_cell, register_cell

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CELLS", "RecurrentCell", "build_cell", "register_cell", "run"]
