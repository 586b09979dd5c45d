"""Search: batched beam search (greedy is beam 1) and translation of files."""

# The source a translation is computed by (relative to the rnmt package): the search, the models and cells it
# runs (their registries import every module of their folders), the machine's choice of paths, the data code
# that reads, writes and batches text, and what these import. The translate rule carries its digest (and the
# gates rule, which runs the models too, with evaluate/gates.py), so a change to it decodes every model again;
# the models themselves are not retrained (train.json names the commit that trained them).
# tests/test_imports.py checks that the list misses no module the decoding imports.
DECODED_BY = ("decode", "models", "cells", "machine", "data/__init__.py", "data/batching.py", "data/bpe.py",
              "data/clean.py", "data/conll.py", "data/labels.py", "data/settings.py", "data/tokenize.py",
              "data/truecase.py", "data/vocab.py", "energies.py", "io.py", "progress.py", "provenance.py",
              "settings.py")
