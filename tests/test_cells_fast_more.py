"""The composite cells' whole-sequence paths, their parts' step kernels chained (cells/kernel.py: DTMT's
transition blocks, the context-aware encoder's two cells a step), against the plain step loop: outputs,
final states and the gradients of the input, the initial state and every parameter, in float64; with
padding, reversal, candidate dropout (seeded), and in whole models. A single cell's cases are
tests/test_cells_fast.py's."""

import pytest
import torch

from cellpaths import (
    assert_float32_paths_agree,
    assert_same,
    both_paths,
    check,
    float64,  # noqa: F401 (autouse fixture)
    outputs_and_grads,
    perturbed,
)
from rnmt.cells import build_cell
from rnmt.cells.composite import TransitionCell, TwoInputCell
from rnmt.models import build_model


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


def test_a_transition_blocks_float32_paths_agree_within_float_tolerance() -> None:
    assert_float32_paths_agree(lambda: TransitionCell(build_cell("lgru", 128, 128), [build_cell("tgru", 0, 128)]))
