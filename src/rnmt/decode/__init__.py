"""Search: batched beam search (greedy is beam 1) and translation of files."""

# The source a translation is computed by (relative to the rnmt package): `rnmt translate --model`'s search,
# the models and cells it runs (their registries import every module of their folders), the machine's choice
# of paths, the data code that reads and batches segmented text, and what these import. The translate rule
# carries its digest (and the gates rule, which runs the models too, with evaluate/gates.py), so a change to
# it decodes every model again; the models themselves are not retrained (train.json names the commit that
# trained them). tests/test_imports.py checks that the list misses no module the decoding imports.
DECODED_BY = ("decode/__init__.py", "decode/beam.py", "decode/commands.py", "decode/ensemble.py",
              "decode/graphs.py", "decode/select.py", "decode/settings.py", "decode/translate.py", "decode/triton",
              "models",
              "cells", "machine",
              "data/batching.py", "data/bpe.py", "data/conll.py", "data/labels.py", "data/settings.py",
              "data/vocab.py", "energies.py", "io.py", "progress.py", "provenance.py", "settings.py")
# and a translation's subwords joined and detokenized (`rnmt postprocess`), whose rule carries this digest
POSTPROCESSED_BY = ("decode/commands.py", "data/tokenize.py", "data/bpe.py", "data/settings.py", "io.py", "progress.py",
                    "settings.py")
