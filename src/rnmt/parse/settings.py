"""Dependency-parsing settings (config `parse:`, the UD paper's source labels): one typed class, its
defaults written once; the config schema's `parse` block is generated from it and the workflow reads a
run's parse settings through it (workflow/rules/common.smk), the scale's over the config's."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rnmt.settings import checked, setting


@dataclass(frozen=True)
class ParseSettings:
    models: str = setting("local", "where stanza's models come from: download (stanza's downloader into "
                                   "model_dir; needs network), local (model_dir as it is), train (small models "
                                   "trained offline on train_corpus' gold trees)",
                          enum=["download", "local", "train"])
    model_dir: str | None = setting(None, "the stanza model folder (downloaded, given, or trained into); null: "
                                          "results/<run>/stanza")
    package: str = setting("default", "stanza's model package for models: download (default, ewt, ...)")
    resources_url: str | None = setting(None, "a site's mirror of stanza's model hub (serves "
                                              "resources_<version>.json); null: stanza's own")
    lang: str | None = setting(None, "the parser's language; null: each corpus' source language",
                               pattern="^[a-z]{2,3}$")
    chunks: int = setting(2, "the source of each split is parsed in this many parallel jobs", minimum=1)
    batch_size: int = setting(1000, "stanza's tagger and parser batch size", minimum=1)
    device: str = setting("cpu", "cpu or cuda[:N]", pattern="^(cpu|cuda(:[0-9]+)?)$")
    subtypes: bool = setting(False, "keep relation subtypes (acl:relcl) instead of the universal relation (acl)")
    train_corpus: str | None = setting(None, "models: train: the corpus of this config whose gold trees train "
                                             "the models")
    train_trees: dict | None = setting(None, "models: train: CoNLL-U treebank files {train: FILE, dev: FILE} "
                                             "whose gold trees train the models (a UD treebank of the source "
                                             "language, where no model hub can be reached), instead of "
                                             "train_corpus' trees")
    train_hidden: int = setting(32, "models: train: the tagger's and parser's hidden size (32 learns the "
                                    "synthetic grammar; a real treebank needs more, e.g. 200)", minimum=1)
    train_steps_pos: int = setting(100, "models: train: the tagger's training steps", minimum=1)
    train_steps_depparse: int = setting(80, "models: train: the parser's training steps", minimum=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> ParseSettings:
        return checked(cls, d, "parse", where)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
