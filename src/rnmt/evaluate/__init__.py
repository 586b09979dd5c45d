"""Scoring translations: sacrebleu BLEU (detokenized and tokenized) and chrF."""

# The source a metrics file's scores are computed by (relative to the rnmt package): the scoring modules and
# what they import of rnmt at their top. The score rule carries its digest, so a change to it scores every
# translation again (tests/test_imports.py checks that the list misses no such module).
SCORED_BY = ("evaluate/__init__.py", "evaluate/metrics.py", "evaluate/score.py", "evaluate/metric_names.py",
             "data/tokenize.py", "io.py")
