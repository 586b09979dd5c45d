"""Rows kept beyond their run (rnmt.report.kept): a table built in a later session from the members an earlier
one kept must be the table their own run gives, significance included; a kept member scored on other data
must not reach it; and a store from elsewhere must not read or write outside its folders."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from sacrebleu.significance import PairedTest
from test_claims import corpus, damage

from rnmt.evaluate.metrics import write_metrics
from rnmt.evaluate.score import detok_scorer
from rnmt.io import InputError, write_json
from rnmt.planning.table import Row, Table
from rnmt.report import kept
from rnmt.report.tables import build
from rnmt.train.resume import input_identity

ROOT = Path(__file__).resolve().parents[1]


def data(run: Path, refs: list[str]) -> None:
    """A run's references, as the data rules lay them out."""
    for side in ("raw", "tok"):
        (run / "data/c" / side).mkdir(parents=True, exist_ok=True)
        (run / "data/c" / side / "test.tgt").write_text("\n".join(refs) + "\n")


def decoded(run: Path, variant: str, member: str, hyps: list[str], trained: bool = False) -> Path:
    """A member's translations and the metrics file `rnmt score` writes for them, in a run's folder; with
    `trained`, beside its model's train.json naming the BPE'd training text it read (as the trainer writes)."""
    t = run / "translations/c" / variant / member
    t.mkdir(parents=True)
    for ext in ("txt", "tok"):
        (t / f"test.{ext}").write_text("\n".join(hyps) + "\n")
    train = []
    if trained:
        folder = run / "models/c" / variant / member
        folder.mkdir(parents=True)
        inputs, files = input_identity({"train_src": run / "data/c/bpe/train.src"}, folder)
        write_json(folder / "train.json", {"inputs": inputs, "input_files": files})
        train = [str(folder / "train.json")]
    m = run / "metrics/c" / variant / member / "test.json"
    m.parent.mkdir(parents=True)
    write_metrics(str(m), str(t / "test.txt"), [str(run / "data/c/raw/test.tgt")], str(t / "test.tok"),
                  [str(run / "data/c/tok/test.tgt")], train=train,
                  meta={"corpus": "c", "variant": variant, "member": member, "testset": "test"})
    return m


SYSTEMS = {("gru", "seed1"): 0.3, ("gru", "seed2"): 0.35, ("atr", "seed1"): 0.2, ("atr", "seed2"): 0.25}


@pytest.fixture
def refs() -> list[str]:
    return corpus(120, seed=3)


def hyps(refs: list[str], variant: str, member: str) -> list[str]:
    return damage(refs, SYSTEMS[(variant, member)], len(variant) + int(member[-1]))


TABLE = Table("t", Path("t.yaml"), "T", "c", "test", ["bleu"],
              [Row("GRU", "gru", {}, (1, 2)), Row("ATR", "atr", {}, (1, 2))], baseline="GRU")


def table_of(run: Path, out: Path) -> pd.DataFrame:
    files = sorted(run.glob("metrics/c/*/*/test.json"))
    return build(TABLE, [str(f) for f in files], "r", "mini", out / "t.csv", out / "t.md")


def test_a_table_of_kept_and_own_members_is_the_table_of_the_run_that_made_them(tmp_path: Path, refs) -> None:
    """Session 1 decodes seed 1 of both rows and keeps them; session 2 (another folder, its data made again)
    decodes seed 2, restores seed 1: its table equals the one run with all four, p-values too, and the
    p-value is sacrebleu's paired test on the same files."""
    whole, first, second, store = (tmp_path / x for x in ("whole", "first", "second", "store"))
    for run in (whole, first, second):
        data(run, refs)
    for (v, m) in SYSTEMS:
        decoded(whole, v, m, hyps(refs, v, m))
        decoded(first if m == "seed1" else second, v, m, hyps(refs, v, m))
    done = kept.keep(first, [("c", "gru", "seed1"), ("c", "atr", "seed1")], store)
    assert done.done == [("c", "gru", "seed1"), ("c", "atr", "seed1")]
    shutil.rmtree(first)                                    # the first session's machine is gone
    back = kept.restore(store, second)
    assert back.done == [("c", "atr", "seed1"), ("c", "gru", "seed1")] and not back.skipped
    expected, got = table_of(whole, tmp_path / "a"), table_of(second, tmp_path / "b")
    pd.testing.assert_frame_equal(expected, got)
    p = []
    for s in ("seed1", "seed2"):
        _, results = PairedTest([("base", hyps(refs, "gru", s)), ("sys", hyps(refs, "atr", s))],
                                {"BLEU": detok_scorer(False)}, [refs], test_type="bs", n_samples=1000)()
        p.append(results["BLEU"][1].p_value)
        assert results["BLEU"][1].score > results["BLEU"][0].score     # both seeds one way: the larger p counts
    assert got.set_index(["system", "metric"]).p_value[("ATR", "bleu")] == pytest.approx(max(p), abs=1e-12)
    assert (tmp_path / "a/t.md").read_text() == (tmp_path / "b/t.md").read_text()


