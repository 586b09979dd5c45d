"""The UD paper's single-product LSTM: its paths (the shared checks take `CASES`: tests/cellcases.py)."""

from cellcases import Case

CASES = {"ud-lstm": Case("ud-lstm"), "ud-lstm-no-bias": Case("ud-lstm", {"bias": False})}
