"""The UD paper's single-product GRU: its paths, coupled or not (the shared checks take `CASES`:
tests/cellcases.py)."""

from cellcases import Case

CASES = {"ud-gru": Case("ud-gru"), "ud-gru-uncoupled": Case("ud-gru", {"coupled": False}),
         "ud-gru-no-bias": Case("ud-gru", {"bias": False})}
