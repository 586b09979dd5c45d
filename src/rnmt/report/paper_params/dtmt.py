"""DTMT paper, Tables 1 and 3 (NIST Zh-En; embeddings and hidden layers 1024; 16 attention heads).

Vocabulary: the paper gives 30K BPE *merge operations* per side, not a vocabulary size; a 30K-merge
vocabulary holds the merges plus the base symbols (thousands of characters for Chinese). The
reference repository ships its vocabularies as vocab_32k.ch / vocab_32k.en, so 32,768 per side is
assumed. At exactly 30,000 every row is about 6% below the paper (the output layer and both
embeddings scale with the vocabulary).
"""

from rnmt.report.paper_params import ParamRow

V = 32_768
NOTE = "V=32768 per side (reference repo vocab_32k.*; the paper states 30K merges)"


def row(table: str, system: str, paper: float, cell: str, depth: int) -> ParamRow:
    arch = "shallow-rnmt" if depth == 0 else "dtmt"
    settings = {"cell": cell, "emb": 1024, "hidden": 1024, **({"depth": depth} if depth else {})}
    return ParamRow(table, system, paper, arch, settings, V, V, NOTE)


ROWS = [
    row("dtmt-table1", "ShallowRNMT", 143.2, "gru", 0),
    row("dtmt-table1", "DTMT#1", 170.5, "lgru", 1),
    row("dtmt-table1", "DTMT#4", 208.4, "lgru", 4),
    row("dtmt-table3", "ShallowRNMT GRU", 143.2, "gru", 0),
    row("dtmt-table3", "ShallowRNMT LAU", 157.9, "lau", 0),
    row("dtmt-table3", "ShallowRNMT L-GRU", 157.9, "lgru", 0),
    row("dtmt-table3", "DTMT#1 GRU+T-GRU", 155.8, "gru", 1),
    row("dtmt-table3", "DTMT#1 LAU+T-GRU", 170.5, "lau", 1),
    row("dtmt-table3", "DTMT#1 L-GRU+T-GRU", 170.5, "lgru", 1),
    row("dtmt-table3", "DTMT#4 GRU+T-GRUs", 193.7, "gru", 4),
    row("dtmt-table3", "DTMT#4 LAU+T-GRUs", 208.4, "lau", 4),
    row("dtmt-table3", "DTMT#4 L-GRU+T-GRUs", 208.4, "lgru", 4),
]
