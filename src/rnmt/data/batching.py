"""Parallel data as token ids, length-bucketed batches and padding."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from rnmt.data.bpe import SEPARATOR
from rnmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab
from rnmt.io import InputError, read_parallel

log = logging.getLogger(__name__)


def count_words(subword_line: str) -> int:
    """Words before BPE in a segmented line: subwords that do not continue into the next one."""
    return sum(1 for t in subword_line.split() if not t.endswith(SEPARATOR))


@dataclass
class ParallelData:
    src: list[list[int]]
    tgt: list[list[int]]
    src_words: list[int]
    tgt_words: list[int]
    src_labels: list[list[int]] | None = None     # one label id per source subword (factored input)
    lines: list[int] | None = None                # each pair's line in the files (0-based), where read from them
    file_lines: int | None = None                 # the lines of the files they were read from

    def __len__(self) -> int:
        return len(self.src)


def load_labels(labels_path: str | Path, src_path: str | Path, src_lines: Sequence[str],
                label_vocab: Vocab) -> list[list[int]]:
    """Label ids per source line, each line as long as its subwords (checked, naming the sentence)."""
    from rnmt.data.labels import read_labels

    lines = read_labels(labels_path, [len(x.split()) for x in src_lines], str(src_path))
    return [[label_vocab.stoi.get(t, UNK_ID) for t in lab] for lab in lines]


def load_parallel(src_path: str | Path, tgt_path: str | Path, src_vocab: Vocab, tgt_vocab: Vocab,
                  max_len: int | None = None, src_labels: str | Path | None = None,
                  label_vocab: Vocab | None = None, max_len_unit: str = "subwords") -> ParallelData:
    """Read segmented parallel files; pairs with an empty side or a side longer than `max_len` are skipped,
    counted in subwords or, with `max_len_unit="words"`, in the words before BPE (ATR section 4.1's
    "maximum length of training instances to 80 words").

    With `src_labels` (a label file aligned with the source) each source subword also gets a label id.
    """
    src_lines, tgt_lines = read_parallel(src_path, tgt_path)
    labels = load_labels(src_labels, src_path, src_lines, label_vocab or Vocab(SPECIALS)) \
        if src_labels is not None else None
    data = ParallelData([], [], [], [], [] if labels is not None else None, [], len(src_lines))
    empty = long = 0
    for k, (s, t) in enumerate(zip(src_lines, tgt_lines, strict=True)):
        si, ti = src_vocab.encode(s), tgt_vocab.encode(t)
        if not si or not ti:
            empty += 1
            continue
        words = count_words(s), count_words(t)
        if max_len is not None and max(words if max_len_unit == "words" else (len(si), len(ti))) > max_len:
            long += 1
            continue
        if labels is not None and data.src_labels is not None:
            data.src_labels.append(labels[k])
        data.src.append(si)
        data.tgt.append(ti)
        data.lines.append(k)                      # type: ignore[union-attr]
        data.src_words.append(words[0])
        data.tgt_words.append(words[1])
    if empty or long:
        log.info("%s / %s: %d pairs with an empty side and %d longer than max_len=%s %s skipped, %d kept",
                 src_path, tgt_path, empty, long, max_len, max_len_unit, len(data.src))
    if not data.src:
        raise InputError(f"{src_path} / {tgt_path}: no sentence pair left ({len(src_lines)} lines: {empty} with an "
                         f"empty side, {long} longer than max_len={max_len}); check the files, or raise max_len")
    return data


def epoch_batches(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], batch_size: int, batch_tokens: int,
                  rng: random.Random) -> list[list[int]]:
    """One epoch's batches of a parallel corpus: by padded tokens where `batch_tokens` is set, else
    `batch_size` sentences of like target length."""
    if batch_tokens:
        return list(token_batches([len(x) for x in src], [len(x) for x in tgt], batch_tokens, rng))
    return list(bucketed_batches([len(t) for t in tgt], batch_size, rng))


def bucketed_batches(lengths: Sequence[int], batch_size: int, rng: random.Random,
                     bucket_batches: int = 20) -> Iterator[list[int]]:
    """Shuffle, sort windows of `bucket_batches` batches by length, cut batches, shuffle batches."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * bucket_batches
    batches: list[list[int]] = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w:w + window], key=lambda i: lengths[i])
        batches += [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    yield from batches


def token_batches(src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_tokens: int, rng: random.Random,
                  window: int = 100_000) -> Iterator[list[int]]:
    """Length-bucketed batches of at most `max_tokens` padded tokens per side (DTMT: 4096 per GPU).

    Sentences are shuffled, sorted by length within windows, and cut so that (sentences in the batch)
    × (longest side + 1) stays within the budget; the batches are then shuffled.
    """
    order = list(range(len(src_lengths)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w:w + window], key=lambda i: (tgt_lengths[i], src_lengths[i]))
        batch: list[int] = []
        longest = 0
        for i in chunk:
            n = max(src_lengths[i], tgt_lengths[i]) + 1
            if batch and (len(batch) + 1) * max(longest, n) > max_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    yield from batches


def pad(seqs: Sequence[Sequence[int]], bos: bool = False, eos: bool = False) -> tuple[Tensor, Tensor]:
    """Right-pad id sequences into [B, T] with optional <s>/</s>; returns (ids, mask of real tokens)."""
    seqs = [([BOS_ID] if bos else []) + list(s) + ([EOS_ID] if eos else []) for s in seqs]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, ids != PAD_ID


@dataclass
class Batch:
    src: Tensor
    src_mask: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_tokens: int
    src_words: int
    tgt_words: int

    def to(self, device: torch.device) -> Batch:
        return Batch(self.src.to(device), self.src_mask.to(device), self.tgt_in.to(device),
                     self.tgt_out.to(device), self.tgt_tokens, self.src_words, self.tgt_words)


def pad_source(seqs: Sequence[Sequence[int]], labels: Sequence[Sequence[int]] | None = None) -> tuple[Tensor, Tensor]:
    """Source ids [B, S] with </s>, or [B, S, 2] (word, label) with labels (</s> gets the label </s>)."""
    src, mask = pad(seqs, eos=True)
    if labels is None:
        return src, mask
    lab, _ = pad(labels, eos=True)
    if lab.shape != src.shape:
        raise InputError(f"source labels of shape {tuple(lab.shape)} for source ids of shape {tuple(src.shape)}: "
                         "each source subword needs exactly one label")
    return torch.stack([src, lab], -1), mask


def make_batch(data: ParallelData, idx: Sequence[int]) -> Batch:
    labels = [data.src_labels[i] for i in idx] if data.src_labels is not None else None
    src, src_mask = pad_source([data.src[i] for i in idx], labels)
    tgt_in, _ = pad([data.tgt[i] for i in idx], bos=True)
    tgt_out, tgt_mask = pad([data.tgt[i] for i in idx], eos=True)
    return Batch(src, src_mask, tgt_in, tgt_out, int(tgt_mask.sum()),
                 sum(data.src_words[i] for i in idx), sum(data.tgt_words[i] for i in idx))
