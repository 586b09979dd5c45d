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

SYSTEMS = {"dtmt-table1": ("ShallowRNMT", "DTMT#1", "DTMT#4"),
           "dtmt-table3": ("ShallowRNMT GRU", "ShallowRNMT LAU", "ShallowRNMT L-GRU", "DTMT#1 GRU+T-GRU",
                           "DTMT#1 LAU+T-GRU", "DTMT#1 L-GRU+T-GRU", "DTMT#4 GRU+T-GRUs", "DTMT#4 LAU+T-GRUs",
                           "DTMT#4 L-GRU+T-GRUs")}
ROWS = [ParamRow(table, system, V, V, NOTE) for table, systems in SYSTEMS.items() for system in systems]