def test_restore_leaves_out_members_scored_on_other_data_and_keeps_the_runs_own(tmp_path: Path, refs) -> None:
    run, store, later = tmp_path / "run", tmp_path / "store", tmp_path / "later"
    data(run, refs)
    for v in ("gru", "atr"):
        decoded(run, v, "seed1", hyps(refs, v, "seed1"))
    kept.keep(run, [("c", "gru", "seed1"), ("c", "atr", "seed1")], store)
    # no data yet: restore names what to make first; the references changed since: the member is not restored
    out = kept.restore(store, later)
    assert out.done == [] and "data/c/raw/test.tgt is missing: make the run's data first" in out.skipped[
        ("c", "gru", "seed1")]
    assert kept.data_files(store, [("c", "gru", "seed1")]) == ["data/c/raw/test.tgt", "data/c/tok/test.tgt"]
    data(later, [r + " x" for r in refs])
    out = kept.restore(store, later)
    assert out.done == [] and "made from another data/c/raw/test.tgt than the run's now" in out.skipped[
        ("c", "atr", "seed1")]
    assert not (later / "metrics").exists() and not (later / "translations").exists()
    # the run's own decoding of a member is never replaced by the kept one
    data(later, refs)
    own = decoded(later, "gru", "seed1", hyps(refs, "atr", "seed1"))
    before = own.read_bytes()
    out = kept.restore(store, later, [("c", "gru", "seed1"), ("c", "atr", "seed1"), ("c", "lstm", "seed1")])
    assert out.present == [("c", "gru", "seed1")] and out.done == [("c", "atr", "seed1")]
    assert own.read_bytes() == before
    assert "Restored 1, 1 the run has itself row member(s)" in out.summary("Restored")


def test_a_member_trained_on_other_text_than_the_runs_now_is_not_restored(tmp_path: Path, refs) -> None:
    """The references alone do not show a changed BPE (or labels): the files the models trained on do."""
    run, store, later = tmp_path / "run", tmp_path / "store", tmp_path / "later"
    for r, text in ((run, "a b@@ c\n"), (later, "a b c\n")):
        data(r, refs)
        (r / "data/c/bpe").mkdir(parents=True)
        (r / "data/c/bpe/train.src").write_text(text)
    decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"), trained=True)
    kept.keep(run, [("c", "gru", "seed1")], store)
    assert "data/c/bpe/train.src" in kept.data_files(store, [("c", "gru", "seed1")])
    out = kept.restore(store, later)
    assert out.skipped == {("c", "gru", "seed1"): "made from another data/c/bpe/train.src than the run's now (its "
                                                  "sha256 differs): retrain it"}
    (later / "data/c/bpe/train.src").write_text("a b@@ c\n")
    assert kept.restore(store, later).done == [("c", "gru", "seed1")]


def test_keeping_a_member_again_keeps_its_bytes_and_another_decoding_of_it_is_refused(tmp_path: Path, refs) -> None:
    run, other, store = tmp_path / "run", tmp_path / "other", tmp_path / "store"
    for r in (run, other):
        data(r, refs)
    decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"))
    member = [("c", "gru", "seed1")]
    kept.keep(run, member, store)
    gz = store / "translations/c/gru/seed1/test.txt.gz"
    first = gz.read_bytes()
    assert gzip.decompress(first) == (run / "translations/c/gru/seed1/test.txt").read_bytes()
    decoded(other, "gru", "seed1", hyps(refs, "gru", "seed1"))          # a deterministic rerun: the same text
    assert kept.keep(other, member, store).same == member and gz.read_bytes() == first
    # the same translations scored again (a score added, a scorer fixed): the store takes the new scores
    metrics = json.loads((other / "metrics/c/gru/seed1/test.json").read_text())
    metrics["scores"]["chrf_plus"] = 51.5
    (other / "metrics/c/gru/seed1/test.json").write_text(json.dumps(metrics))
    assert kept.keep(other, member, store).done == member and gz.read_bytes() == first
    assert json.loads((store / "metrics/c/gru/seed1/test.json").read_text())["scores"]["chrf_plus"] == 51.5
    assert kept.keep(other, member, store).same == member
    # kept with other settings than the run's now, the same text decoded: the run's record replaces it, and
    # the training log kept beside it (the other training's) goes where the run has none
    log = other / "models/c/gru/seed1/train.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"kind": "valid", "step": 500}\n')
    assert kept.keep(other, member, store).done == member
    assert (store / "beside/c/gru/seed1/seed1/train.jsonl.gz").is_file()
    log.unlink()
    metrics["decode"] = {"beam": 12}
    (other / "metrics/c/gru/seed1/test.json").write_text(json.dumps(metrics))
    assert kept.keep(other, member, store).same == member
    assert kept.keep(other, member, store, replace=member).done == member
    assert json.loads((store / "metrics/c/gru/seed1/test.json").read_text())["decode"] == {"beam": 12}
    assert not (store / "beside/c/gru/seed1").exists()
    log.parent.rmdir()
    shutil.rmtree(other / "translations")
    shutil.rmtree(other / "metrics")
    decoded(other, "gru", "seed1", hyps(refs, "atr", "seed2"))          # the same seed decoded otherwise
    with pytest.raises(InputError, match="holds other translations of c/gru/seed1"):
        kept.keep(other, member, store)
    assert gz.read_bytes() == first
    assert kept.keep(other, member, store, replace=member).done == member      # a stale kept member
    assert gzip.decompress(gz.read_bytes()) == (other / "translations/c/gru/seed1/test.txt").read_bytes()
    assert kept.keep(other, [("c", "atr", "seed1")], store).skipped        # nothing decoded: named, not kept


