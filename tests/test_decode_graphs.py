"""Beam search through the graphed decoder's padded buffers (rnmt.decode.graphs) finds what the plain search
finds. On the CPU its steps run eagerly on the padded buffers, as a layout whose capture failed does on a
GPU; tests/test_cuda.py checks that a replay equals that eager step bit for bit."""

from __future__ import annotations

import random

import pytest
import torch

from rnmt.data.batching import pad
from rnmt.decode import beam, graphs
from rnmt.decode.beam import beam_search, nbest_search
from rnmt.decode.ensemble import Ensemble
from rnmt.models import build_model
from test_archs import ARCHS, AUTOCAST, SRC, source

CPU = torch.device("cpu")


def sentences(n: int, low: int, high: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 20) for _ in range(rng.randint(low, high))] for _ in range(n)]


def model_of(key: str) -> torch.nn.Module:
    arch, settings = AUTOCAST[key]
    torch.manual_seed(0)
    return build_model(arch, 20, 20, **settings).eval()


def search_both(model: torch.nn.Module, src: torch.Tensor, mask: torch.Tensor, beam: int,
                decoder: graphs.GraphedDecoder, **options) -> tuple[list, list]:
    limits = (mask.sum(1) * 2 + 3).long()
    plain = beam_search(model, src, mask, beam, limits, cuda_graphs=False, **options)
    padded = beam_search(model, src, mask, beam, limits, cuda_graphs=decoder, **options)
    return plain, padded


def assert_same_search(plain: list, padded: list) -> None:
    assert [h for h, _ in padded] == [h for h, _ in plain]
    for (_, a), (_, b) in zip(padded, plain, strict=True):
        assert abs(float(a) - float(b)) < 1e-5


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_every_architecture_searches_alike_through_padded_buffers(key: str) -> None:
    """The source padded to the next multiple of 8 (masked) and the hypotheses to a power of two change no
    architecture's hypotheses; the Transformer, whose state changes shape, steps as it is."""
    model = model_of(key)
    src, mask = source(key) if key in ARCHS else pad(SRC, eos=True)
    decoder = graphs.GraphedDecoder(model, CPU, capture=False)
    plain, padded = search_both(model, src, mask, 3, decoder)
    assert_same_search(plain, padded)
    if key == "transformer":        # its cache of target keys and values grows a step at a time
        assert "k0 [0, 12] → [1, 12]" in decoder.summary()["off"] and decoder.eager == 0
        assert not decoder.inputs and not decoder.graphs                 # no buffers kept for it
    else:
        assert decoder.eager > 0 and decoder.captured == 0 and not decoder.unsupported


@pytest.mark.parametrize("greedy_floor", [False, True], ids=["plain", "greedy floor"])
def test_a_batch_whose_sentences_leave_step_by_step_searches_alike(greedy_floor: bool) -> None:
    """Twelve sentences of 2-13 words, two models averaged: rows leave in several rounds, the encoder's
    tensors are handed over anew each time, and the greedy floor's rows ride beside the beam's."""
    members = []
    for seed in range(2):
        torch.manual_seed(seed)
        members.append(build_model("rnnsearch", 20, 20, emb=8, hidden=12, cell="atr", dropout=0.0).eval())
    model = Ensemble(members).eval()
    src, mask = pad(sentences(12, 2, 13), eos=True)
    decoder = graphs.GraphedDecoder(model, CPU, capture=False)
    plain, padded = search_both(model, src, mask, 4, decoder, greedy_floor=greedy_floor, penalty="gnmt")
    assert_same_search(plain, padded)
    # the searches' state lived in the decoder's buffers, one set per number of sentences left; the next
    # batch of as many sentences starts afresh in the same buffers
    sizes = {key[1] for key in decoder.kept if key[0] == "search" and key[2] == 4}
    assert 12 in sizes and len(sizes) >= 3, sizes
    src, mask = pad(sentences(12, 2, 13, seed=1), eos=True)
    assert_same_search(*search_both(model, src, mask, 4, decoder, greedy_floor=greedy_floor, penalty="gnmt"))


