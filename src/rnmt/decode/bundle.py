"""A translation bundle: one folder with everything that turns raw text into translations with a
trained model or ensemble, as the pipeline's own rules do for a test set.

    bundle.json      languages, the source's preprocessing settings (escaping, normalisation, case,
                     segmentation), whether the output is detruecased, the decoding settings, the files
    model<k>.pt      the checkpoints (an ensemble: several), with their vocabularies
    codes.src        the source's BPE codes (absent at word level)
    truecase.src     the source's Moses truecasing model (where the corpus truecases)

Translating a line follows the pipeline: text fixes and `Preparer` (rules `tokenize`), truecasing
(`truecase`), BPE (`apply_bpe`), beam search (`translate`), subword joining, detruecasing and
detokenisation (`postprocess`), with the same functions, so a bundle gives the pipeline's output.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rnmt.data.settings import PreprocessSettings
from rnmt.decode.settings import SEARCH_KEYS, DecodeSettings
from rnmt.io import InputError, atomic_writer

log = logging.getLogger(__name__)

MANIFEST = "bundle.json"
FORMAT = 1


def export(out_dir: str | Path, models: Sequence[str | Path], src_lang: str, tgt_lang: str,
           preprocess: dict[str, Any], codes: str | Path | None = None, truecase_model: str | Path | None = None,
           detruecase: bool = False, decode: dict[str, Any] | None = None) -> Path:
    """Write a bundle into `out_dir` (created; files already there are replaced) → its manifest's path."""
    import torch

    from rnmt.models import checkpoint
    from rnmt.provenance import provenance

    if not models:
        raise InputError("export needs at least one model (--model model.pt, repeated for an ensemble)")
    for path in (*models, *(p for p in (codes, truecase_model) if p)):
        if not Path(path).is_file():
            raise InputError(f"{path}: file not found")
    for path in models:
        if checkpoint.load(path, torch.device("cpu")).get("src_label_vocab"):
            raise InputError(f"{path} takes source dependency labels, which a bundle cannot produce from raw "
                             "text (they come from a parser run over the whole test set); export a word-only model")
    DecodeSettings.from_dict(decode or {})          # names, types and values, before anything is written
    prepare = PreprocessSettings.from_dict(preprocess)
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise InputError(f"{out} holds files and is not a bundle (no {MANIFEST}); export into a new or empty folder, "
                         "so that no file of yours there is replaced or removed")
    out.mkdir(parents=True, exist_ok=True)
    names = [f"model{k + 1}.pt" for k in range(len(models))]
    for src, name in zip(models, names, strict=True):
        shutil.copyfile(src, out / name)
    for src, name in ((codes, "codes.src"), (truecase_model, "truecase.src")):
        if src:
            shutil.copyfile(src, out / name)
        else:
            (out / name).unlink(missing_ok=True)
    manifest = {"format": FORMAT, **provenance(), "models": names, "src_lang": src_lang,
                "tgt_lang": tgt_lang, "preprocess": prepare.as_dict(), "codes": "codes.src" if codes else None,
                "truecase": "truecase.src" if truecase_model else None, "detruecase": detruecase,
                "decode": {k: v for k, v in (decode or {}).items() if k in SEARCH_KEYS}}
    with atomic_writer(out / MANIFEST) as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out / MANIFEST


def _check_manifest(path: Path, m: dict[str, Any]) -> None:
    """The manifest's entries have the types `export` writes (a bundle is untrusted input)."""
    problems = []
    if not (isinstance(m["models"], list) and m["models"] and all(isinstance(x, str) for x in m["models"])):
        problems.append("'models' must be a list of checkpoint file names")
    for key in ("codes", "truecase"):
        if m.get(key) is not None and not isinstance(m[key], str):
            problems.append(f"'{key}' must be a file name or null")
    for key in ("src_lang", "tgt_lang"):
        if not isinstance(m[key], str):
            problems.append(f"'{key}' must be a language code")
    for key in ("preprocess", "decode"):
        if m.get(key) is not None and not isinstance(m[key], dict):
            problems.append(f"'{key}' must be an object of settings")
    if problems:
        raise InputError(f"{path}: {'; '.join(problems)}; export the bundle again")


def inside(folder: Path, name: str, manifest: Path) -> Path:
    """`folder / name`, which must be a file of the bundle itself: a name in the manifest that leads out of the
    folder (an absolute path, '..', a symbolic link to elsewhere) is refused, without reading the file."""
    target = (folder / name).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise InputError(f"{manifest}: {name!r} leads outside the bundle folder {folder}; a bundle's files must "
                         "be inside it (export the bundle again)")
    return target


