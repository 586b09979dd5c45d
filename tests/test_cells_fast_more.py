"""Whole-sequence paths chained from step kernels (cells/kernel.py: LSTM, UD-LSTM, L-GRU, LAU, T-GRU,
the gate-normalised GRU, RAN, UD-GRU and the composite cells) against the plain step loop: outputs, final
states and the gradients of the input, the initial state and every parameter, in float64; with padding,
reversal, candidate dropout (seeded), and in whole models."""

import pytest
import torch

from cellpaths import both_paths, float64, outputs_and_grads  # noqa: F401 (float64: autouse fixture)
from rnmt.cells import build_cell, run
from rnmt.cells.composite import TransitionCell, TwoInputCell
from rnmt.models import build_model

# (cell, input size, options): every option combination the kernels claim (hidden size 6)
CASES = [("lstm", 5, {}), ("ud-lstm", 5, {}), ("ud-lstm", 5, {"bias": False}),
         ("lgru", 5, {}), ("lgru", 5, {"gate_norm": False}), ("lau", 5, {}), ("lau", 5, {"gate_norm": False}),
         ("tgru", 0, {}), ("tgru", 0, {"gate_norm": False}), ("gru", 5, {"gate_norm": True}),
         ("ran", 6, {}), ("ran", 5, {}), ("ran", 6, {"content_projection": True}), ("ran", 5, {"output_tanh": False}),
         ("ud-gru", 5, {}), ("ud-gru", 5, {"coupled": False}), ("ud-gru", 5, {"bias": False})]
DROPOUT = [("lgru", 5, {}), ("lgru", 5, {"gate_norm": False}), ("lau", 5, {}), ("lau", 5, {"gate_norm": False}),
           ("tgru", 0, {}), ("tgru", 0, {"gate_norm": False}), ("gru", 5, {"gate_norm": True}), ("gru", 5, {})]


