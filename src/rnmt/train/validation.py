"""Validation during training: dev loss and a greedy dev BLEU, the signals for the kept checkpoint,
patience and the learning curves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from rnmt.data.batching import ParallelData, make_batch
from rnmt.data.bpe import undo
from rnmt.data.vocab import EOS_ID, Vocab
from rnmt.decode import graphs
from rnmt.decode.translate import translate_ids
from rnmt.io import InputError, read_lines, with_extra_references
from rnmt.models import Seq2Seq
from rnmt.train.loss import token_loss


@torch.no_grad()
def dev_loss(model: Seq2Seq, data: ParallelData, batch_size: int, device: torch.device) -> float:
    """Mean per-token cross-entropy on `data` (no label smoothing, no dropout)."""
    was = model.training
    model.eval()
    total, tokens = 0.0, 0
    order = sorted(range(len(data)), key=lambda i: len(data.src[i]))
    for s in range(0, len(order), batch_size):
        b = make_batch(data, order[s:s + batch_size]).to(device)
        logits = model(b.src, b.src_mask, b.tgt_in)
        total += float(token_loss(logits, b.tgt_out))
        tokens += b.tgt_tokens
    model.train(was)
    return total / max(tokens, 1)


# A model whose lowest dev loss stays above this share of `frequency_loss` has not begun to translate: the
# DTMT runs that stayed on the plateau sat within 2% of it, and every model that learned on Multi30k was at
# least 24% below it at its first validation (benchmarks/README.md, "DTMT's deep transitions at `mini`")
UNLEARNED = 0.95
FREQUENCY_SENTENCES = 200_000


def frequency_loss(train: ParallelData, dev: ParallelData, vocab_size: int) -> float:
    """The dev loss of word frequencies alone: the mean per-token cross-entropy of the dev targets (each
    sentence's subwords and its end, as `dev_loss` scores them) under the training targets' subword
    frequencies (evenly sampled beyond FREQUENCY_SENTENCES sentences), add-one smoothed over the
    vocabulary. A model whose dev loss is no lower predicts no better than a distribution that ignores both
    the source and the words before: it has not learned to translate (a deep model can sit on this plateau
    for its whole run)."""
    def tokens(sentences: Sequence[list[int]]) -> torch.Tensor:
        return torch.tensor([t for sentence in sentences for t in (*sentence, EOS_ID)], dtype=torch.long)

    # every k-th training sentence, at most FREQUENCY_SENTENCES of them: a paper-scale corpus's frequencies
    # settle long before its millions of sentences, which would take a minute to count one by one
    every = max(1, -(-len(train.tgt) // FREQUENCY_SENTENCES))
    counts = torch.bincount(tokens(train.tgt[::every]), minlength=vocab_size).double() + 1.0
    log_p = counts.log() - counts.sum().log()
    scored = tokens(dev.tgt)
    return float(-log_p[scored].sum()) / max(scored.numel(), 1)


def stalled(loss: float, frequency: float) -> bool:
    """Whether a dev loss is not yet UNLEARNED below `frequency` (`frequency_loss`): no model has learned."""
    return loss > UNLEARNED * frequency


def learning(curve: Sequence[Mapping[str, Any]], frequency: float) -> tuple[dict[str, Any], list[str]]:
    """train.json's record of whether the model learned to translate (its validations' lowest dev loss
    against `frequency`), and the warning a model that did not gets."""
    lowest = min((r["dev_loss"] for r in curve), default=math.inf)
    record = {"frequency_dev_loss": round(frequency, 4), "lowest_dev_loss": round(lowest, 4),
              "learned": not stalled(lowest, frequency)}
    return record, [] if record["learned"] else [
        f"the model did not learn to translate: its lowest dev loss, {lowest:.3f}, was not {1 - UNLEARNED:.0%} "
        f"below {frequency:.3f}, the dev loss of the training targets' word frequencies alone, so its scores say "
        "nothing of its architecture (train it again, e.g. with a lower train.lr)"]


def dev_bleu(model: Seq2Seq, data: ParallelData, tgt_vocab: Vocab, device: torch.device,
             batch_size: int, extra_refs: Sequence[Sequence[str]] = ()) -> float:
    """Greedy tokenized BLEU on the dev set, subwords joined (a cheap progress signal and, where the
    checkpoint is kept by dev BLEU, the model selection): against the dev target and each of
    `extra_refs`, the further tokenized references of a multi-reference dev set (NIST MT06: four in
    all), each a line per pair of `data`."""
    hyps = translate_ids(model, data.src, beam=1, batch_size=batch_size, device=device, labels=data.src_labels)
    graphs.release(model)                  # training goes on: the decoding's graphs leave the GPU
    sys_lines = [undo(tgt_vocab.decode(h)) for h in hyps]
    refs = [undo(tgt_vocab.decode(t)) for t in data.tgt]
    return sacrebleu.corpus_bleu(sys_lines, [refs, *map(list, extra_refs)], tokenize="none", force=True).score


def extra_references(dev_ref: Path, data: ParallelData) -> dict[Path, list[str]]:
    """The extra references beside the tokenized dev reference `dev_ref` (`<dev_ref>.ref1`, `.ref2`, ...:
    written by the data stage for a multi-reference dev set), each cut to the pairs `data` kept of the
    dev files' lines."""
    dev_lines = data.file_lines
    out = {}
    for path in map(Path, with_extra_references([str(dev_ref)])[1:]):
        lines = read_lines(path)
        if data.lines is None or dev_lines is None or len(lines) != dev_lines:
            raise InputError(f"{path}: {len(lines)} lines, but the dev set has {dev_lines}: the extra reference "
                             "belongs to another dev set. Prepare the corpus again (snakemake reruns its data "
                             "jobs when their files change; or delete results/<run>/data/<corpus>)")
        out[path] = [lines[i] for i in data.lines]
    return out
