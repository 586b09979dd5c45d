"""Every architecture of the ATR and DTMT papers trains a few steps and decodes; parameter fidelity."""

import pytest
import torch

from conftest import ROOT, greedy_loop
from rnmt.data.batching import pad
from rnmt.data.vocab import BOS_ID, EOS_ID
from rnmt.decode.beam import beam_search
from rnmt.models import build_model
from rnmt.report.paper_params import all_rows
from rnmt.report.params import evaluate
from rnmt.train.loss import token_loss

TINY = {"emb": 8, "hidden": 12, "dropout": 0.0}
ARCHS = {
    "rnnsearch-gru": ("rnnsearch", {"cell": "gru"}),
    "rnnsearch-lstm": ("rnnsearch", {"cell": "lstm"}),
    "rnnsearch-ran": ("rnnsearch", {"cell": "ran"}),
    "rnnsearch-atr": ("rnnsearch", {"cell": "atr"}),
    "rnnsearch-atr-ca": ("rnnsearch-ca", {"cell": "atr"}),
    "rnnsearch-factored": ("rnnsearch", {"cell": "gru", "factors": {"vocab_sizes": [7], "dims": [4]}}),
    "gnmt-atr-3": ("gnmt", {"cell": "atr", "layers": 3}),
    "gnmt-atr-8-tanh": ("gnmt", {"cell": "atr", "layers": 8, "cell_options": {"bias": False, "output_tanh": True}}),
    "deep-rnnsearch": ("deep-rnnsearch", {"cell": "gru", "init": "bridge"}),
    "shallow-rnmt": ("shallow-rnmt", {"heads": 2, "rnn_dropout": 0.0}),
    "dtmt1-lgru": ("dtmt", {"cell": "lgru", "depth": 1, "heads": 2, "rnn_dropout": 0.0}),
    "dtmt2-lau": ("dtmt", {"cell": "lau", "depth": 2, "heads": 4, "rnn_dropout": 0.0}),
}
SRC = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 5, 6, 7]]
TGT = [[7, 6, 5], [11, 10, 9, 8], [6, 5]]


def make(key: str):
    arch, settings = ARCHS[key]
    torch.manual_seed(0)
    return build_model(arch, 20, 20, **{**TINY, **settings})


def source(key: str):
    src, mask = pad(SRC, eos=True)
    if "factors" in ARCHS[key][1]:       # one label per token (3 at </s>, padding 0)
        labels = torch.where(mask, (src % 6) + 1, torch.zeros_like(src))
        src = torch.stack([src, labels], -1)
    return src, mask


@pytest.mark.parametrize("key", sorted(ARCHS))
def test_trains_with_falling_loss(key: str) -> None:
    model = make(key).train()
    src, mask = source(key)
    tgt_in, _ = pad(TGT, bos=True)
    tgt_out, _ = pad(TGT, eos=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(25):
        logits = model(src, mask, tgt_in)
        assert logits.shape == (3, tgt_in.size(1), 20)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


AUTOCAST = {**{k: (a, {**TINY, **s}) for k, (a, s) in ARCHS.items()},
            "stacked-srnmt": ("stacked", {**TINY, "cell": "srnmt", "layers": 2}),
            "srnmt": ("srnmt", {**TINY, "emb": 12, "layers": 2}),
            "transformer": ("transformer", {"layers": 1, "heads": 2, "d_model": 12, "ffn": 24, "dropout": 0.0})}


@pytest.mark.parametrize("key", sorted(AUTOCAST))
def test_bfloat16_autocast_on_the_cpu_gives_float32s_gradient(key: str) -> None:
    """Training autocasts to bfloat16 on CPUs that multiply it in hardware: every architecture and cell
    must run there (the recurrences mix bfloat16 projections with float32 states) and its gradient
    must be float32's to bfloat16's precision."""
    arch, settings = AUTOCAST[key]
    torch.manual_seed(0)
    model = build_model(arch, 20, 20, **settings).eval()
    src, mask = source(key) if key in ARCHS else pad(SRC, eos=True)
    tgt_in, _ = pad(TGT, bos=True)
    tgt_out, _ = pad(TGT, eos=True)
    grads = []
    for amp in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(src, mask, tgt_in)
        assert logits.dtype == (torch.bfloat16 if amp else torch.float32)
        params = [p for p in model.parameters() if p.requires_grad]
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(token_loss(logits, tgt_out), params)]))
    assert torch.isfinite(grads[1]).all()
    assert torch.nn.functional.cosine_similarity(grads[0], grads[1], 0) > 0.99


