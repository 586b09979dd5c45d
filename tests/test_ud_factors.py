"""Factored input (words + dependency labels) for every architecture, and the UD paper's training
pieces: AdaDelta with diagonal initialisation, pretrained source word vectors, the cost plot."""

import json
from pathlib import Path

import pytest
import torch

from rnmt.cli import main
from rnmt.data.batching import load_parallel, make_batch
from rnmt.data.vocab import UNK_ID, Vocab
from rnmt.io import InputError
from rnmt.models import MODELS, checkpoint, factors
from rnmt.report.figures import smooth
from rnmt.train.trainer import Trainer, TrainSettings
from udcorpus import labelled_corpus

FACTORS = {"dims": [8, 4], "combine": "concat"}
TINY = {
    "seq2seq": {"cell": "ud-gru", "hidden": 12, "layers": 2},
    "rnnsearch": {"cell": "gru", "hidden": 12, "dropout": 0.0},
    "rnnsearch-ca": {"cell": "atr", "hidden": 12, "dropout": 0.0},
    "stacked": {"cell": "lstm", "hidden": 12, "layers": 2, "dropout": 0.0},
    "gnmt": {"cell": "atr", "hidden": 12, "layers": 2, "dropout": 0.0},
    "deep-rnnsearch": {"cell": "gru", "hidden": 12, "layers": 2, "dropout": 0.0},
    "dtmt": {"cell": "lgru", "hidden": 12, "depth": 1, "heads": 2, "dropout": 0.0, "rnn_dropout": 0.0},
    "shallow-rnmt": {"hidden": 12, "heads": 2, "dropout": 0.0, "rnn_dropout": 0.0},
    # SR-NMT's highway needs word size = hidden on both sides: labels are summed in
    "srnmt": {"hidden": 12, "layers": 2, "dropout": 0.0, "factors": {"dims": [12, 12], "combine": "sum"}},
    "transformer": {"d_model": 12, "ffn": 16, "heads": 2, "layers": 1, "dropout": 0.0},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.set_num_threads(1)
    return labelled_corpus(tmp_path_factory.mktemp("udf"), {"train": 40, "dev": 8})


def trainer(c: dict[str, Path], out: Path, model: dict, labelled: bool = True, **settings) -> Trainer:
    s = TrainSettings.from_dict({"batch_size": 8, "lr": 0.003, "valid_every": 2, "valid_bleu": True, "log_every": 1,
                                 "threads": 1, "max_steps": 2, **settings})
    lab = {"train_src_labels": c["labels"] / "train.bpe.lab", "dev_src_labels": c["labels"] / "dev.bpe.lab",
           "src_label_vocab": c["label_vocab"]} if labelled else {}
    return Trainer(model, s, c["bpe"] / "train.src", c["bpe"] / "train.tgt", c["bpe"] / "dev.src",
                   c["bpe"] / "dev.tgt", c["src_vocab"], c["tgt_vocab"], out, **lab)


def test_every_architecture_is_covered() -> None:
    assert set(TINY) == set(MODELS)


@pytest.mark.parametrize("arch", sorted(TINY))
def test_each_architecture_trains_and_decodes_with_labels(arch: str, corpus: dict[str, Path],
                                                          tmp_path: Path) -> None:
    t = trainer(corpus, tmp_path, {"arch": arch, "factors": FACTORS, **TINY[arch]})
    metrics = t.run()
    assert metrics["steps"] == 2 and metrics["best_dev_bleu_greedy"] is not None
    ckpt = checkpoint.load(tmp_path / "model.pt")
    assert ckpt["src_label_vocab"] == Vocab.load(corpus["label_vocab"]).itos
    assert ckpt["model_config"]["factors"]["vocab_sizes"] == [len(ckpt["src_label_vocab"])]
    # the labels reach the model: other labels, other scores
    model, sv, tv, lv = checkpoint.load_model_with_labels(tmp_path / "model.pt")
    data = load_parallel(corpus["bpe"] / "dev.src", corpus["bpe"] / "dev.tgt", sv, tv, None,
                         corpus["labels"] / "dev.bpe.lab", lv)
    b = make_batch(data, range(len(data)))
    assert b.src.shape[-1] == 2
    unk = b.src.clone()
    unk[..., 1] = torch.where(b.src_mask, UNK_ID, 0)
    with torch.no_grad():
        assert not torch.allclose(model(b.src, b.src_mask, b.tgt_in), model(unk, b.src_mask, b.tgt_in))
    out = tmp_path / "hyp.txt"
    assert main(["-q", "translate", "--model", str(tmp_path / "model.pt"), "--beam", "2", "--speed-beams",
                 "--src-labels", str(corpus["labels"] / "dev.bpe.lab"), str(corpus["bpe"] / "dev.src"),
                 str(out)]) == 0
    assert len(out.read_text().splitlines()) == 8


def test_translate_without_labels_is_a_clear_error(corpus: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    trainer(corpus, tmp_path, {"arch": "seq2seq", **TINY["seq2seq"], "factors": FACTORS}, max_steps=1).run()
    rc = main(["-q", "translate", str(corpus["bpe"] / "dev.src"), str(tmp_path / "out"), "--model",
               str(tmp_path / "model.pt")])
    assert rc == 2
    assert "was trained with source dependency labels: give this test set's label file with --src-labels" \
        in capsys.readouterr().err


def test_factor_settings_are_checked() -> None:
    with pytest.raises(InputError, match="source labels were given but the model has no `factors` setting"):
        factors.resolve({"arch": "rnnsearch"}, [20])
    with pytest.raises(InputError, match=r"factors.dims \[8, 4\] \(concat\) must give d_model = 16"):
        factors.resolve({"arch": "transformer", "d_model": 16, "factors": FACTORS}, [20])
    cfg = factors.resolve({"arch": "seq2seq", "emb": 200, "factors": {"dims": [150, 50]}}, [40])
    assert cfg["emb"] == 150 and cfg["factors"] == {"vocab_sizes": [40], "dims": [50], "combine": "concat"}
    # label sizes only: the word size stays emb
    assert factors.resolve({"arch": "seq2seq", "emb": 150, "factors": {"dims": [50]}}, [40]) == cfg
    with pytest.raises(InputError, match=r"factors.dims \[150, 50, 10\]: give one size per label vocabulary"):
        factors.resolve({"arch": "seq2seq", "factors": {"dims": [150, 50, 10]}}, [40])
    model = factors.resolve({"arch": "seq2seq", "cell": "ud-lstm", "hidden": 150, "factors": {"dims": [150, 50]}},
                            [40])
    from rnmt.models import build_model

    m = build_model(model.pop("arch"), 100, 100, **model)
    assert m.src_emb.dim == 200         # UD paper: 150-d words + 50-d labels, concatenated


def test_adadelta_diagonal_init_and_pretrained_vectors(corpus: dict[str, Path], tmp_path: Path) -> None:
    vocab = Vocab.load(corpus["src_vocab"])
    words = vocab.itos[4:14]
    vecs = {w: [round(0.1 * i + 0.01 * k, 3) for k in range(8)] for i, w in enumerate(words)}
    vec_file = tmp_path / "vectors.txt"
    vec_file.write_text(f"{len(vecs)} 8\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vecs.items()))
    t = trainer(corpus, tmp_path / "run", {"arch": "seq2seq", **TINY["seq2seq"], "factors": FACTORS},
                optimizer="adadelta", lr=1.0, init="diagonal", pretrained_src=str(vec_file))
    emb = t.model.src_emb
    for w, v in vecs.items():
        torch.testing.assert_close(emb.words.weight[vocab.stoi[w]], torch.tensor(v))
    w_ih = next(p for n, p in t.model.named_parameters() if "encoder" in n and p.dim() == 2)
    rows, cols = torch.nonzero(w_ih, as_tuple=True)      # one diagonal per gate block of 12 rows
    assert len(rows) > 0 and bool(((rows % 12) == cols).all())
    assert isinstance(t.opt, torch.optim.Adadelta) and t.opt.defaults["rho"] == 0.95     # Zeiler 2012
    t.run()
    log = [json.loads(x) for x in (tmp_path / "run" / "train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["kind"] == "train"] == [1, 2]      # one cost per minibatch
    warned = json.loads((tmp_path / "run" / "train.json").read_text())["warnings"]
    assert [w for w in warned if not w.startswith("the model did not learn")] == []     # 2 steps learn nothing
    # vectors of another language or tokenization: none matches, and the run says so (train.json, tables)
    vec_file.write_text("1 8\nzzz-no-such-word " + " ".join(["0.5"] * 8) + "\n")
    t = trainer(corpus, tmp_path / "run3", {"arch": "seq2seq", **TINY["seq2seq"], "factors": FACTORS},
                pretrained_src=str(vec_file))
    assert t.warnings and "none of its words is in the source vocabulary" in t.warnings[0]
    vec_file.write_text("3 5\n")
    with pytest.raises(InputError, match=r"vectors.txt: 5-dimensional vectors, but the model's source word "
                                         r"embedding has 8 dimensions"):
        trainer(corpus, tmp_path / "run2", {"arch": "seq2seq", **TINY["seq2seq"], "factors": FACTORS},
                pretrained_src=str(vec_file))


def test_plot_cost_draws_several_runs(corpus: dict[str, Path], tmp_path: Path) -> None:
    assert smooth([4.0, 2.0, 6.0, 0.0], 2) == [4.0, 3.0, 4.0, 3.0]
    logs = []
    for name, labelled in (("gru", False), ("gru-dep", True)):
        model = {"arch": "seq2seq", **TINY["seq2seq"], **({"factors": FACTORS} if labelled else {})}
        trainer(corpus, tmp_path / name, model, labelled, max_steps=4, valid_every=4).run()
        logs.append(str(tmp_path / name / "train.jsonl"))
    png = tmp_path / "figure2.png"
    assert main(["-q", "plot-cost", "--output", str(png), "--smooth", "2", *logs]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


@pytest.mark.parametrize("scale", ["mini", "small", "paper"])
def test_the_ud_rows_keep_the_papers_equal_inputs_and_gru_to_lstm_ratio(scale: str) -> None:
    """Section 3: labels take 50 of the input's dimensions (150-d words + 50-d labels = the unlabelled 200),
    and the LSTMs are 150 wide against the GRUs' 200. At every scale that trains on real text the labelled
    rows' input is as wide as the unlabelled rows', and each LSTM is 3/4 as wide as its GRU, so the BLEU the
    labels add is not extra width, and the GRU-LSTM comparison is the paper's."""
    import yaml

    from rnmt.planning.plan import Plan

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "config.yaml").read_text())
    plan = Plan({**config, "scale": scale, "run": "x", "tables": ["ud-figure2"]}, root)
    model = {v: s.model for (_, v), s in plan.variants.items()}
    for cell in ("gru", "lstm"):
        plain, labelled = model[f"ud-{cell}"], model[f"ud-{cell}-labels"]
        assert labelled["emb"] + sum(labelled["factors"]["dims"]) == plain["emb"], (cell, labelled, plain)
        assert labelled["hidden"] == plain["hidden"]
    assert model["ud-lstm"]["hidden"] * 200 == model["ud-gru"]["hidden"] * 150
