"""A small synthetic corpus with gold dependency labels on its BPE source, built with the rnmt CLI
as the workflow builds it (tokenize, BPE, gold labels aligned and projected, vocabularies)."""

from pathlib import Path

from rnmt.cli import main
from rnmt.data.synthetic import write_corpus


def run(*args: str) -> None:
    assert main(["-q", *map(str, args)]) == 0, args


def labelled_corpus(d: Path, sizes: dict[str, int], seed: int = 3, merges: int = 40) -> dict[str, Path]:
    raw, tok, bpe, lab = d / "raw", d / "tok", d / "bpe", d / "labels" / "gold"
    write_corpus(raw, sizes, seed, max_words=14)
    for split in sizes:
        for side in ("src", "tgt"):
            run("tokenize", "--lang", "en", raw / f"{split}.{side}", tok / f"{split}.{side}")
    for side in ("src", "tgt"):
        run("bpe", "learn", "--merges", merges, "--codes", d / f"codes.{side}", tok / f"train.{side}")
        for split in sizes:
            run("bpe", "apply", "--codes", d / f"codes.{side}", tok / f"{split}.{side}", bpe / f"{split}.{side}")
        run("vocab", bpe / f"train.{side}", d / f"vocab.{side}")
    for split in sizes:
        run("labels", "gold", "--conllu", raw / f"{split}.src.conllu", "--text", tok / f"{split}.src",
            "--output", lab / f"{split}.conllu")
        run("labels", "project", "--conllu", lab / f"{split}.conllu", "--bpe", bpe / f"{split}.src",
            "--output", lab / f"{split}.bpe.lab")
    run("labels", "vocab", lab / "train.bpe.lab", lab / "vocab.lab")
    return {"raw": raw, "tok": tok, "bpe": bpe, "labels": lab, "src_vocab": d / "vocab.src",
            "tgt_vocab": d / "vocab.tgt", "label_vocab": lab / "vocab.lab"}
