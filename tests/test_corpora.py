"""The corpus registry, cleaning steps, chunking, merging and the text formats, on small inputs."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from rnmt.config import ConfigError
from rnmt.data import chunks, sgml, truecase
from rnmt.data.clean import Preparer, Report, clean_pairs, is_segmented, normalize_romanian, unescape_moses
from rnmt.data.fetch import fetch
from rnmt.data.prepare import assemble, clean_chunk, holdout_range, merge, prepare_text
from rnmt.data.registry import Corpora, Registry, check_fetched
from rnmt.data.segment_pairs import segment_pairs
from rnmt.data.settings import PreprocessSettings
from rnmt.data.sources import Source
from rnmt.io import InputError

REGISTRY = ROOT / "workflow/corpora.yaml"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry(REGISTRY)


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---- registry -----------------------------------------------------------------------------------

def test_every_paper_corpus_resolves_with_its_settings(registry: Registry, config: dict) -> None:
    config["corpora"] = {cid: {"registry": cid} for cid in registry.corpora}
    corpora = Corpora(config, registry)
    atr = corpora["atr-wmt14-en-de"]
    assert atr.preprocess.max_words == 80 and atr.bpe.merges == 40000 and not atr.bpe.joint
    assert corpora["srnmt-wmt14-en-de"].preprocess.max_words == 50
    assert corpora["srnmt-wmt14-en-de"].preprocess.escape is False
    assert corpora["srnmt-wmt16-en-ro"].bpe.merges == 40000 and corpora["srnmt-wmt16-en-ro"].preprocess.truecase
    assert corpora["dtmt-wmt14-en-fr"].bpe.joint and corpora["dtmt-wmt14-en-fr"].preprocess.max_subwords == 256
    assert corpora["dtmt-nist-zh-en"].preprocess.max_subwords == 128
    assert corpora["atr-nist-zh-en"].word_level and corpora["atr-nist-zh-en"].vocab.max_size == 30000
    assert corpora["ud-europarl-en-fr"].preprocess.lowercase
    assert len(corpora["atr-nist-zh-en"].sources["test"]) == 5
    # the test sets are sacrebleu's: full newstest2014 (3003 lines) unless the filtered one is chosen
    assert registry.source("newstest2014-full-en-de").spec == "wmt14/full:en-de"
    assert registry.source("newstest2014-filtered-en-de").spec == "wmt14:en-de"


def test_registry_ids_exist_in_mtdata_and_sacrebleu(registry: Registry) -> None:
    from mtdata.entry import DatasetId
    from mtdata.index import INDEX
    from sacrebleu.dataset import DATASETS

    for s in registry.sources.values():
        if s.kind == "mtdata":
            assert DatasetId.parse(s.spec) in INDEX, s.spec
        if s.kind == "sacrebleu":
            name, pair = s.spec.rsplit(":", 1)
            assert pair in DATASETS[name].langpairs, s.spec


def test_no_checksum_is_invented(registry: Registry) -> None:
    """A download is pinned in the pin file (Multi30k's, computed from the files at the pinned commit) or
    listed as `null` in its source, a gap on purpose: no checksum typed into the registry itself."""
    inline = [sha for s in registry.sources.values() for sha in s.sha256.values()]
    assert inline and all(p is None for p in inline)
    for s in registry.sources.values():
        names = {name for name, _ in s.downloads()}
        assert set(s.sha256) == names - set(registry.pins), s.id


def test_multi30k_is_in_the_registry_pinned_in_four_directions(registry: Registry) -> None:
    """The real corpus that trains in GPU-minutes: every file pinned, at one fixed commit of its repository,
    train / validation / three test sets, the same files for both directions of a pair."""
    for a, b in [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]:
        c = registry.corpora[f"multi30k-{a}-{b}"]
        assert (c["src_lang"], c["tgt_lang"]) == (a, b)
        other = b if a == "en" else a
        assert c["splits"] == {"train": [f"multi30k-train-en-{other}"], "dev": [f"multi30k-val-en-{other}"],
                               "test": [f"multi30k-test{s}-en-{other}" for s in
                                        ("2016-flickr", "2017-flickr", "2017-mscoco")]}
        for sid in (x for ids in c["splits"].values() for x in ids):
            for name, url in registry.source(sid).downloads():
                assert url.startswith("https://github.com/multi30k/dataset/raw/"
                                      "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/"), url
                assert registry.download(name) == (url, registry.pins[name])
    assert len([n for n in registry.pins if n.endswith(".gz")]) == 15     # {train, val, 3 tests} x {en, de, fr}


def test_config_overrides_registry_which_overrides_defaults(registry: Registry, config: dict) -> None:
    config["corpora"] = {"mine": {"registry": "atr-wmt14-en-de", "preprocess": {"chunks": 3},
                                  "splits": {"test": ["newstest2014-filtered-en-de"]}}}
    c = Corpora(config, registry)["mine"]
    assert c.preprocess.chunks == 3 and c.preprocess.max_words == 80 and c.preprocess.escape is True
    assert c.sources["test"] == ["newstest2014-filtered-en-de"]
    assert c.parts["test"] == [("results/sources/newstest2014-filtered-en-de/en-de.en",
                                "results/sources/newstest2014-filtered-en-de/en-de.de")]


@pytest.mark.parametrize(("entry", "message"), [
    ({"registry": "atr-wmt14-en-xx"}, "known corpora: atr-nist-zh-en"),
    ({"source": "local:/data", "src_lang": "en", "tgt_lang": "de", "files": {"train": ["a", "b"]}},
     "no dev data; give files/splits for 'dev', or hold lines out"),
    ({"source": "local:/data", "src_lang": "en", "tgt_lang": "de", "files": {"train": ["a", "b"], "dev": ["c", "d"]},
      "holdout": {"dev": 5, "test": 5}}, "'dev' has both files and a holdout"),
    ({"registry": "atr-wmt14-en-de", "splits": {"dev": ["newstest2013-en-fr"]}}, "is en-fr, not en-de"),
    ({"registry": "atr-wmt14-en-de", "splits": {"dev": ["newstest2031"]}}, "unknown source 'newstest2031'"),
    ({"src_lang": "en"}, "missing key 'registry'"),
])
def test_bad_corpus_entries_say_what_to_fix(registry: Registry, config: dict, entry: dict, message: str) -> None:
    config["corpora"] = {"c": entry}
    with pytest.raises(ConfigError, match=message):
        Corpora(config, registry)


@pytest.mark.parametrize(("preset", "message"), [
    ({"preprocess": {"max_words": "80"}}, "preprocess setting max_words must be int or null, not str '80'"),
    ({"bpe": {"merges": -5}}, "bpe setting merges must be >= 0, not -5"),
    ({"vocab": {"min_cuont": 2}},
     "unknown vocab setting(s) min_cuont (did you mean min_count?); valid: max_size, min_count"),
])
def test_a_bad_data_setting_in_the_registry_names_the_corpus_and_the_registry(tmp_path: Path, config: dict,
                                                                              preset: dict, message: str) -> None:
    """The config schema checks a config's data settings; a registry's presets are checked when the corpus
    is resolved, at the workflow's start, with the same settings classes."""
    data = yaml.safe_load(REGISTRY.read_text())
    for block, values in preset.items():
        data["corpora"]["atr-wmt14-en-de"].setdefault(block, {}).update(values)
    path = tmp_path / "corpora.yaml"
    path.write_text(yaml.safe_dump(data))
    config["corpora"] = {"mine": {"registry": "atr-wmt14-en-de"}}
    with pytest.raises(ConfigError) as e:
        Corpora(config, Registry(path))
    assert str(e.value) == f"config corpora.mine (and {path}: corpora.atr-wmt14-en-de): {message}"


def test_bad_registry_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="kinds: mtdata, sacrebleu, url"):
        Source.from_entry("x", {"source": "ftp://a"}, "r")
    with pytest.raises(InputError, match="must name the file or archive member of each language"):
        Source.from_entry("x", {"source": "url:http://h/a.tgz", "langs": ["de", "en"], "files": {"de": "a"}}, "r")
    with pytest.raises(InputError, match="lists its LDC catalogue entries"):
        Source.from_entry("x", {"source": "manual:d", "langs": ["zh", "en"], "files": {"zh": "a", "en": "b"}}, "r")
    s = Source.from_entry("bt", {"source": "url:http://h/bt.{lang}.gz", "langs": ["en", "ro"]}, "r")
    assert s.downloads() == [("bt.en.gz", "http://h/bt.en.gz"), ("bt.ro.gz", "http://h/bt.ro.gz")]
    assert s.download_for("ro") == "bt.ro.gz"


