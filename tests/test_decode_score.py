"""Search, ensembles and scoring as the papers did them."""

import math
import re
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu
import torch

from rnmt.cells.base import use_path
from rnmt.data.batching import pad
from rnmt.data.vocab import Vocab
from rnmt.decode.beam import beam_search, normalise
from rnmt.decode.ensemble import Ensemble, load_ensemble
from rnmt.evaluate.gates import gate_statistics
from rnmt.evaluate.score import score
from rnmt.io import InputError
from rnmt.models import build_model, checkpoint

SOURCES = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 5, 6, 7, 8, 9], [14]]


def model(seed: int, cell: str = "gru"):
    torch.manual_seed(seed)
    m = build_model("rnnsearch", 20, 20, cell=cell, emb=8, hidden=12, dropout=0.0)
    for p in m.parameters():                  # peaky distributions make search choices matter
        torch.nn.init.normal_(p, 0, 0.8)
    return m.eval()


def sequence_logprob(m, src, mask, hyp: list[int], max_len: int) -> float:
    """The model's own log-probability of hyp + </s> (just hyp when the search truncated it at max_len)."""
    st, prev, total = m.start(src, mask), torch.tensor([2]), 0.0
    for tok in hyp if len(hyp) == max_len else [*hyp, 3]:
        logp, st = m.step(prev, st)
        total += float(logp[0, tok].detach())
        prev = torch.tensor([tok])
    return total


@pytest.mark.parametrize("penalty", ["none", "average", "gnmt"])
def test_the_greedy_floor_never_scores_below_greedy(penalty: str) -> None:
    for seed in range(4):
        m = model(seed)
        for s in SOURCES:
            src, mask = pad([s], eos=True)
            greedy, _ = beam_search(m, src, mask, beam=1, max_len=12, penalty=penalty)[0]
            best, _ = beam_search(m, src, mask, beam=6, max_len=12, penalty=penalty, greedy_floor=True)[0]
            g = normalise(sequence_logprob(m, src, mask, greedy, 12), min(len(greedy) + 1, 12), penalty, 0.6)
            b = normalise(sequence_logprob(m, src, mask, best, 12), min(len(best) + 1, 12), penalty, 0.6)
            assert b >= g - 1e-5


def test_greedy_floor_in_the_same_batch_equals_a_separate_greedy_pass() -> None:
    """The beam-1 search that rides along in the beam's batch gives what a second, separate pass gave:
    the greedy hypothesis wherever it scores above the beam's best, else the beam's."""
    import random

    from rnmt.data.batching import pad_source

    greedy_won = 0
    for seed in range(3):
        torch.manual_seed(seed)
        m = build_model("rnnsearch", 30, 12, emb=8, hidden=12, cell="gru").eval()
        rng = random.Random(seed)
        src, mask = pad_source([[rng.randrange(4, 30) for _ in range(rng.randint(2, 8))] for _ in range(20)])
        for penalty in ("average", "none", "gnmt"):
            greedy = beam_search(m, src, mask, 1, 10, penalty)
            plain = beam_search(m, src, mask, 2, 10, penalty, )
            floored = beam_search(m, src, mask, 2, 10, penalty, greedy_floor=True)
            for g, b, f in zip(greedy, plain, floored, strict=True):
                expected = g if g[1] > b[1] else b
                greedy_won += g[1] > b[1]
                assert f[0] == expected[0] and f[1] == pytest.approx(expected[1], abs=1e-5)
    assert greedy_won > 5                              # the floor really decided some sentences


def test_plain_beam_is_the_default_and_never_swaps_in_the_greedy_hypothesis() -> None:
    """Every paper decodes with plain beam search: where greedy search happens to score higher than the
    beam's best, the beam's own hypothesis is still what comes out (the floor is an option)."""
    from rnmt.data.batching import pad_source

    greedy_higher = 0
    for seed in range(3):
        torch.manual_seed(seed)
        m = build_model("rnnsearch", 30, 12, emb=8, hidden=12, cell="gru").eval()
        sources = [[(7 * i + 3 * j + seed) % 26 + 4 for j in range(2 + i % 7)] for i in range(20)]
        src, mask = pad_source(sources)
        greedy = beam_search(m, src, mask, 1, 10, "average")
        default = beam_search(m, src, mask, 2, 10, "average")
        floored = beam_search(m, src, mask, 2, 10, "average", greedy_floor=True)
        for g, d, f in zip(greedy, default, floored, strict=True):
            if g[1] > d[1] + 1e-6:
                greedy_higher += 1
                assert d[0] != g[0] and f[0] == g[0]
    assert greedy_higher > 2                           # the case the default must not change happened


