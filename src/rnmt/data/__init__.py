"""Corpora: generation, tokenization, subwords, vocabularies and batching."""
