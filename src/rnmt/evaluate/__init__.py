"""Scoring translations: sacrebleu BLEU (detokenized and tokenized) and chrF."""