def test_manual_source_missing_names_ldc_entries_and_paths(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        fetch(registry.source("nist-mt02"), tmp_path / "out", tmp_path, tmp_path / "ldc", "atr-nist-zh-en")
    msg = str(e.value)
    assert "LDC2010T10" in msg and str(tmp_path / "ldc/nist-zh-en/mt02.src.sgm") in msg
    assert msg.startswith("atr-nist-zh-en needs source 'nist-mt02'") and "corpora.<name>.manual_dir" in msg


def test_manual_nist_set_gives_four_aligned_references(registry: Registry, tmp_path: Path) -> None:
    d = tmp_path / "ldc/nist-zh-en"
    d.mkdir(parents=True)
    docs = ["d1", "d2"]
    src = ["<srcset setid='mt02'>"] + [f'<doc docid="{x}"><seg id=1>{x} 一</seg><seg id=2>{x} 二</seg></doc>'
                                       for x in docs] + ["</srcset>"]
    ref = ["<refset>"]
    for k in range(4):
        for x in (docs if k % 2 == 0 else docs[::-1]):            # translators order documents differently
            ref.append(f'<doc docid="{x}" sysid="ref{k}"><seg id=1>{x} one r{k}</seg>'
                       f'<seg id=2>{x} two &amp; r{k}</seg></doc>')
    write(d / "mt02.src.sgm", src)
    write(d / "mt02.ref.sgm", ref)
    counts = fetch(registry.source("nist-mt02"), tmp_path / "out", tmp_path, tmp_path / "ldc")
    assert counts == {"zh": 4, "en": 4}
    out = tmp_path / "out"
    assert (out / "zh-en.zh").read_text().splitlines() == ["d1 一", "d1 二", "d2 一", "d2 二"]
    for k in range(4):
        ref_file = out / ("zh-en.en" if k == 0 else f"zh-en.en.ref{k}")
        assert ref_file.read_text().splitlines() == [f"d1 one r{k}", f"d1 two & r{k}", f"d2 one r{k}",
                                                     f"d2 two & r{k}"]
    # the set's file replaced by one with two references: the third and fourth of the first fetch go
    write(d / "mt02.ref.sgm", [x for x in ref if 'sysid="ref2"' not in x and 'sysid="ref3"' not in x])
    fetch(registry.source("nist-mt02"), tmp_path / "out", tmp_path, tmp_path / "ldc")
    assert sorted(p.name for p in out.iterdir()) == ["source.json", "zh-en.en", "zh-en.en.ref1", "zh-en.zh"]
    # what it was fetched from, kept beside it: the registry's entry now, which a changed entry is not
    src = registry.source("nist-mt02")
    assert json.loads((out / "source.json").read_text()) == src.identity()
    check_fetched(src, out)
    other = dataclasses.replace(src, files={**src.files, "en": ["mt02.ref2.sgm"]})
    with pytest.raises(InputError, match=rf"{out} holds source 'nist-mt02' as fetched from another registry entry "
                                         r"than the one now \(files changed: .*\); remove .* to fetch it again"):
        check_fetched(other, out)
    check_fetched(dataclasses.replace(src, sha256={"x": "0" * 64}, note="pinned"), out)     # no other text
    (out / "source.json").write_text("{not json")
    with pytest.raises(InputError, match=r"\(its record source.json is unreadable: was None, .*remove .* to fetch"):
        check_fetched(src, out)


def test_sgml_plain_wmt_file() -> None:
    segs = sgml.segments(['<srcset><doc docid="a">', '<seg id="1"> Hello  &quot;world&quot; </seg>', "</doc>"])
    assert segs == {"": ['Hello "world"']}


# ---- cleaning -----------------------------------------------------------------------------------

def test_cleaning_counts_every_step() -> None:
    pairs = [("Hello world .", "Hallo Welt ."), ("", "leer"), ("a " * 90, "b " * 90), ("one", "x " * 20),
             ("It's fine.", "Es geht.")]
    report = Report()
    settings = PreprocessSettings(max_words=80, max_ratio=9)
    out = list(clean_pairs(pairs, Preparer("en"), Preparer("de"), settings, report))
    assert out == [("Hello world .", "Hallo Welt ."), ("It &apos;s fine .", "Es geht .")]
    steps = {s["step"]: (s["kept"], s["dropped"]) for s in report.as_dict()["steps"]}
    assert steps == {"bom": (5, 0), "nul": (5, 0), "control_chars": (5, 0), "non_empty": (4, 1), "tokenize": (4, 0),
                     "words_1_to_80": (3, 1), "ratio_max_9": (2, 1)}
    assert report.lines_in == 5 and report.lines_out == 2


def test_preparer_options() -> None:
    assert Preparer("en", escape=False)('He said "no" to it.') == 'He said " no " to it .'
    assert Preparer("en", lowercase=True)("The Dog.") == "the dog ."
    assert Preparer("en", tokenized=True)("It &apos;s  &quot; x &quot;") == "It &apos;s &quot; x &quot;"
    assert Preparer("en", tokenized=True, escape=False, lowercase=True)("It &apos;s &quot; x") == "it 's \" x"
    assert unescape_moses("&lt;a&gt; &amp;amp; &#124;") == "<a> &amp; |"
    assert normalize_romanian("şi ţară Ş Ţ") == "și țară Ș Ț"
    assert Preparer("ro", romanian=True)("ţară") == "țară"


def test_unsegmented_chinese_is_segmented_by_jieba_and_segmented_text_is_left_alone() -> None:
    raw = "我们今天在北京举行了一次重要的会议"
    assert not is_segmented(raw)
    seg = Preparer("zh")(raw)
    words = seg.split()
    assert "".join(words) == raw and len(words) >= 5 and "北京" in words
    already = "我们 今天 在 北京 举行 了 会议"
    assert is_segmented(already) and Preparer("zh")(already) == already
    assert Preparer("zh", segment="never")(raw) == raw


# ---- chunks, assemble, merge --------------------------------------------------------------------

def test_chunks_cover_every_line_once(tmp_path: Path) -> None:
    src = write(tmp_path / "s", [f"s{i} ü" for i in range(103)])
    tgt = write(tmp_path / "t", [f"t{i}" for i in range(103)])
    idx = chunks.index(src, tgt, 4)
    assert [c.lines for c in idx] == [25, 26, 26, 26]
    chunks.write_index(tmp_path / "i.json", idx, src, tgt)
    got = [p for c in chunks.read_index(tmp_path / "i.json") for p in chunks.read_pairs(src, tgt, c)]
    assert got == [(f"s{i} ü", f"t{i}") for i in range(103)]
    assert [c.lines for c in chunks.index(src, tgt, 200)].count(1) == 103      # more chunks than lines


def test_misaligned_and_invalid_utf8_input_name_file_and_line(tmp_path: Path) -> None:
    src = write(tmp_path / "s", ["a", "b", "c"])
    tgt = write(tmp_path / "t", ["a", "b"])
    with pytest.raises(InputError, match=r"s has 3 lines, .*t has 2"):
        chunks.index(src, tgt, 2)
    (tmp_path / "bad").write_bytes(b"ok\nfa\xe7ade\nok\n")
    write(tmp_path / "good", ["x", "y", "z"])
    with pytest.raises(InputError, match=r"bad, line 2: not valid UTF-8"):
        assemble([(str(tmp_path / "good"), str(tmp_path / "bad"))], "train", tmp_path / "o.s", tmp_path / "o.t",
                 tmp_path / "o.json")
    assert not (tmp_path / "o.s").exists()


def test_holdout_takes_test_last_and_dev_before_it(tmp_path: Path) -> None:
    assert holdout_range("train", 100, {"dev": 10, "test": 5}) == (0, 85)
    assert holdout_range("dev", 100, {"dev": 10, "test": 5}) == (85, 95)
    assert holdout_range("test", 100, {"dev": 10, "test": 5}) == (95, 100)
    a = write(tmp_path / "a", [f"a{i}" for i in range(6)])
    b = write(tmp_path / "b", [f"b{i}" for i in range(6)])
    c = write(tmp_path / "c", [f"c{i}" for i in range(4)])
    d = write(tmp_path / "d", [f"d{i}" for i in range(4)])
    parts = [(str(a), str(b)), (str(c), str(d))]
    info = assemble(parts, "dev", tmp_path / "dev.s", tmp_path / "dev.t", tmp_path / "dev.json", {"dev": 3, "test": 2})
    assert (tmp_path / "dev.s").read_text().split() == ["a5", "c0", "c1"]
    assert [p["lines"] for p in info["parts"]] == [1, 2]
    assemble(parts, "train", tmp_path / "tr.s", tmp_path / "tr.t", tmp_path / "tr.json", {"dev": 3, "test": 2})
    assert (tmp_path / "tr.t").read_text().split() == [f"b{i}" for i in range(5)]
    with pytest.raises(InputError, match="leaves no training data"):
        holdout_range("train", 5, {"dev": 3, "test": 2})


def test_clean_chunks_then_merge_deduplicates_across_chunks(tmp_path: Path) -> None:
    lines = ["the cat .", "a dog .", "the cat .", "", "a bird .", "a dog ."]
    src = write(tmp_path / "s", lines)
    tgt = write(tmp_path / "t", [x.upper() for x in lines])
    chunks.write_index(tmp_path / "i.json", chunks.index(src, tgt, 2), src, tgt)
    parts = []
    for i in range(2):
        o = (tmp_path / f"{i}.s", tmp_path / f"{i}.t", tmp_path / f"{i}.json")
        clean_chunk(tmp_path / "i.json", i, src, tgt, "en", "en", PreprocessSettings(max_words=10), *o)
        parts.append(o)
    report = merge(parts, tmp_path / "m.s", tmp_path / "m.t", tmp_path / "report.json", dedupe=True)
    assert (tmp_path / "m.s").read_text().splitlines() == ["the cat .", "a dog .", "a bird ."]
    saved = json.loads((tmp_path / "report.json").read_text())
    steps = {s["step"]: (s["kept"], s["dropped"]) for s in saved["steps"]}
    assert steps["non_empty"] == (5, 1) and steps["dedupe"] == (3, 2)
    assert saved["lines_in"] == 6 and saved["lines_out"] == 3 == report.lines_out


def test_prepare_text_keeps_every_line_and_prepares_extra_references(tmp_path: Path) -> None:
    inp = write(tmp_path / "test.tgt", ["Hello, world!", ""])
    write(tmp_path / "test.tgt.ref1", ["Hi, world!", "x"])
    assert prepare_text(inp, tmp_path / "out", Preparer("en")) == 2
    assert (tmp_path / "out").read_text().splitlines() == ["Hello , world !", ""]
    assert (tmp_path / "out.ref1").read_text().splitlines() == ["Hi , world !", "x"]


# ---- truecasing and BPE on pairs ----------------------------------------------------------------

def test_truecasing_learns_the_usual_case(tmp_path: Path) -> None:
    text = write(tmp_path / "t", ["The house is red .", "the house is big .", "I saw the house .",
                                  "Paris is big .", "we like Paris ."])
    truecase.train(text, tmp_path / "model")
    write(tmp_path / "in", ["The house .", "House is red .", "Paris is red ."])
    assert truecase.apply(tmp_path / "model", tmp_path / "in", tmp_path / "out") == 3
    assert (tmp_path / "out").read_text().splitlines() == ["the house .", "house is red .", "Paris is red ."]


def test_bpe_on_pairs_drops_pairs_over_the_subword_limit_same_with_workers(tmp_path: Path) -> None:
    from rnmt.data import bpe

    words = ["low", "lower", "newest", "widest", "longer", "wider"]
    src = write(tmp_path / "s", [" ".join(words[: 1 + i % 6]) for i in range(300)])
    tgt = write(tmp_path / "t", [" ".join(words[: 1 + (i * 5) % 6]) for i in range(300)])
    bpe.learn(bpe.file_lines([src, tgt]), tmp_path / "codes", 10)
    outs = []
    for workers in (1, 2):
        o = tmp_path / f"w{workers}"
        o.mkdir()
        r = segment_pairs(src, tgt, str(tmp_path / "codes"), str(tmp_path / "codes"), o / "s", o / "t", o / "r.json",
                          max_subwords=8, workers=workers)
        outs.append(((o / "s").read_text(), (o / "t").read_text()))
        pairs = zip((o / "s").read_text().splitlines(), (o / "t").read_text().splitlines(), strict=True)
        lengths = [max(len(a.split()), len(b.split())) for a, b in pairs]
        assert lengths and max(lengths) <= 8 and r.steps[0].dropped > 0 and r.lines_out == len(lengths)
    assert outs[0] == outs[1]
    word = segment_pairs(src, tgt, None, None, tmp_path / "ws", tmp_path / "wt", tmp_path / "wr.json")
    assert word.lines_out == 300 and (tmp_path / "ws").read_text() == src.read_text()


def test_shipped_config_corpora_resolve(registry: Registry, config: dict) -> None:
    c = Corpora(copy.deepcopy(config), registry)
    assert c.names("synthetic") == ["synthetic-demo"] and c["synthetic-demo"].preprocess.chunks >= 1


def test_plan_gives_a_registry_corpus_its_languages(config: dict) -> None:
    from rnmt.planning.plan import Plan

    config["corpora"]["wmt"] = {"registry": "dtmt-wmt14-en-fr"}
    corpus = Plan(config, ROOT).corpus("wmt")
    assert (corpus["src_lang"], corpus["tgt_lang"]) == ("en", "fr") and corpus["registry"] == "dtmt-wmt14-en-fr"


def test_multi_reference_sets_concatenate_their_references(tmp_path: Path) -> None:
    for name, n in (("mt02", 2), ("mt03", 1)):
        write(tmp_path / f"{name}.zh", [f"{name} 源 {i}" for i in range(n)])
        write(tmp_path / f"{name}.en", [f"{name} ref0 {i}" for i in range(n)])
        for k in (1, 2, 3):
            write(tmp_path / f"{name}.en.ref{k}", [f"{name} ref{k} {i}" for i in range(n)])
    parts = [(str(tmp_path / f"{x}.zh"), str(tmp_path / f"{x}.en")) for x in ("mt02", "mt03")]
    info = assemble(parts, "test", tmp_path / "t.src", tmp_path / "t.tgt", tmp_path / "t.json")
    assert info["references"] == 4 and info["lines"] == 3
    assert (tmp_path / "t.tgt.ref3").read_text().splitlines() == ["mt02 ref3 0", "mt02 ref3 1", "mt03 ref3 0"]
    (tmp_path / "mt03.en.ref3").unlink()
    with pytest.raises(InputError, match="different numbers of references"):
        assemble(parts, "test", tmp_path / "t.src", tmp_path / "t.tgt", tmp_path / "t.json")


def test_plan_checks_corpus_entries_against_the_registry(config: dict) -> None:
    from rnmt.planning.plan import Plan

    config["corpora"]["wmt"] = {"registry": "atr-wmt41-en-de"}
    with pytest.raises(ConfigError, match="corpora.wmt.registry: 'atr-wmt41-en-de' is not in .*known corpora: "):
        Plan(config, ROOT)


def test_a_registry_kind_as_a_config_source_points_to_the_registry(registry: Registry, config: dict) -> None:
    config["corpora"] = {"c": {"source": "mtdata:Statmt-europarl_wmt13-7-deu-eng", "src_lang": "en", "tgt_lang": "de"}}
    with pytest.raises(ConfigError, match="a mtdata: source is a registry source; list it in the corpus registry"):
        Corpora(config, registry)
