"""Scoring translations: sacrebleu BLEU (detokenized and tokenized) and chrF."""

# The source a metrics file's scores are computed by (relative to the rnmt package): this package and what
# its scoring modules import of rnmt at their top. The score rule carries its digest, so a change to it
# scores every translation again (tests/test_imports.py checks that the list misses no such module).
SCORED_BY = ("evaluate", "data/tokenize.py", "io.py")
