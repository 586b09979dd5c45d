"""Recurrent cells, one file each, available by name through the registry."""

from rnmt.cells import atr, gru, lau, lgru, lstm, ran, srnmt, sru, tgru, ud_gru, ud_lstm  # noqa: F401  (registers)
from rnmt.cells.base import RecurrentCell, run
from rnmt.cells.registry import CELLS, build_cell, register_cell

__all__ = ["CELLS", "RecurrentCell", "build_cell", "register_cell", "run"]
