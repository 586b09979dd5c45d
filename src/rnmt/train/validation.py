"""Validation during training: dev loss and a greedy dev BLEU, the signals for the kept checkpoint,
patience and the learning curves."""

from __future__ import annotations

import sacrebleu
import torch

from rnmt.data.batching import ParallelData, make_batch
from rnmt.data.bpe import undo
from rnmt.data.vocab import Vocab
from rnmt.decode.translate import translate_ids
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


def dev_bleu(model: Seq2Seq, data: ParallelData, tgt_vocab: Vocab, device: torch.device,
             batch_size: int) -> float:
    """Greedy tokenized BLEU on the dev set, subwords joined (a cheap progress signal)."""
    hyps = translate_ids(model, data.src, beam=1, batch_size=batch_size, device=device, labels=data.src_labels)
    sys_lines = [undo(tgt_vocab.decode(h)) for h in hyps]
    refs = [undo(tgt_vocab.decode(t)) for t in data.tgt]
    return sacrebleu.corpus_bleu(sys_lines, [refs], tokenize="none", force=True).score