def test_each_paper_decodes_as_it_did() -> None:
    """At paper scale: ATR normalises by length, DTMT uses GNMT's penalty with α 0.6, SR-NMT's
    OpenNMT-py beam has no length normalisation, and no table turns the greedy floor on."""
    import yaml

    from conftest import ROOT
    from rnmt.planning.plan import Plan

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    tables = [p.stem for p in sorted((ROOT / "workflow/experiments").glob("*.yaml"))]
    plan = Plan({**config, "scale": "paper", "tables": tables}, ROOT)
    want = {"atr-": ("average", None), "dtmt-": ("gnmt", 0.6), "srnmt-": ("none", None)}
    seen = set()
    for (_, name), v in plan.variants.items():
        assert v.decode["greedy_floor"] is False, name
        for prefix, (penalty, alpha) in want.items():
            if name.startswith(prefix):
                seen.add(prefix)
                assert v.decode["length_penalty"] == penalty, name
                assert alpha is None or v.decode["alpha"] == alpha, name
    assert seen == set(want)


def test_length_penalties_follow_their_formulas() -> None:
    assert normalise(-6.0, 3, "average", 0.6) == pytest.approx(-2.0)
    assert normalise(-6.0, 3, "gnmt", 0.6) == pytest.approx(-6.0 / ((5 + 3) / 6) ** 0.6)
    assert normalise(-6.0, 3, "none", 0.6) == -6.0


def test_ensemble_of_one_is_that_model() -> None:
    m = model(1)
    src, mask = pad(SOURCES, eos=True)
    ens = Ensemble([m])
    assert beam_search(ens, src, mask, 4, 12) == beam_search(m, src, mask, 4, 12)
    tgt_in, _ = pad([[5, 6], [7], [8, 9, 10], [11]], bos=True)
    torch.testing.assert_close(ens(src, mask, tgt_in), torch.log_softmax(m(src, mask, tgt_in), -1))


def test_ensemble_averages_probabilities() -> None:
    a, b = model(1), model(2, cell="atr")
    src, mask = pad(SOURCES, eos=True)
    ens = Ensemble([a, b])
    sa, sb, se = a.start(src, mask), b.start(src, mask), ens.start(src, mask)
    prev = torch.full((len(SOURCES),), 2)
    (la, _), (lb, _), (le, _) = a.step(prev, sa), b.step(prev, sb), ens.step(prev, se)
    torch.testing.assert_close(le.exp(), (la.exp() + lb.exp()) / 2)
    assert len(beam_search(ens, src, mask, 3, 10)) == len(SOURCES)


def test_ensemble_members_must_share_vocabularies(tmp_path: Path) -> None:
    v1 = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[f"w{i}" for i in range(16)]])
    v2 = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[f"x{i}" for i in range(16)]])
    cfg = {"arch": "rnnsearch", "cell": "gru", "emb": 8, "hidden": 12, "dropout": 0.0}
    checkpoint.save(tmp_path / "a.pt", model(1), cfg, v1, v1)
    checkpoint.save(tmp_path / "b.pt", model(2), cfg, v1, v2)
    with pytest.raises(InputError, match="different vocabularies"):
        load_ensemble([tmp_path / "a.pt", tmp_path / "b.pt"])
    ens, _, _ = load_ensemble([tmp_path / "a.pt", tmp_path / "a.pt"])
    assert isinstance(ens, Ensemble)


# ---- scoring -----------------------------------------------------------------------------------------
def multi_bleu(hyps: list[str], refs: list[list[str]]) -> float:
    """multi-bleu.perl's algorithm, written out: clipped n-gram precisions over the corpus, closest
    reference length for the brevity penalty, no smoothing."""
    match, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for k, h in enumerate(hyps):
        ht = h.split()
        rts = [r[k].split() for r in refs]
        hyp_len += len(ht)
        ref_len += min((abs(len(r) - len(ht)), len(r)) for r in rts)[1]
        for n in range(1, 5):
            hc = Counter(tuple(ht[i:i + n]) for i in range(len(ht) - n + 1))
            mx: Counter = Counter()
            for r in rts:
                for g, c in Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1)).items():
                    mx[g] = max(mx[g], c)
            match[n - 1] += sum(min(c, mx[g]) for g, c in hc.items())
            total[n - 1] += max(len(ht) - n + 1, 0)
    if min(match) == 0:
        return 0.0
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(match, total, strict=True)) / 4)