@pytest.mark.parametrize("key", sorted(ARCHS))
def test_step_matches_forward_and_beam_one_is_greedy(key: str) -> None:
    model = make(key).eval()
    src, mask = source(key)
    tgt_in, _ = pad(TGT, bos=True)
    full = torch.log_softmax(model(src, mask, tgt_in), -1)
    state = model.start(src, mask)
    for t in range(tgt_in.size(1)):          # incremental decoding gives the teacher-forced scores
        logp, state = model.step(tgt_in[:, t], state)
        torch.testing.assert_close(logp, full[:, t], atol=1e-5, rtol=1e-5)
    hyps = beam_search(model, src, mask, beam=1, max_len=8)
    for b, (hyp, _) in enumerate(hyps):
        assert hyp == greedy_loop(model, src[b:b + 1], mask[b:b + 1], 8)
    assert len(beam_search(model, src, mask, beam=3, max_len=8)) == 3


@pytest.mark.parametrize("path", ["loop", "sequence", "torch"])
@pytest.mark.parametrize("key", ["deep-rnnsearch", "gnmt-atr-3"])
def test_a_deep_decoders_layers_above_the_attention_run_whole_sequences_with_the_steps_numbers(key: str,
                                                                                              path: str) -> None:
    """Training runs a GNMT-style decoder layer by layer (layers 2..L over the whole target at once, from
    their bridged initial states) and decoding step by step: each of the cells' paths must give the step's
    scores, at padded positions too."""
    from rnmt.cells.base import use_path

    model = make(key).eval()
    src, mask = source(key)
    tgt_in, _ = pad(TGT, bos=True)
    with use_path(path):
        full = torch.log_softmax(model(src, mask, tgt_in), -1)
    state = model.start(src, mask)
    for t in range(tgt_in.size(1)):
        logp, state = model.step(tgt_in[:, t], state)
        torch.testing.assert_close(logp, full[:, t], atol=1e-5, rtol=1e-5)


def test_a_deep_atr_stack_stays_bounded_when_its_layers_pass_tanh_on() -> None:
    """GNMT + ATR at `mini`'s width: eq. 9's h is unbounded and the residual stack adds every layer's output to
    its input, so at initialisation the 8-layer encoder's memory reaches values in the hundreds and training
    never left the word-frequency loss; passing tanh(h) on bounds each layer's addition by 1, so the memory
    stays within the 7 layers above the bidirectional one."""
    src = torch.randint(4, 50, (8, 16))
    mask = torch.ones_like(src, dtype=torch.bool)
    memory = {}
    for output_tanh in (False, True):
        torch.manual_seed(0)
        model = build_model("gnmt", 50, 50, cell="atr", emb=256, hidden=256, layers=8, dropout=0.0,
                            cell_options={"bias": False, "output_tanh": output_tanh}).eval()
        with torch.no_grad():
            memory[output_tanh] = model.start(src, mask)["memory"].abs().max().item()
    assert memory[True] <= 7 and memory[False] > 100, memory


@pytest.mark.parametrize("row", [r for r in all_rows() if r.table in ("atr-table4", "dtmt-table1", "dtmt-table3")],
                         ids=lambda r: f"{r.table}:{r.system}")
def test_parameter_counts_match_the_papers(row) -> None:
    result = evaluate([row], ROOT)[0]
    if row.miss:
        assert abs(result["rel_diff"]) > row.tolerance, "a row marked as a miss now matches: drop the mark"
    else:
        assert abs(result["rel_diff"]) <= row.tolerance, result


def own_score(model, src, mask, hyp: list[int], limit: int) -> float:
    """The model's log-probability of hyp + </s> (of hyp alone when the search stopped it at its limit)."""
    state, prev, total = model.start(src, mask), torch.tensor([BOS_ID]), 0.0
    for tok in hyp if len(hyp) == limit else [*hyp, EOS_ID]:
        logp, state = model.step(prev, state)
        total += float(logp[0, tok])
        prev = torch.tensor([tok])
    return total


@pytest.mark.parametrize("key", sorted(ARCHS))
def test_beam_scores_are_the_models_own_and_batching_changes_nothing(key: str) -> None:
    """Sentences with different length limits leave the batch at different steps; every hypothesis the
    batch returns is the one the sentence gets alone, with the model's own score for it (a state
    reordered wrongly, or not at all, would give another score)."""
    model = make(key).eval()
    for p in model.parameters():                  # peaky distributions make the beam's choices matter
        torch.nn.init.normal_(p, 0, 0.8)
    src, mask = source(key)
    limits = torch.tensor([9, 3, 6])
    batched = beam_search(model, src, mask, beam=3, max_len=limits, penalty="none")
    with torch.no_grad():
        for b, (hyp, score) in enumerate(batched):
            alone = beam_search(model, src[b:b + 1], mask[b:b + 1], beam=3, max_len=int(limits[b]),
                                penalty="none")[0]
            assert alone[0] == hyp
            assert score == pytest.approx(own_score(model, src[b:b + 1], mask[b:b + 1], hyp, int(limits[b])),
                                          rel=1e-4, abs=1e-4)