def test_a_refused_member_leaves_the_store_as_it_was(tmp_path: Path, refs) -> None:
    """Two members kept at once, the second refused (the store holds other translations of it): the first is
    not kept either, so the store never holds half of what a table was built from."""
    run, other, store = tmp_path / "run", tmp_path / "other", tmp_path / "store"
    for r in (run, other):
        data(r, refs)
    decoded(run, "atr", "seed1", hyps(refs, "atr", "seed1"))
    kept.keep(run, [("c", "atr", "seed1")], store)
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    decoded(other, "gru", "seed1", hyps(refs, "gru", "seed1"))
    decoded(other, "atr", "seed1", hyps(refs, "atr", "seed2"))           # another decoding of a kept member
    with pytest.raises(InputError, match="holds other translations of c/atr/seed1.*nothing was kept"):
        kept.keep(other, [("c", "gru", "seed1"), ("c", "atr", "seed1")], store)
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_a_store_from_elsewhere_stays_inside_its_folders(tmp_path: Path, refs) -> None:
    run, store, later = tmp_path / "run", tmp_path / "store", tmp_path / "later"
    for r in (run, later):
        data(r, refs)
    decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"))
    kept.keep(run, [("c", "gru", "seed1")], store)
    metrics = store / "metrics/c/gru/seed1/test.json"
    good = json.loads(metrics.read_text())
    # a translation that is not what the metrics scored: refused, and nothing left behind
    gz = store / "translations/c/gru/seed1/test.txt.gz"
    saved = gz.read_bytes()
    gz.write_bytes(gzip.compress(b"something else\n"))
    with pytest.raises(InputError, match="does not hold what c/gru/seed1's metrics scored"):
        kept.restore(store, later)
    assert not (later / "translations/c/gru/seed1/test.txt").exists() and not (later / "metrics").exists()
    gz.write_bytes(saved)
    # a metrics file naming a file outside the run folder
    bad = json.loads(json.dumps(good))
    bad["files"]["sha256"]["../../../../../../outside.txt"] = "0" * 64
    metrics.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="outside the run folder"):
        kept.restore(store, later)
    metrics.write_text(json.dumps(good))
    # a folder whose name is no plain name
    shutil.copytree(store / "metrics/c/gru", store / "metrics/c/g r u")
    with pytest.raises(InputError, match="'g r u' is not a plain folder name"):
        kept.restore(store, later)
    shutil.rmtree(store / "metrics/c/g r u")
    assert kept.restore(store, later).done == [("c", "gru", "seed1")]


