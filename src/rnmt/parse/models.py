"""Where stanza models come from: a model folder holding either stanza's own layout (downloaded with
stanza's downloader: resources.json and <lang>/...) or models rnmt trained itself, listed in a
manifest `rnmt-<lang>.json` (paths relative to the folder). Parsing never downloads anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rnmt.io import InputError, write_json

PROCESSORS = "tokenize,pos,lemma,depparse"


def manifest_path(model_dir: str | Path, lang: str) -> Path:
    return Path(model_dir) / f"rnmt-{lang}.json"


def missing_message(model_dir: str | Path, lang: str) -> str:
    d = Path(model_dir)
    return (f"no stanza models for language {lang!r} in {d} (neither {manifest_path(d, lang).name} nor stanza's "
            f"resources.json with a {lang}/ folder). On a machine with network fill it with "
            f"`rnmt parse download --lang {lang} --model-dir {d}` (in the workflow: parse.models: download), copy "
            f"that folder here, or train small models from a treebank offline with "
            f"`rnmt parse train-models --lang {lang} --train <train.conllu> --dev <dev.conllu> --model-dir {d}` "
            "(parse.models: train); then set parse.model_dir to the folder")


def pipeline_kwargs(model_dir: str | Path, lang: str) -> dict[str, Any]:
    """Keyword arguments for stanza.Pipeline that load the folder's models without any download."""
    d = Path(model_dir)
    common = {"lang": lang, "dir": str(d), "processors": PROCESSORS, "tokenize_pretokenized": True,
              "download_method": None}
    m = manifest_path(d, lang)
    if m.is_file():
        with open(m, encoding="utf-8") as f:
            man = json.load(f)
        if man.get("layout") == "paths":
            lacks = [k for k in ("pos", "depparse", "pretrain") if not isinstance(man.get(k), str)]
            if lacks:
                raise InputError(f"{m}: names no {', '.join(lacks)} model; {missing_message(d, lang)}")
            paths = {k: d / man[k] for k in ("pos", "depparse", "pretrain")}
            for k, p in paths.items():
                # by the names alone: a link inside the folder to the models elsewhere is the user's choice
                if Path(man[k]).is_absolute() or ".." in Path(os.path.normpath(man[k])).parts:
                    raise InputError(f"{m}: its {k} model {man.get(k)!r} lies outside the model folder {d}: a "
                                     "manifest names files inside its folder (rnmt parse train-models writes one); "
                                     "this one is not rnmt's, so put the models in the folder or train them there")
                if not p.is_file():
                    raise InputError(f"{m}: its {k} model {p} is missing; {missing_message(d, lang)}")
            return {**common, "allow_unknown_language": True, "lemma_use_identity": True,
                    "pos_model_path": str(paths["pos"]), "pos_pretrain_path": str(paths["pretrain"]),
                    "depparse_model_path": str(paths["depparse"]),
                    "depparse_pretrain_path": str(paths["pretrain"])}
        package = man.get("package", "default")
        fetched = man.get("processors") or PROCESSORS.split(",")
        # what was not downloaded is not needed: pretokenized input loads no tokenizer; lemmas as the words
        procs = {p: package for p in PROCESSORS.split(",")}
        if "lemma" not in fetched:
            procs["lemma"] = "identity"
        return {**common, "processors": procs, "package": package}
    if (d / "resources.json").is_file() and (d / lang).is_dir():
        return common
    raise InputError(missing_message(d, lang))


def download(model_dir: str | Path, lang: str, package: str = "default", processors: str = PROCESSORS,
             resources_url: str | None = None) -> None:
    """Fetch the models with stanza's own downloader (needs network), then record them in the manifest.

    `resources_url`: a mirror of stanza's model hub (it serves resources_<version>.json, whose "url"
    says where the models are); None: stanza's own.
    """
    import stanza

    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    mirror = {"resources_url": resources_url} if resources_url else {}
    try:
        stanza.download(lang, model_dir=str(d), package=package, processors=processors, **mirror)
    except (OSError, ValueError) as e:         # requests' connection errors are OSErrors; bad lang/package: ValueError
        raise InputError(f"stanza could not download its {lang} models ({package}) into {d}: {type(e).__name__}: "
                         f"{e}. This needs network: run it on a connected node, copy {d} to this machine and set "
                         "parse.models: local (or parse.models: train to train small models offline)") from None
    write_json(manifest_path(d, lang), {"layout": "stanza", "package": package, "source": "stanza.download",
                                        "processors": processors.split(","), "resources_url": resources_url})
