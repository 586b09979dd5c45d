"""CUDA-graph training (rnmt.train.graphs) where no GPU is needed: padding a batch to its bucket changes
neither the loss nor any gradient, buckets are what the graphs are keyed by, and a run that asks for graphs
off CUDA trains eagerly and says why. The captures and replays themselves are in tests/test_cuda.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rnmt.data.batching import ParallelData, make_batch, pad_source
from rnmt.models import build_model
from rnmt.train import graphs
from rnmt.train.loss import token_loss
from rnmt.train.trainer import Trainer, TrainSettings
from tinytrain import MODEL

DATA = ParallelData(src=[[5, 6, 7, 8, 9], [10, 11], [12, 13, 5]], tgt=[[7, 6, 5], [11, 10, 9, 8, 7, 6], [6]],
                    src_words=[5, 2, 3], tgt_words=[3, 6, 1])


def loss_and_grads(model: torch.nn.Module, b) -> list[torch.Tensor]:
    loss = token_loss(model(b.src, b.src_mask, b.tgt_in), b.tgt_out, 0.1)
    return [loss, *torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)]


@pytest.mark.parametrize("arch", [{"arch": "rnnsearch", "cell": "gru"}, {"arch": "rnnsearch-ca", "cell": "atr"},
                                  {"arch": "srnmt", "layers": 2}, {"arch": "dtmt", "cell": "lgru", "depth": 2,
                                                                   "heads": 2, "rnn_dropout": 0.0}])
def test_padding_to_the_bucket_changes_no_loss_and_no_gradient(arch: dict) -> None:
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        cfg = {**arch}
        model = build_model(cfg.pop("arch"), 20, 20, emb=12, hidden=12, dropout=0.0, **cfg).train()
        batch = make_batch(DATA, [0, 1, 2])
        key = graphs.bucket(batch, rows=5)
        assert key == (5, 8, 8)
        padded = graphs.pad_to(batch, key)
        assert padded.src.shape == (5, 8) and padded.tgt_out.shape == (5, 8)
        assert padded.src_mask[3:].sum(1).tolist() == [1, 1]            # padded sentences: a lone </s>
        assert int((padded.tgt_out != 0).sum()) == batch.tgt_tokens       # and no target token
        for got, want in zip(loss_and_grads(model, padded), loss_and_grads(model, batch), strict=True):
            if want is None:
                assert got is None or not got.any()
            else:
                torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)


def test_factored_sources_pad_every_factor() -> None:
    src, mask = pad_source([[5, 6], [7]], [[4, 5], [6]])
    batch = make_batch(DATA, [0, 1])
    batch.src, batch.src_mask = src, mask
    padded = graphs.pad_to(batch, (4, 8, 8))
    assert padded.src.shape == (4, 8, 2)
    assert padded.src[2:, 0].tolist() == [[3, 3], [3, 3]]         # </s> in every factor
    assert torch.equal(padded.src[:2, :3], src)


def test_token_batches_pad_their_sentence_count_like_a_length() -> None:
    batch = make_batch(DATA, [0, 1, 2])
    assert graphs.bucket(batch, rows=0) == (8, 8, 8)
    assert graphs.bucket(batch, rows=80) == (80, 8, 8)


def test_graphs_are_refused_with_the_reason() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert "not CUDA" in graphs.unsupported("adam", 1, 1, cpu)
    assert "adadelta" in graphs.unsupported("adadelta", 1, 1, cuda)
    assert "sums 2 batches" in graphs.unsupported("adam", 2, 1, cuda)
    assert "2 processes" in graphs.unsupported("adam", 1, 2, cuda)
    assert graphs.unsupported("adam", 1, 1, cuda) is None


def test_a_run_asking_for_graphs_off_cuda_trains_eagerly_and_records_why(corpus: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    s = TrainSettings(batch_size=8, max_steps=4, valid_every=4, valid_bleu=False, threads=1, device="cpu",
                      cuda_graphs=True)
    c = corpus
    t = Trainer(MODEL, s, c["train_src"], c["train_tgt"], c["dev_src"], c["dev_tgt"], c["src_vocab"],
                c["tgt_vocab"], tmp_path)
    metrics = t.run()
    assert metrics["steps"] == 4
    saved = json.loads((tmp_path / "train.json").read_text())
    assert saved["cuda_graphs"] == {"off": "the device is cpu, not CUDA"}
