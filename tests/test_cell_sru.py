"""The simple recurrent unit (SRU, SR-NMT Table 1's baseline): its paths (the shared checks take `CASES`:
tests/cellcases.py); the linear scan it runs on is tested in tests/test_cells_fast.py."""

from cellcases import Case

CASES = {"sru": Case("sru", path_inputs=(5, 6), autocast=True, triton=True)}
