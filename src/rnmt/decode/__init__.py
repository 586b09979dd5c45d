"""Search: batched beam search (greedy is beam 1) and translation of files."""
