"""Dependency parsing with stanza for the source-label factor (UD paper): models, training, parsing."""