def test_the_training_log_and_gates_a_figure_reads_go_with_their_member(tmp_path: Path, refs) -> None:
    """UD Figure 2 draws each row's training cost from its model's log and ATR Figure 3 its gate statistics:
    kept with the member, they come back byte for byte, checked, where the run has no model of its own."""
    run, store, later, own = (tmp_path / x for x in ("run", "store", "later", "own"))
    for r in (run, later, own):
        data(r, refs)
    decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"))
    log = run / "models/c/gru/seed1/train.jsonl"
    gates = run / "analysis/c/gru/seed1/gates.test.json"
    for path, text in ((log, '{"kind": "train", "step": 50, "loss": 4.1}\n'), (gates, '{"pearson_r": -0.98}\n')):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    member = [("c", "gru", "seed1")]
    assert kept.keep(run, member, store).done == member
    assert kept.keep(run, member, store).same == member
    assert kept.restore(store, later).done == member
    for path in (log, gates):
        assert (later / path.relative_to(run)).read_bytes() == path.read_bytes()
    # the same translations from a rerun elsewhere, with its own log and times: its record goes with its log,
    # so that a figure's times and the metrics' training record are one training's
    rerun = tmp_path / "rerun"
    data(rerun, refs)
    decoded(rerun, "gru", "seed1", hyps(refs, "gru", "seed1"))
    metrics = rerun / "metrics/c/gru/seed1/test.json"
    record = json.loads(metrics.read_text())
    record["train"] = {"train_seconds": 1234.0}
    metrics.write_text(json.dumps(record))
    (rerun / "models/c/gru/seed1").mkdir(parents=True)
    (rerun / "models/c/gru/seed1/train.jsonl").write_text('{"kind": "train", "step": 50, "loss": 4.1, "t": 9}\n')
    assert kept.keep(rerun, member, store).done == member
    assert json.loads((store / "metrics/c/gru/seed1/test.json").read_text())["train"] == {"train_seconds": 1234.0}
    assert gzip.decompress((store / "beside/c/gru/seed1/seed1/train.jsonl.gz").read_bytes()).endswith(b'"t": 9}\n')
    # a run that trained the member itself (or began to: its log) decodes its own model: nothing kept goes in
    (own / "models/c/gru/seed1").mkdir(parents=True)
    (own / "models/c/gru/seed1/train.jsonl").write_text('{"kind": "train", "step": 50, "loss": 5.0}\n')
    assert kept.restore(store, own).present == member
    assert not (own / "metrics").exists() and not (own / "analysis").exists()
    # a member kept before its log was: keeping it again adds the log
    shutil.rmtree(store / "beside")
    assert kept.keep(run, member, store).done == member and (store / "beside/c/gru/seed1/sha256.json").is_file()
    # the same decoding from a run without gate statistics: the kept ones stay
    gates.unlink()
    assert kept.keep(run, member, store).same == member
    assert (store / "beside/c/gru/seed1/seed1/gates.test.json.gz").is_file()
    # a damaged log (other bytes, or a cut gzip) is refused, and nothing of the member stays in the run
    shutil.rmtree(later)
    data(later, refs)
    gz = store / "beside/c/gru/seed1/seed1/train.jsonl.gz"
    whole = gz.read_bytes()
    for damaged, says in ((gzip.compress(b"{}\n"), "does not hold what c/gru/seed1's seed1/train.jsonl was when kept"),
                          (whole[: len(whole) // 2], "not a whole gzip file")):
        gz.write_bytes(damaged)
        with pytest.raises(InputError, match=says):
            kept.restore(store, later)
        assert not [p for p in later.rglob("*") if p.is_file() and "data" not in p.parts]
    # a kept name that would write elsewhere than the member's own log or gates
    (store / "beside/c/gru/seed1/sha256.json").write_text(json.dumps({"seed1/../../../../x.jsonl": "0" * 64}))
    with pytest.raises(InputError, match="is no file a figure reads beside this member's metrics"):
        kept.restore(store, later)
    assert not (later / "metrics").exists()


def test_an_ensemble_of_kept_seeds_is_restored_after_its_seeds_logs(tmp_path: Path, refs) -> None:
    """Restoring a row's seeds brings their training logs into the run's model folders; the kept ensemble of
    those seeds is then restored too (ATR Table 3's ensemble was left out, so a table of kept rows lost its
    row, and a run would have trained the seeds again to decode it), while a log of the run's own training of
    a seed still makes the ensemble the run's to decode."""
    run, store, later, own = (tmp_path / x for x in ("run", "store", "later", "own"))
    for r in (run, later, own):
        data(r, refs)
    members = [("c", "gru", "seed1"), ("c", "gru", "seed2"), ("c", "gru", "ens1-2")]
    for _, variant, member in members:
        decoded(run, variant, member, hyps(refs, variant, "seed1" if member == "ens1-2" else member))
    for seed in (1, 2):
        log = run / f"models/c/gru/seed{seed}/train.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text(f'{{"kind": "train", "step": 50, "loss": 4.{seed}}}\n')
    assert kept.keep(run, members, store).done == members
    assert sorted(kept.restore(store, later, members).done) == sorted(members)
    assert (later / "metrics/c/gru/ens1-2/test.json").is_file()
    shutil.rmtree(later)
    data(later, refs)
    assert sorted(kept.restore(store, later, members[:2]).done) == members[:2]     # the seeds first, then
    assert kept.restore(store, later, members[2:]).done == members[2:]             # their ensemble
    (own / "models/c/gru/seed2").mkdir(parents=True)                              # the run trains seed 2 itself
    (own / "models/c/gru/seed2/train.jsonl").write_text('{"kind": "train", "step": 50, "loss": 5.0}\n')
    assert kept.restore(store, own, members[2:]).present == members[2:]
    # a seed's damaged record of its log: that seed's restore says so, and its ensemble waits for it
    (store / "beside/c/gru/seed1/sha256.json").write_text("[]")
    damaged = tmp_path / "damaged"
    data(damaged, refs)
    (damaged / "models/c/gru/seed1").mkdir(parents=True)
    (damaged / "models/c/gru/seed1/train.jsonl").write_text('{"kind": "train", "step": 50, "loss": 4.1}\n')
    assert kept.restore(store, damaged, members[2:]).present == members[2:]
    fresh = tmp_path / "fresh"
    data(fresh, refs)
    with pytest.raises(InputError, match="not a list of kept files"):
        kept.restore(store, fresh, members[:1])


def test_a_kept_metrics_file_is_its_own_members_and_scores_its_own_translations(tmp_path: Path, refs) -> None:
    """A store from elsewhere whose metrics file names another row's translations, or sits under another
    member's name, is refused before anything reaches the run; so is a metrics file naming a file it holds
    no sha256 of, wherever it is read."""
    from rnmt.evaluate.metrics import scored_file

    run, later = tmp_path / "run", tmp_path / "later"
    for r in (run, later):
        data(r, refs)
    for variant, member in (("gru", "seed1"), ("atr", "seed1")):
        decoded(run, variant, member, hyps(refs, variant, member))
    members = [("c", "gru", "seed1"), ("c", "atr", "seed1")]

    def store_with(edit) -> Path:
        store = tmp_path / f"store{len(list(tmp_path.glob('store*')))}"
        kept.keep(run, members, store)
        f = store / "metrics/c/gru/seed1/test.json"
        record = json.loads(f.read_text())
        edit(record)
        f.write_text(json.dumps(record))
        return store

    def other_hyp(record: dict) -> None:       # GRU's seed 1 scored on ATR's translations, sha256 and all
        other = "../../../../translations/c/atr/seed1/test.txt"
        record["files"]["sha256"][other] = record["files"]["sha256"].pop(record["files"]["hyp"])
        record["files"]["hyp"] = other

    for edit, says in ((other_hyp, "neither c/gru/seed1's own translation nor the run's data"),
                       (lambda r: r.update(member="seed2"), "records member 'seed2': it is not c/gru/seed1's")):
        shutil.rmtree(later / "metrics", ignore_errors=True)
        with pytest.raises(InputError, match=says):
            kept.restore(store_with(edit), later)
        assert not (later / "metrics/c/gru").exists()
    f = run / "metrics/c/gru/seed1/test.json"
    record = json.loads(f.read_text())
    record["files"]["refs"] = ["../../../../translations/c/atr/seed1/test.txt"]    # read, never checked
    with pytest.raises(InputError, match="records no sha256 of it"):
        scored_file(f, record)


def test_a_store_with_a_link_is_refused_before_it_deletes_or_writes_outside(tmp_path: Path, refs) -> None:
    run, store, outside = tmp_path / "run", tmp_path / "store", tmp_path / "outside"
    data(run, refs)
    decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"))
    log = run / "models/c/gru/seed1/train.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"kind": "valid", "step": 500}\n')
    (outside / "seed1").mkdir(parents=True)
    (outside / "seed1/precious.txt").write_text("a colleague's file\n")
    (store / "beside/c").mkdir(parents=True)
    (store / "beside/c/gru").symlink_to(outside)            # a committed link in a store from elsewhere
    with pytest.raises(InputError, match="is a symbolic link"):
        kept.keep(run, [("c", "gru", "seed1")], store, replace=[("c", "gru", "seed1")])
    assert (outside / "seed1/precious.txt").read_text() == "a colleague's file\n"
    assert sorted(p.name for p in outside.rglob("*")) == ["precious.txt", "seed1"]


def test_a_members_dev_and_test_metrics_of_two_trainings_are_not_kept(tmp_path: Path, refs) -> None:
    """A model trained again for test.json alone leaves dev.json of the model before: the member's
    training facts (read from either) would not be its test BLEU's, so it is refused, naming the fix."""
    run, store = tmp_path / "run", tmp_path / "store"
    data(run, refs)
    test = decoded(run, "gru", "seed1", hyps(refs, "gru", "seed1"))
    record = json.loads(test.read_text())
    record.update(testset="dev", train={"steps": 6000, "best_step": 5500})
    test.with_name("dev.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="record other trainings"):
        kept.keep(run, [("c", "gru", "seed1")], store)
    assert not (store / "metrics/c/gru/seed1").exists()
    record["train"] = json.loads(test.read_text())["train"]
    test.with_name("dev.json").write_text(json.dumps(record))
    assert kept.keep(run, [("c", "gru", "seed1")], store).done == [("c", "gru", "seed1")]


def mini_collect():       # benchmarks/multi30k/collect.py, a script outside the package
    spec = importlib.util.spec_from_file_location("mini_collect", ROOT / "benchmarks/multi30k/collect.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    return collect


def mini_member(run: Path, plan, variant: str, member: str, hyps: list[str], refs: list[str],
                testsets: tuple[str, ...] = ("test",), **train: object) -> None:
    """`run` with a row member of the `mini` plan `plan` (on Multi30k En-De) decoded and scored on `testsets`,
    its model trained with the plan's settings and `train`, as its metrics files record them."""
    from rnmt.planning.current import expected

    want = expected(plan.variant("multi30k-en-de", variant))
    d, t = run / "data/multi30k-en-de", run / "translations/multi30k-en-de" / variant / member
    for folder in (d / "raw", d / "tok", t, run / "metrics/multi30k-en-de" / variant / member):
        folder.mkdir(parents=True, exist_ok=True)
    for testset in testsets:
        for side in ("raw", "tok"):
            (d / side / f"{testset}.tgt").write_text("\n".join(refs) + "\n")
        for ext in ("txt", "tok"):
            (t / f"{testset}.{ext}").write_text("\n".join(hyps) + "\n")
        m = run / "metrics/multi30k-en-de" / variant / member / f"{testset}.json"
        write_metrics(str(m), str(t / f"{testset}.txt"), [str(d / f"raw/{testset}.tgt")], str(t / f"{testset}.tok"),
                      [str(d / f"tok/{testset}.tgt")],
                      meta={"corpus": "multi30k-en-de", "variant": variant, "member": member, "testset": testset})
        record = json.loads(m.read_text())
        record["train"] = {"model_config": want["model"],
                           "train_settings": {**want["train"], "seed": int(member.removeprefix("seed")), **train}}
        record["decode"] = {"settings": want["search"]}
        m.write_text(json.dumps(record))


@pytest.fixture
def mini(tmp_path: Path, monkeypatch):
    """benchmarks/multi30k/collect.py with its results and kept rows in `tmp_path`, and a plan of its tables
    at 3 seeds a row from config.yaml."""
    collect = mini_collect()
    plans = {name: collect._plan("mini", 3, [name], 3) for name in ("dtmt-table1", "atr-figure3")}
    monkeypatch.setattr(collect, "_plan", lambda run, seeds, tables, *a, **k: plans[tables[0]])
    monkeypatch.setattr(collect, "ROOT", tmp_path)
    monkeypatch.setattr(collect, "ROWS", tmp_path / "rows")
    return collect, plans


def test_keeping_a_retrained_member_replaces_the_one_kept_with_earlier_settings(tmp_path: Path, refs, mini) -> None:
    """A session retrains DTMT#4's seed 1 because its settings changed and keeps it (`--keep-only`, the other
    seeds still to train): the kept member of the earlier settings is replaced by the run's, where it had
    been refused as another decoding of the same member."""
    collect, plans = mini
    plan = plans["dtmt-table1"]
    mini_member(tmp_path / "results/earlier", plan, "dtmt-4", "seed1", damage(refs, 0.9, 1), refs, eps=1e-6)
    kept.keep(tmp_path / "results/earlier", [("multi30k-en-de", "dtmt-4", "seed1")], tmp_path / "rows")
    now = damage(refs, 0.2, 2)
    mini_member(tmp_path / "results/mini", plan, "dtmt-4", "seed1", now, refs)
    collect.collect("dtmt-table1", "mini", "1", 3, False, mode="keep")
    store = tmp_path / "rows"
    assert gzip.decompress((store / "translations/multi30k-en-de/dtmt-4/seed1/test.txt.gz").read_bytes()) \
        == ("\n".join(now) + "\n").encode()
    record = json.loads((store / "metrics/multi30k-en-de/dtmt-4/seed1/test.json").read_text())
    assert record["train"]["train_settings"]["eps"] == plan.variant("multi30k-en-de", "dtmt-4").train["eps"] != 1e-6


def test_keeping_a_member_retrained_on_the_runs_data_replaces_the_one_kept_from_other_data(
        tmp_path: Path, refs, mini) -> None:
    """A member kept from other data (its references changed since) is not restored, so the run trains it
    again with the same settings; keeping that one replaces the kept member, where it had been refused as
    another decoding made with the same settings, and the whole collect stopped."""
    collect, plans = mini
    plan = plans["dtmt-table1"]
    mini_member(tmp_path / "results/earlier", plan, "dtmt-4", "seed1", damage(refs, 0.9, 1),
                refs[:-1] + ["an older reference"])
    kept.keep(tmp_path / "results/earlier", [("multi30k-en-de", "dtmt-4", "seed1")], tmp_path / "rows")
    now = damage(refs, 0.2, 2)
    mini_member(tmp_path / "results/mini", plan, "dtmt-4", "seed1", now, refs)
    member = ("multi30k-en-de", "dtmt-4", "seed1")
    assert kept.other_data(tmp_path / "rows", tmp_path / "results/mini", member) == (
        "made from another data/multi30k-en-de/raw/test.tgt than the run's now (its sha256 differs): retrain it")
    collect.collect("dtmt-table1", "mini", "1", 3, False, mode="keep")
    assert gzip.decompress((tmp_path / "rows/translations/multi30k-en-de/dtmt-4/seed1/test.txt.gz").read_bytes()) \
        == ("\n".join(now) + "\n").encode()


def test_collect_decodes_dev_again_where_it_is_of_another_training_than_test(tmp_path: Path, refs, mini,
                                                                           capsys) -> None:
    """A model trained again for its test.json alone leaves the dev.json of the model before: collect asks
    Snakemake for that dev.json again (its translation is older than the model), not for test.json."""
    collect, plans = mini
    run = tmp_path / "results/mini"
    mini_member(run, plans["dtmt-table1"], "dtmt-4", "seed1", damage(refs, 0.2, 2), refs, ("test", "dev"))
    metrics = "results/mini/metrics/multi30k-en-de/dtmt-4/seed1"

    def targets() -> list[str]:
        collect.collect("dtmt-table1", "mini", "1", 3, False, mode="restore")
        return [t for t in capsys.readouterr().out.splitlines() if "dtmt-4/seed1" in t]

    assert targets() == []
    dev = tmp_path / metrics / "dev.json"
    record = json.loads(dev.read_text())
    record["train"]["best_step"] = 1500                # the record of another training of the model
    dev.write_text(json.dumps(record))
    assert targets() == [f"{metrics}/dev.json"]


def test_collect_trains_again_a_kept_member_without_the_gates_a_figure_draws(tmp_path: Path, refs, mini,
                                                                           capsys) -> None:
    """RNNSearch+ATR's seed 1, kept by ATR Table 4 without gate statistics, restored for ATR Figure 3 where its
    model is not: its gates can only come from a model trained again, so its metrics are made again too (one
    model's both), where only the gates had been asked for (Snakemake then trained a model for them alone)."""
    collect, plans = mini
    plan = plans["atr-figure3"]
    (variant,) = {r.variant for r in plan.table("atr-figure3").trained_rows}
    mini_member(tmp_path / "results/earlier", plan, variant, "seed1", damage(refs, 0.2, 2), refs, ("test", "dev"))
    kept.keep(tmp_path / "results/earlier", [("multi30k-en-de", variant, "seed1")], tmp_path / "rows")
    for folder in ("raw", "tok"):                      # the later run's data, made before the restore
        shutil.copytree(tmp_path / "results/earlier/data/multi30k-en-de" / folder,
                        tmp_path / "results/mini/data/multi30k-en-de" / folder)
    collect.collect("atr-figure3", "mini", "1", 3, False, mode="restore")
    out = capsys.readouterr()
    seed1 = [t for t in out.out.splitlines() if f"{variant}/seed1/" in t]
    assert sorted(Path(t).name for t in seed1) == ["dev.json", "gates.test.json", "test.json"]
    assert f"{variant} seed1 was kept without the gate statistics atr-figure3 draws" in out.err
    assert (tmp_path / "results/mini/metrics/multi30k-en-de" / variant / "seed1/test.json").is_file()   # restored


def test_collect_judges_a_run_by_the_config_it_was_built_with(tmp_path: Path, monkeypatch) -> None:
    """A run keeps the config it was built with, and Snakemake builds it with that: collect's judgement of
    which members are stale (and so retrained) takes the same, not config.yaml's values changed since."""
    import yaml

    from rnmt.planning import runconfig

    collect = mini_collect()
    monkeypatch.setattr(collect, "RESULTS", tmp_path)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    now = config["scales"]["mini"]["train"]["patience"]
    config["scales"]["mini"]["train"]["patience"] = now + 2
    runconfig.write_record(runconfig.record_path(tmp_path / "built"), {**config, "run": "built", "scale": "mini"})
    patience = {run: collect._plan(run, 3, ["dtmt-table1"], 3, recorded=True).variant("multi30k-en-de", "dtmt-1")
                .train["patience"] for run in ("built", "new")}
    assert patience == {"built": now + 2, "new": now}


def test_the_mini_index_lists_the_kept_members_of_a_table(tmp_path: Path) -> None:
    collect = mini_collect()
    assert "Row members kept" not in collect.index(tmp_path)
    for variant in ("dtmt-4", "dtmt-1", "srnmt-3l"):
        (tmp_path / "rows/metrics/multi30k-en-de" / variant / "seed2").mkdir(parents=True)
    (tmp_path / "rows/metrics/multi30k-en-fr/ud-gru/seed2").mkdir(parents=True)
    text = collect.index(tmp_path)
    assert "| `dtmt-table1` | 2 of 9 | DTMT#1 seed2, DTMT#4 seed2 |" in text
    kept = text.split("Row members kept")[1].split("## Left to train")[0]
    assert "| `dtmt-figure3` | 2 of 9 |" in kept                 # BLEU by length: drawn from the metrics
    assert "`srnmt-table2`" in kept and "`srnmt-figure3`" not in kept      # perplexity against time: one machine's
    assert "| `ud-figure2` | 1 of 12 | GRU seed2 |" in kept                 # its cost curves: kept logs
    # what 3 seeds a row still need, timed by the minutes measured for the same models: each model once
    # though two tables list it, an ensemble's minutes (its seeds') not a model's
    pd.DataFrame({"variant": ["dtmt-4"] * 3 + ["dtmt-1"] * 2, "member": ["seed1", "seed2", "seed3", "seed1", "ens1-2"],
                  "train_minutes": [100.0, 120.0, 500.0, 60.0, 999.0]}).to_csv(tmp_path / "dtmt-table1-bleu.csv",
                                                                               index=False)
    pd.DataFrame({"variant": ["dtmt-4"], "member": ["seed1"], "train_minutes": [100.0]}).to_csv(
        tmp_path / "dtmt-table2-bleu.csv", index=False)
    left = collect.index(tmp_path).split("## Left to train for 3 seeds a row")[1].split("## Not trained yet")[0]
    # seeds 1 and 3 of DTMT#4 (median 120 min) and DTMT#1 (60 min); ShallowRNMT's three never trained
    assert "| `dtmt-table1` | 7 of 9 | 6.0 h + 3 never measured |" in left
    assert "| `srnmt-figure3` | 6 of 6 (in one run) |" in left             # kept members do not serve it
    # a kept member made with other settings than a run gives its row now is left out of a table, so it is
    # to train again, and the kept list says so
    from rnmt.planning.current import expected

    def made(variant: str, **train: object) -> str:
        want = expected(collect._plan("mini").variant("multi30k-en-de", variant))
        return json.dumps({"train": {"model_config": want["model"], "train_settings": {**want["train"], "seed": 2,
                                                                                      **train}},
                           "decode": {"settings": want["search"]}})

    (tmp_path / "rows/metrics/multi30k-en-de/dtmt-1/seed2/test.json").write_text(made("dtmt-1"))
    (tmp_path / "rows/metrics/multi30k-en-de/dtmt-4/seed2/test.json").write_text(made("dtmt-4", eps=0.5))
    text = collect.index(tmp_path)
    assert ("| `dtmt-table1` | 2 of 9 (1 made with earlier settings or other data: to train again) | DTMT#1 seed2, "
            "DTMT#4 seed2 |") in text
    left = text.split("## Left to train for 3 seeds a row")[1].split("## Not trained yet")[0]
    assert "| `dtmt-table1` | 8 of 9 | 8.0 h + 3 never measured |" in left     # DTMT#4 seed2 (120 min) too
    # a member kept toward a row that no table lists yet times the rest of its row: ShallowRNMT's seed 1
    # (90 min) is kept, its seeds 2 and 3 are left at 90 min each
    shallow = json.loads(made("dtmt-shallow-gru", seed=1))
    shallow["train"]["train_seconds"] = 5400.0
    (tmp_path / "rows/metrics/multi30k-en-de/dtmt-shallow-gru/seed1").mkdir(parents=True)
    (tmp_path / "rows/metrics/multi30k-en-de/dtmt-shallow-gru/seed1/test.json").write_text(json.dumps(shallow))
    left = collect.index(tmp_path).split("## Left to train for 3 seeds a row")[1].split("## Not trained yet")[0]
    assert "| `dtmt-table1` | 7 of 9 | 11.0 h |" in left


def test_the_mini_index_names_committed_numbers_that_are_not_the_kept_members(tmp_path: Path) -> None:
    """A committed table is rebuilt from rows/: a row member whose committed translation is not the kept one
    (another training replaced it) or that is not kept at all is listed with why, and a table whose rows
    have numbers from fewer seeds than the scale's is not called whole."""
    collect = mini_collect()
    kept_dir = tmp_path / "rows/metrics/multi30k-en-de"
    sha = {"dtmt-shallow-gru": "a" * 64, "dtmt-1": "b" * 64}
    for variant, digest in sha.items():
        (kept_dir / variant / "seed1").mkdir(parents=True)
        (kept_dir / variant / "seed1/test.json").write_text(json.dumps(
            {"scores": {"bleu": 30.0}, "files": {"hyp": "t.txt", "sha256": {"t.txt": digest}}}))
    pd.DataFrame({"system": ["ShallowRNMT", "DTMT#1", "DTMT#4"], "ours": [30.0, 31.0, 32.0],
                  "n_seeds": [3, 1, 3]}).to_csv(tmp_path / "dtmt-table2.csv", index=False)
    pd.DataFrame({"system": ["ShallowRNMT", "DTMT#1", "DTMT#4"], "variant": ["dtmt-shallow-gru", "dtmt-1", "dtmt-4"],
                  "member": ["seed1"] * 3, "train_minutes": [60.0] * 3, "test_bleu": [30.0, 31.0, 32.0],
                  "test_sha256": [sha["dtmt-shallow-gru"], "c" * 64, "d" * 64], "cpu": ["AMD EPYC"] * 3}).to_csv(
        tmp_path / "dtmt-table2-bleu.csv", index=False)
    text = collect.index(tmp_path)
    line = next(x for x in text.splitlines() if "(`dtmt-table2`) |" in x)
    assert "| 3 of 3 (every row, some of fewer than 3 seeds) | 1 |" in line and "| no: 2 of 3 (below) |" in line
    apart = text.split("## Committed numbers that are not the kept members'")[1].split("##")[0]
    assert "| `dtmt-table2` | DTMT#1 (seed1) | the kept member is another decoding (test BLEU 30.00, the " \
           "table's 31.00) |" in apart
    assert "| `dtmt-table2` | DTMT#4 (seed1) | not kept in rows/: the table's number cannot be rebuilt |" in apart
    assert "ShallowRNMT" not in apart
    # a -bleu.csv written before it recorded translations: the test BLEU decides
    pd.read_csv(tmp_path / "dtmt-table2-bleu.csv").drop(columns="test_sha256").to_csv(
        tmp_path / "dtmt-table2-bleu.csv", index=False)
    apart = collect.index(tmp_path).split("## Committed numbers that are not the kept members'")[1].split("##")[0]
    assert "DTMT#1 (seed1)" in apart and "ShallowRNMT" not in apart


def test_the_mini_index_trains_again_a_kept_member_made_from_other_data(tmp_path: Path, refs) -> None:
    """Three kept seeds of one corpus, one scored on other references: `restore` leaves it out of a run whose
    data are the others', so the index counts it to train again and says why, where it had counted it kept."""
    collect = mini_collect()
    plan = collect._plan("mini")
    for seed, lines in (("seed1", refs), ("seed2", refs), ("seed3", refs[:-1] + ["another reference"])):
        run = tmp_path / f"run-{seed}"
        mini_member(run, plan, "dtmt-4", seed, damage(refs, 0.2, 1), lines)
        kept.keep(run, [("multi30k-en-de", "dtmt-4", seed)], tmp_path / "rows")
    text = collect.index(tmp_path)
    assert "| `dtmt-table2` | 3 of 9 (1 made with earlier settings or other data: to train again) |" in text
    assert "- dtmt-4 seed3 (`multi30k-en-de`): made from another data/multi30k-en-de/raw/test.tgt than the other " \
           "kept members of multi30k-en-de" in text