@dataclass
class Bundle:
    folder: Path
    manifest: dict[str, Any]

    @classmethod
    def load(cls, folder: str | Path) -> Bundle:
        folder = Path(folder)
        path = folder / MANIFEST
        if not path.is_file():
            raise InputError(f"{folder}: not a bundle ({MANIFEST} is missing); make one with `rnmt export`, or "
                             "build results/<run>/bundles/<corpus>/<variant>/<member>/bundle.json with snakemake")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not valid JSON ({e}); export the bundle again") from None
        if not isinstance(manifest, dict):
            raise InputError(f"{path}: not a bundle manifest (a JSON object); export the bundle again")
        missing = [k for k in ("format", "models", "src_lang", "tgt_lang", "preprocess") if k not in manifest]
        if missing:
            raise InputError(f"{path}: missing {', '.join(missing)}; export the bundle again")
        if manifest["format"] != FORMAT:
            raise InputError(f"{path}: bundle format {manifest['format']}, this rnmt reads format {FORMAT}; "
                             "export the bundle again with this version")
        _check_manifest(path, manifest)
        files = [*manifest["models"], *(manifest.get(k) for k in ("codes", "truecase") if manifest.get(k))]
        for f in files:
            inside(folder, f, path)
        absent = [f for f in files if not (folder / f).is_file()]
        if absent:
            raise InputError(f"{folder}: {', '.join(absent)} listed in {MANIFEST} but missing; export the bundle "
                             "again (or copy the whole folder)")
        return cls(folder, manifest)

    @property
    def decode(self) -> dict[str, Any]:
        return dict(self.manifest.get("decode") or {})

    def preparer(self) -> Any:
        """Raw line → the segmented line the model reads (text fixes, tokenisation, truecasing, BPE)."""
        from rnmt.data.bpe import Segmenter
        from rnmt.data.clean import Preparer, fix_text

        settings = PreprocessSettings.from_dict(self.manifest["preprocess"], f"{self.folder / MANIFEST}: ")
        prepare = Preparer.from_settings(self.manifest["src_lang"], settings)
        truecaser = None
        manifest = self.folder / MANIFEST
        if self.manifest.get("truecase"):
            from rnmt.data import truecase

            truecaser = truecase.load(inside(self.folder, self.manifest["truecase"], manifest),
                                      "export the bundle again")
        codes = self.manifest.get("codes")
        try:
            segment = Segmenter(inside(self.folder, codes, manifest) if codes else None)
        except (UnicodeDecodeError, ValueError, IndexError) as e:
            raise InputError(f"{self.folder / str(codes)}: not a BPE codes file subword-nmt reads "
                             f"({type(e).__name__}); export the bundle again") from None

        def run(line: str) -> str:
            text = prepare(fix_text(line)[0])
            if truecaser is not None:
                text = truecaser.truecase(text, return_str=True)
            return segment(text)

        return run

    def postprocess(self, segmented: str) -> str:
        """A translation's subwords → detokenized text (rule `postprocess`)."""
        from rnmt.data.tokenize import postprocess

        return postprocess(segmented, self.manifest["tgt_lang"], bool(self.manifest.get("detruecase")))[1]

    def translate(self, lines: Iterable[str], device: Any = "cpu", **decode: Any) -> list[str]:
        """Raw lines → translations, one each (an empty line gives an empty translation). `decode`
        overrides the bundle's decoding settings (beam, batch_size, ...)."""
        translator = self.translator(device, **decode)
        out = translator(list(lines))
        translator.warn_unknown()
        return out

    def translator(self, device: Any = "cpu", nbest: int = 0, **decode: Any) -> Translator:
        """The bundle's models loaded once on `device`, translating batches of raw lines as they come
        (`rnmt translate --bundle` on a stream); `nbest` > 0 gives each line's n-best list instead."""
        import torch

        from rnmt.decode.ensemble import load_ensemble

        settings = DecodeSettings.from_dict({**self.decode, **{k: v for k, v in decode.items() if v is not None}})
        device = torch.device(device)
        manifest = self.folder / MANIFEST
        model, src_vocab, tgt_vocab = load_ensemble([inside(self.folder, m, manifest) for m in self.manifest["models"]],
                                                    device)
        return Translator(self, model, src_vocab, tgt_vocab, settings, device, nbest)


class Translator:
    """Raw lines → translations (or n-best lists) with a bundle's loaded models; counts the source subwords
    the model does not know over every call, for one warning at the end."""

    def __init__(self, bundle: Bundle, model: Any, src_vocab: Any, tgt_vocab: Any, settings: DecodeSettings,
                 device: Any, nbest: int) -> None:
        self.bundle, self.model, self.src_vocab, self.tgt_vocab = bundle, model, src_vocab, tgt_vocab
        self.device, self.nbest = device, nbest
        self.options = {"penalty" if k == "length_penalty" else k: v for k, v in settings.search().items()}
        self.options["cuda_graphs"] = settings.cuda_graphs
        from rnmt.decode.translate import note_tf32
        note_tf32(settings.tf32, device)
        if nbest and not 1 <= nbest <= self.options["beam"]:
            raise InputError(f"--nbest {nbest}: give 1 to the beam size ({self.options['beam']}); for a longer list "
                             f"widen the beam (--beam {nbest})")
        self.prepare = bundle.preparer()
        self.tokens = self.unknown = 0

    def __call__(self, lines: list[str]) -> list[Any]:
        """Translations of `lines`, one each; with nbest, per line a list of (translation, normalised score,
        log p), best first (an empty line gives an empty translation, or an empty list)."""
        from rnmt.data.vocab import UNK_ID
        from rnmt.decode.translate import translate_ids, translate_nbest

        sources = [self.src_vocab.encode(self.prepare(line)) for line in lines]
        for ids in sources:
            self.tokens += len(ids)
            self.unknown += sum(i == UNK_ID for i in ids)
        keep = [i for i, ids in enumerate(sources) if ids]
        kept = [sources[i] for i in keep]
        out: list[Any] = [[] if self.nbest else ""] * len(sources)
        if self.nbest:
            lists = translate_nbest(self.model, kept, self.nbest, device=self.device, **self.options)
            for i, found in zip(keep, lists, strict=True):
                out[i] = [(self._text(ids), score, logp) for score, logp, ids in found]
        else:
            for i, ids in zip(keep, translate_ids(self.model, kept, device=self.device, **self.options), strict=True):
                out[i] = self._text(ids)
        return out

    def _text(self, ids: list[int]) -> str:
        return self.bundle.postprocess(self.tgt_vocab.decode(ids))

    def warn_unknown(self) -> None:
        """The warning of `Vocab.unknown_warning` over every line translated so far, if any."""
        from rnmt.data.vocab import unknown_warning

        warning = unknown_warning(self.unknown, self.tokens, f"bundle {self.bundle.folder}")[1]
        if warning:
            log.warning("%s", warning)