HYPS = ["the cat sat on the mat .", "there is a dog in the garden , he said .", "it &apos;s raining today ."]
REFS = [["the cat sat on a mat .", "a dog is in the garden , he said .", "it &apos;s raining again today ."],
        ["the cat was on the mat .", "there is a dog in the yard , he says .", "today it &apos;s raining ."]]


def test_tokenized_bleu_equals_multi_bleu() -> None:
    for refs in (REFS[:1], REFS):
        s = score(HYPS, refs, HYPS, refs)
        assert s["tok_bleu"] == pytest.approx(multi_bleu(HYPS, refs), abs=1e-9)


def test_case_insensitive_multi_reference_bleu() -> None:
    upper = [h.upper() for h in HYPS]
    cased = score(upper, REFS)
    nist = score(upper, REFS, lowercase=True)
    assert nist["references"] == 2 and "case:lc" in nist["bleu_signature"] and "nrefs:2" in nist["bleu_signature"]
    assert nist["bleu"] == pytest.approx(score(HYPS, REFS)["bleu"]) and cased["bleu"] < nist["bleu"]


def test_bleu_by_source_length_buckets() -> None:
    s = score(HYPS, REFS[:1], src_lengths=[4, 15, 60])
    buckets = s["bleu_by_length"]
    assert set(buckets) == {"1-10", "11-20", ">50"}
    assert buckets["1-10"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS[:1], [REFS[0][:1]]).score)


def test_misaligned_references_are_named() -> None:
    with pytest.raises(InputError, match="3 hypotheses but reference 2 has 2 lines"):
        score(HYPS, [REFS[0], REFS[1][:2]])


def test_atr_gate_statistics() -> None:
    m = model(3, cell="atr")
    stats = gate_statistics(m, SOURCES, [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 5]])
    low = stats["dec_lower"]
    assert len(low["mean_input_gate_by_position"]) == 5 and low["sentences_by_position"] == [4, 4, 4, 2, 1]
    assert -1.0 <= low["pearson_r"] <= 1.0
    with pytest.raises(InputError, match="decoder cells are ATR"):
        gate_statistics(model(3), SOURCES, SOURCES)


def test_atr_gate_statistics_where_the_run_chose_the_fused_decoder() -> None:
    """A run whose measured fast path is the fused decoder sequence (one function, no per-step gate calls)
    still gets Figure 3's gates, the same as the step loop's."""
    m, targets = model(3, cell="atr"), [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 5]]
    with use_path("loop"):
        loop = gate_statistics(m, SOURCES, targets)
    with use_path("sequence"):
        fused = gate_statistics(m, SOURCES, targets)
    assert fused == loop and len(fused["dec_lower"]["mean_forget_gate_by_position"]) == 5


def test_score_command_uses_extra_references(tmp_path: Path) -> None:
    """A NIST-style test set keeps references 2..4 beside the first as <file>.ref1 ..."""
    import json

    from rnmt.cli import main

    (tmp_path / "hyp").write_text("\n".join(HYPS) + "\n")
    (tmp_path / "ref").write_text("\n".join(REFS[0]) + "\n")
    (tmp_path / "ref.ref1").write_text("\n".join(REFS[1]) + "\n")
    assert main(["score", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--lowercase",
                 "--output", str(tmp_path / "m.json")]) == 0
    s = json.loads((tmp_path / "m.json").read_text())["scores"]
    assert s["references"] == 2 and s["bleu"] == pytest.approx(score(HYPS, REFS, lowercase=True)["bleu"])


def test_decoding_off_a_terminal_logs_its_progress(caplog: pytest.LogCaptureFixture) -> None:
    """A job log gets a line at every tenth of the sentences (sentences done, rate), not a progress bar."""
    import logging

    from rnmt.decode.translate import translate_ids

    m = model(1)
    sources = [s for s in SOURCES for _ in range(10)]                  # 40 sentences in batches of 4
    with caplog.at_level(logging.INFO, logger="rnmt.decode.translate"):
        translate_ids(m, sources, beam=2, batch_size=4, progress=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("decoded")]
    assert len(lines) == 10 and lines[-1].startswith("decoded 40 of 40 sentences (100%)")
    assert "sentences/s, beam 2 | " in lines[0] and re.search(r", about [\d.]+ s left$", lines[0])
    assert lines[-1].endswith("about 0.0 s left")                     # the time left, by source tokens