def perturbed(cell):
    """The cell with every parameter moved off its initial value (layer norms' γ = 1 and β = 0 and the
    zero biases would hide mistakes in their gradients)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return cell


def inputs(cell, padded, batch=3, time=7):
    x = torch.randn(batch, time, cell.input_size, requires_grad=True)
    mask = torch.ones(batch, time, dtype=torch.bool)
    if padded:
        mask[1, 4:] = False
        mask[2, 1:] = False
    h0 = torch.randn(batch, cell.state_size, requires_grad=True)
    return x, mask, h0


def assert_same(loop, fast, rtol=1e-10, atol=1e-12):
    assert len(loop) == len(fast)
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol)


def check(cell, padded, reverse, seed=0):
    torch.manual_seed(0)
    x, mask, h0 = inputs(cell, padded)
    assert cell.sequence(cell.project_inputs(x), mask, h0) is not None, "no whole-sequence path"
    assert_same(*both_paths(lambda: outputs_and_grads(cell, x, mask, h0, reverse), seed))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name,input_size,options", CASES)
def test_kernel_path_equals_step_loop(name, input_size, options, padded, reverse) -> None:
    torch.manual_seed(0)
    cell = perturbed(build_cell(name, input_size, 6, **options)).eval()
    check(cell, padded, reverse)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name,input_size,options", DROPOUT)
def test_candidate_dropout_in_training_draws_the_step_loops_noise(name, input_size, options, padded) -> None:
    torch.manual_seed(0)
    cell = perturbed(build_cell(name, input_size, 6, candidate_dropout=0.4, **options)).train()
    check(cell, padded, reverse=False, seed=3)
    x, mask, h0 = inputs(cell, padded)
    with torch.no_grad():
        torch.manual_seed(3)
        train = run(cell, x, mask, h0)[0]
        eval_ = run(cell.eval(), x, mask, h0)[0]
    assert not torch.allclose(train, eval_), "the dropout did nothing: the test would not see its noise"


def transition(bottom, options=None, depth=2, dropout=0.0):
    opts = {"candidate_dropout": dropout, **(options or {})}
    return TransitionCell(build_cell(bottom, 5, 6, **opts),
                          [build_cell("tgru", 0, 6, candidate_dropout=dropout) for _ in range(depth)])


COMPOSITES = {
    "dtmt lgru": lambda: transition("lgru"),
    "dtmt lgru, dropout": lambda: transition("lgru", dropout=0.3),
    "dtmt gru": lambda: transition("gru", {"gate_norm": True}, depth=1, dropout=0.3),
    "dtmt plain gru": lambda: transition("gru", depth=1, dropout=0.3),
    "dtmt lau": lambda: transition("lau", {"gate_norm": False}, depth=3),
    "two lstm": lambda: TwoInputCell(build_cell("lstm", 5, 6), build_cell("lstm", 4, 6)),
    "two ran": lambda: TwoInputCell(build_cell("ran", 5, 6), build_cell("ran", 6, 6)),
    "two ud-gru": lambda: TwoInputCell(build_cell("ud-gru", 5, 6), build_cell("ud-gru", 6, 6)),
    "two gru": lambda: TwoInputCell(build_cell("gru", 5, 6), build_cell("gru", 6, 6)),
    "two atr": lambda: TwoInputCell(build_cell("atr", 5, 6), build_cell("atr", 6, 6)),      # RNNSearch+ATR+CA
    "atr + tgru": lambda: TransitionCell(build_cell("atr", 5, 6), [build_cell("tgru", 0, 6)]),
}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", COMPOSITES)
def test_composite_cells_chain_their_kernels(name, padded, reverse) -> None:
    torch.manual_seed(0)
    cell = perturbed(COMPOSITES[name]()).train()
    check(cell, padded, reverse, seed=5)


def test_options_without_a_kernel_use_the_step_loop() -> None:
    x = torch.randn(2, 3, 5)
    h0 = torch.zeros(2, 6)
    norms = build_cell("lgru", 5, 6)
    norms.norms[1].eps = 1e-3                                   # one ε per cell only
    no_affine = build_cell("tgru", 0, 6)
    no_affine.norm_z = torch.nn.LayerNorm(6, elementwise_affine=False)
    cells = [build_cell("lgru", 5, 6, candidate_dropout=1.0).train(), norms, no_affine,
             TransitionCell(build_cell("atr", 5, 6, state_tanh=True), [build_cell("tgru", 0, 6)]),
             TwoInputCell(build_cell("atr", 5, 6, twin="one_minus"), build_cell("atr", 6, 6)),
             TransitionCell(build_cell("lgru", 5, 6), [build_cell("tgru", 0, 6, candidate_dropout=1.0).train()])]
    for cell in cells:
        assert cell.sequence(cell.project_inputs(torch.randn(2, 3, cell.input_size)), None, h0) is None, cell
    mask = torch.ones(2, 3, dtype=torch.bool)
    assert_same(*both_paths(lambda: outputs_and_grads(norms, x.requires_grad_(), mask, h0.requires_grad_(), False)))
    plain = TransitionCell(build_cell("gru", 5, 6), [])          # ShallowRNMT's block: the GRU's own loop
    assert plain.sequence(plain.project_inputs(x), None, h0) is not None


DTMT = [("dtmt", {"depth": 2}), ("dtmt", {"cell": "lau", "depth": 1}), ("dtmt", {"cell": "gru", "depth": 1}),
        ("shallow-rnmt", {}), ("dtmt", {"cell": "gru", "depth": 2, "gate_norm": False}),
        ("dtmt", {"depth": 2, "modules": {"query": {"cell": "gru", "depth": 0}}})]
MODELS = [("rnnsearch", {"cell": "lstm"}), ("rnnsearch", {"cell": "ran"}), ("rnnsearch-ca", {"cell": "lstm"}),
          ("rnnsearch-ca", {"cell": "atr"}),
          ("rnnsearch-ca", {"cell": "gru"}),
          ("gnmt", {"cell": "lstm", "layers": 2}), ("stacked", {"cell": "lstm", "layers": 2}),
          ("seq2seq", {"cell": "ud-lstm"}), ("seq2seq", {"cell": "ud-gru"})]


def same_loss_and_gradients(model):
    src = torch.randint(4, 20, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    tgt = torch.randint(4, 20, (3, 5))

    def go():
        logits = model(src, mask, tgt)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.roll(-1, 1).flatten())
        return [loss, logits, *torch.autograd.grad(loss, list(model.parameters()))]

    assert_same(*both_paths(go, seed=7), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("arch,settings", DTMT)
def test_dtmt_models_train_the_same_with_either_path(arch, settings, training) -> None:
    """DTMT's defaults: L-GRU (or LAU, GRU) with gate norm and candidate dropout, then T-GRUs, in training."""
    torch.manual_seed(0)
    rates = {"dropout": 0.3, "rnn_dropout": 0.2} if training else {"dropout": 0.0, "rnn_dropout": 0.0}
    model = build_model(arch, 20, 20, emb=8, hidden=8, heads=2, **rates, **settings).train(training)
    same_loss_and_gradients(perturbed(model))


@pytest.mark.parametrize("arch,settings", MODELS)
def test_models_train_the_same_with_either_path(arch, settings) -> None:
    torch.manual_seed(0)
    same_loss_and_gradients(perturbed(build_model(arch, 20, 20, emb=8, hidden=8, dropout=0.0, **settings)))


@pytest.mark.parametrize("make", [lambda: build_cell("lstm", 128, 128), lambda: build_cell("lgru", 128, 128),
                                  lambda: TransitionCell(build_cell("lgru", 128, 128), [build_cell("tgru", 0, 128)])])
def test_float32_paths_agree_within_float_tolerance(make) -> None:
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    cell = perturbed(make()).eval()
    x, mask, h0 = inputs(cell, padded=True, batch=16, time=12)
    loop, fast = both_paths(lambda: outputs_and_grads(cell, x, mask, h0, False))
    for a, b in zip(loop, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * float(a.detach().abs().max()))
