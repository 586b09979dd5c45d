"""Translate many sentences: sort by length, batch, beam-search, restore the input order."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from tqdm import tqdm

from rnmt import provenance
from rnmt.data.batching import count_words, load_labels, pad_source
from rnmt.decode import graphs
from rnmt.decode.beam import Finished, beam_search, nbest_search
from rnmt.decode.ensemble import load_ensemble_with_labels
from rnmt.decode.settings import DEFAULT
from rnmt.io import InputError, read_lines, write_lines
from rnmt.machine import fastpath, hardware
from rnmt.models.base import Seq2Seq
from rnmt.progress import clock

log = logging.getLogger(__name__)

# the decoding settings (translate_file's keyword arguments; translate_ids calls length_penalty `penalty`),
# as a row's `decode:` block, a bundle's manifest and `rnmt translate`'s options name them
D = DEFAULT        # every default below is DecodeSettings'


def translate_ids(model: Seq2Seq, sources: Sequence[Sequence[int]], beam: int = D.beam,
                  batch_size: int = D.batch_size, max_len_ratio: float = D.max_len_ratio,
                  max_len_extra: int = D.max_len_extra, penalty: str = D.length_penalty, alpha: float = D.alpha,
                  device: torch.device | str = "cpu", progress: bool = False,
                  labels: Sequence[Sequence[int]] | None = None,
                  greedy_floor: bool = D.greedy_floor, cuda_graphs: bool = D.cuda_graphs,
                  tf32: bool = D.tf32) -> list[list[int]]:
    """Token ids in, token ids out (without </s>); at most ratio·|source| + extra target tokens each.

    `labels`: one label id per source token (factored models), aligned with `sources`; `tf32`: on CUDA, the
    products torch hands to cuBLAS in TF32 (rnmt.machine.hardware.tf32_products).
    """
    def search(src: torch.Tensor, mask: torch.Tensor, limits: torch.Tensor) -> list[list[int]]:
        return [hyp for hyp, _ in beam_search(model, src, mask, beam, limits, penalty, alpha, greedy_floor,
                                              cuda_graphs)]

    return _decode(model, sources, search, beam, batch_size, max_len_ratio, max_len_extra, device, progress,
                   labels, tf32)


def translate_nbest(model: Seq2Seq, sources: Sequence[Sequence[int]], nbest: int, beam: int = D.beam,
                    batch_size: int = D.batch_size, max_len_ratio: float = D.max_len_ratio,
                    max_len_extra: int = D.max_len_extra, penalty: str = D.length_penalty, alpha: float = D.alpha,
                    device: torch.device | str = "cpu", progress: bool = False,
                    labels: Sequence[Sequence[int]] | None = None,
                    greedy_floor: bool = D.greedy_floor, cuda_graphs: bool = D.cuda_graphs,
                    tf32: bool = D.tf32) -> list[list[Finished]]:
    """`translate_ids`' search keeping each sentence's `nbest` best hypotheses: (normalised score, log p,
    token ids), best first (the first is translate_ids' answer); nbest_search checks 1 <= nbest <= beam."""
    def search(src: torch.Tensor, mask: torch.Tensor, limits: torch.Tensor) -> list[list[Finished]]:
        return nbest_search(model, src, mask, nbest, beam, limits, penalty, alpha, greedy_floor, cuda_graphs)

    return _decode(model, sources, search, beam, batch_size, max_len_ratio, max_len_extra, device, progress,
                   labels, tf32)


T = TypeVar("T")


def _decode(model: Seq2Seq, sources: Sequence[Sequence[int]],
            search: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], list[T]], beam: int, batch_size: int,
            max_len_ratio: float, max_len_extra: int, device: torch.device | str, progress: bool,
            labels: Sequence[Sequence[int]] | None, tf32: bool) -> list[T]:
    """`search` over the sentences sorted by length in batches of `batch_size`, in the input's order, with the
    products `tf32` asks for."""
    with hardware.tf32_products(torch.device(device), tf32):
        was_training = model.training
        model.eval()
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        out: list[Any] = [None] * len(sources)
        bar = tqdm(total=len(sources), desc="decode", unit="sent", disable=None if progress else True,
                   mininterval=2.0)
        # off a terminal (a job log) a line at every tenth of the sentences instead of the bar
        log_lines = progress and bar.disable
        t0, next_log = time.perf_counter(), len(sources) / 10
        # sentences go shortest first, so the time left is estimated from the source tokens still to decode
        total_tokens, done_tokens = sum(len(s) for s in sources), 0
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            src, mask = pad_source([sources[i] for i in idx],
                                   [labels[i] for i in idx] if labels is not None else None)
            src, mask = src.to(device), mask.to(device)
            limits = (mask.sum(1).float() * max_len_ratio + max_len_extra).long()
            for i, found in zip(idx, search(src, mask, limits), strict=True):
                out[i] = found
            bar.update(len(idx))
            done = start + len(idx)
            done_tokens += sum(len(sources[i]) for i in idx)
            if log_lines and (done >= next_log or done == len(sources)):
                seconds = time.perf_counter() - t0
                left = seconds * (total_tokens - done_tokens) / max(done_tokens, 1)
                log.info("decoded %d of %d sentences (%.0f%%), %.1f sentences/s, beam %d | %s, about %s left", done,
                         len(sources), 100 * done / len(sources), done / max(seconds, 1e-9), beam, clock(seconds),
                         clock(left))
                next_log = done + len(sources) / 10
        bar.close()
        model.train(was_training)
        return out