@pytest.mark.parametrize("behind", [1, 3, 100])
def test_the_host_reading_steps_behind_the_device_finds_the_same(behind: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the host takes in each step's finished hypotheses and done sentences a few steps after the
    device made them (so the GPU never waits for the host); the device steps on meanwhile, and done sentences
    leave only once every step is read (at 100, only at the end). Eleven sentences (twelve with the graphed
    search's padding), the greedy floor beside the beam, n-best lists: as found reading each step at once."""
    members = []
    for seed in range(2):
        torch.manual_seed(seed)
        members.append(build_model("rnnsearch", 20, 20, emb=8, hidden=12, cell="gru", dropout=0.0).eval())
    model = Ensemble(members).eval()
    src, mask = pad(sentences(11, 2, 13, seed=2), eos=True)
    limits = (mask.sum(1) * 2 + 3).long()
    options = {"nbest": 3, "beam": 4, "max_len": limits, "greedy_floor": True, "penalty": "average"}
    at_once = nbest_search(model, src, mask, cuda_graphs=False, **options)
    monkeypatch.setattr(beam, "read_behind", lambda device: behind)
    decoder = graphs.GraphedDecoder(model, CPU, capture=False)
    for how in (False, decoder):
        found = nbest_search(model, src, mask, cuda_graphs=how, **options)
        assert [[f[2] for f in s] for s in found] == [[f[2] for f in s] for s in at_once]
        for s, t in zip(found, at_once, strict=True):
            assert [f[0] for f in s] == pytest.approx([f[0] for f in t], abs=1e-5)
    assert ("search", 12, 4, 64) in decoder.kept       # the graphed search padded its 11 sentences to 12


def test_n_best_lists_and_source_lengths_that_come_and_go() -> None:
    """Batches of three source-length buckets and back to the first: older buffers are dropped (KEEP) and
    built again, and n-best lists come out alike."""
    torch.manual_seed(0)
    model = build_model("rnnsearch", 20, 20, emb=8, hidden=12, cell="gru", dropout=0.0).eval()
    decoder = graphs.GraphedDecoder(model, CPU, capture=False)
    for low, high in ((2, 5), (9, 14), (17, 22), (2, 5)):
        src, mask = pad(sentences(5, low, high, seed=low), eos=True)
        limits = (mask.sum(1) + 4).long()
        plain = nbest_search(model, src, mask, 3, 3, limits, cuda_graphs=False)
        padded = nbest_search(model, src, mask, 3, 3, limits, cuda_graphs=decoder)
        assert [[f[2] for f in s] for s in padded] == [[f[2] for f in s] for s in plain]
        assert len(decoder.inputs) <= graphs.KEEP


def test_buckets_and_source_padding() -> None:
    assert [graphs.sentences_bucket(n) for n in (0, 1, 2, 3, 8, 9, 16, 17, 32, 33, 50, 65, 321)] \
        == [1, 1, 2, 4, 8, 10, 16, 20, 32, 40, 56, 80, 384]
    # above 8 sentences a search pads by less than a quarter, and every count maps to one bucket at or above it
    for n in range(1, 2049):
        b = graphs.sentences_bucket(n)
        assert n <= b and (n <= graphs.POWERS_UP_TO or b < 1.25 * n) and graphs.sentences_bucket(b) == b
    src, mask = pad([[5, 6, 7], [8]], eos=True)
    psrc, pmask = graphs.pad_source(src, mask)
    assert psrc.shape == (2, 8) and pmask.shape == (2, 8)
    assert torch.equal(psrc[:, :4], src) and not psrc[:, 4:].any() and not pmask[:, 4:].any()
    factored = torch.stack([src, src], -1)
    assert graphs.pad_source(factored, mask)[0].shape == (2, 8, 2)
    assert graphs.decoder(torch.nn.Linear(1, 1), "cpu") is None     # graphs on CUDA only