def note_tf32(tf32: bool, device: torch.device) -> None:
    """Say so where TF32 is asked for off CUDA, where the products stay float32."""
    if tf32 and not hardware.tf32_on(device, tf32):
        log.warning("decode setting tf32 applies on CUDA only: on %s the products stay float32", device)


def translate_file(models: Sequence[str], input: str, output: str, device: torch.device, beam: int = D.beam,
                   batch_size: int = D.batch_size, max_len_ratio: float = D.max_len_ratio,
                   max_len_extra: int = D.max_len_extra, length_penalty: str = D.length_penalty,
                   alpha: float = D.alpha, src_labels: str | None = None, speed_beams: Sequence[int] = (),
                   greedy_floor: bool = D.greedy_floor, cuda_graphs: bool = D.cuda_graphs,
                   tf32: bool = D.tf32) -> dict[str, Any]:
    """Translate a segmented source file with one model or an ensemble of `models` into `output`.

    Returns the decoding's metrics: settings, and the speed at `beam` and at each of `speed_beams`
    (`*_beam<k>`; ATR Table 4's speed columns are at beam 1), timed after start-up with the device
    synchronised.
    """
    note_tf32(tf32, device)
    model, src_vocab, tgt_vocab, label_vocab = load_ensemble_with_labels(list(models), device)
    lines = read_lines(input)
    sources = [src_vocab.encode(line) for line in lines]
    unknown, warning = src_vocab.unknown_warning(sources, input)
    if warning:
        log.warning("%s", warning)
    if label_vocab is not None and not src_labels:
        raise InputError(f"{models[0]} was trained with source dependency labels: give this test set's label file "
                         "with --src-labels (labels/<source>/<split>.bpe.lab, aligned with the input)")
    if label_vocab is None and src_labels:
        raise InputError(f"{models[0]} takes words only (trained without labels); leave out --src-labels")
    labels = load_labels(src_labels, input, lines, label_vocab) if label_vocab is not None else None

    def timed(beam: int, progress: bool) -> tuple[list[str], dict[str, float]]:
        t0, measuring0 = time.perf_counter(), fastpath.measuring_seconds()
        hyps = translate_ids(model, sources, beam=beam, batch_size=batch_size, max_len_ratio=max_len_ratio,
                             max_len_extra=max_len_extra, penalty=length_penalty, alpha=alpha, device=device,
                             progress=progress, labels=labels, greedy_floor=greedy_floor, cuda_graphs=cuda_graphs,
                             tf32=tf32)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0 - (fastpath.measuring_seconds() - measuring0)   # decoding's own time
        out = [tgt_vocab.decode(h) for h in hyps]
        words = sum(count_words(line) for line in out)
        return out, {"decode_seconds": seconds, "words": words,
                     "decode_words_per_s": words / seconds if seconds else 0.0,
                     "decode_seconds_per_sentence": seconds / max(len(lines), 1)}

    out, speed = timed(beam, progress=True)
    write_lines(output, out)
    metrics: dict[str, Any] = {"beam": beam, "batch_size": batch_size, "length_penalty": length_penalty,
                               "alpha": alpha, "greedy_floor": greedy_floor, "tf32": tf32,
                               # what cuBLAS's products took: TF32 where asked for on CUDA, else float32
                               "products": "tf32" if hardware.tf32_on(device, tf32) else "float32",
                               "models": len(models),
                               "sentences": len(lines), "src_unknown_share": round(unknown, 4),
                               "warnings": [warning] if warning else [], **speed}
    for k in speed_beams:
        extra = speed if k == beam else timed(k, progress=False)[1]
        metrics.update({f"{name}_beam{k}": v for name, v in extra.items() if name.startswith("decode_")})
    graphed = graphs.decoder(model, device) if cuda_graphs else None
    metrics["cuda_graphs"] = graphed.summary() if graphed is not None else {
        "off": f"the device is {device.type}, not CUDA" if cuda_graphs else "the setting cuda_graphs is off"}
    graphs.release(model)
    metrics["hardware"] = provenance.describe(device)
    return metrics
