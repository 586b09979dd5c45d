"""UD paper cells, Sutskever seq2seq and the Transformer: equal to step-by-step references, blind to
padding, trainable, decodable, and the papers' parameter counts."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from conftest import ROOT, greedy_loop
from rnmt.cells import build_cell, run
from rnmt.cells.single_product import paper_counts
from rnmt.data.batching import pad
from rnmt.data.vocab import EOS_ID
from rnmt.decode.beam import beam_search
from rnmt.io import InputError
from rnmt.models import build_model
from rnmt.models.init import diagonal_init_
from rnmt.report.paper_params import atr
from rnmt.report.params import evaluate


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the test machine is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------- references


def ref_ud_gru(x: Tensor, w: Tensor, b: Tensor, h: Tensor, coupled: bool) -> tuple[Tensor, Tensor]:
    """One [x; h]·W per step; reset gate as forget gate on h."""
    n, outs = h.size(1), []
    for t in range(x.size(1)):
        a = torch.cat([x[:, t], h], 1) @ w.T + b
        u, f, c = torch.sigmoid(a[:, :n]), torch.sigmoid(a[:, n:2 * n]), torch.tanh(a[:, 2 * n:])
        h = ((1 - u) if coupled else 1) * f * h + u * c
        outs.append(h)
    return torch.stack(outs, 1), h


def ref_ud_lstm(x: Tensor, w: Tensor, b: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Theano-tutorial LSTM: gates i, f, o and candidate from one [x; h]·W, no peepholes."""
    n, outs = h.size(1), []
    for t in range(x.size(1)):
        a = torch.cat([x[:, t], h], 1) @ w.T + b
        i, f, o = (torch.sigmoid(a[:, k * n:(k + 1) * n]) for k in range(3))
        c = f * c + i * torch.tanh(a[:, 3 * n:])
        h = o * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, 1), h, c


def full_weight(cell: torch.nn.Module) -> Tensor:
    return torch.cat([cell.weight_ih, cell.weight_hh], 1)


@pytest.mark.parametrize("coupled", [True, False])
def test_ud_gru_equals_step_by_step_reference(coupled: bool) -> None:
    torch.manual_seed(0)
    cell = build_cell("ud-gru", 5, 7, coupled=coupled).double()
    x, h0 = torch.randn(3, 6, 5, dtype=torch.double), torch.randn(3, 7, dtype=torch.double)
    out, final = run(cell, x, torch.ones(3, 6, dtype=torch.bool), state=h0)
    ref_out, ref_final = ref_ud_gru(x, full_weight(cell), cell.bias, h0, coupled)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(final, ref_final)


def test_ud_lstm_equals_step_by_step_reference_and_torch_lstmcell() -> None:
    torch.manual_seed(1)
    cell = build_cell("ud-lstm", 5, 7).double()
    x = torch.randn(3, 6, 5, dtype=torch.double)
    h0, c0 = torch.randn(3, 7, dtype=torch.double), torch.randn(3, 7, dtype=torch.double)
    out, final = run(cell, x, torch.ones(3, 6, dtype=torch.bool), state=torch.cat([h0, c0], 1))
    ref_out, ref_h, ref_c = ref_ud_lstm(x, full_weight(cell), cell.bias, h0, c0)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(final, torch.cat([ref_h, ref_c], 1))
    # torch's gate order is i, f, g, o; the tutorial's is i, f, o, g
    order = torch.cat([torch.arange(0, 14), torch.arange(21, 28), torch.arange(14, 21)])
    lstm = torch.nn.LSTMCell(5, 7).double()
    with torch.no_grad():
        lstm.weight_ih.copy_(cell.weight_ih[order])
        lstm.weight_hh.copy_(cell.weight_hh[order])
        lstm.bias_ih.copy_(cell.bias[order])
        lstm.bias_hh.zero_()
    h, c = h0, c0
    for t in range(6):
        h, c = lstm(x[:, t], (h, c))
    torch.testing.assert_close(final, torch.cat([h, c], 1))


class Runner(torch.nn.Module):
    """run() as a module, so that functional_call can pass the cell's parameters as gradcheck inputs."""

    def __init__(self, cell: torch.nn.Module) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return run(self.cell, x, mask, reverse=True)


@pytest.mark.parametrize("name,options", [("ud-gru", {}), ("ud-gru", {"coupled": False}), ("ud-lstm", {})])
def test_gradcheck(name: str, options: dict) -> None:
    torch.manual_seed(2)
    runner = Runner(build_cell(name, 3, 2, **options).double())
    names = [n for n, _ in runner.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in runner.parameters())
    x = torch.randn(2, 4, 3, dtype=torch.double, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])

    def f(x: Tensor, *params: Tensor) -> tuple[Tensor, Tensor]:
        return torch.func.functional_call(runner, dict(zip(names, params, strict=True)), (x, mask))

    assert torch.autograd.gradcheck(f, (x, *params))


@pytest.mark.parametrize("name", ["ud-gru", "ud-lstm"])
@pytest.mark.parametrize("reverse", [False, True])
def test_padding_never_changes_real_positions(name: str, reverse: bool) -> None:
    torch.manual_seed(3)
    cell = build_cell(name, 4, 6)
    batch = torch.randn(2, 7, 4)
    batch[1, 3:] = 100.0                               # garbage in the padding
    mask = torch.tensor([[True] * 7, [True] * 3 + [False] * 4])
    out, final = run(cell, batch, mask, reverse=reverse)
    alone, alone_final = run(cell, batch[1:, :3], torch.ones(1, 3, dtype=torch.bool), reverse=reverse)
    torch.testing.assert_close(out[1, :3], alone[0])
    torch.testing.assert_close(final[1], alone_final[0])
    assert torch.all(out[1, 3:] == 0)


# --------------------------------------------------------------------------------- parameter counts


def weights(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_ud_paper_section1_counts() -> None:
    """100 units on a 50-d input, no biases (the paper's formulas count weights only)."""
    n, m = 100, 50
    assert weights(torch.nn.RNNCell(m, n, bias=False)) == n * n + n * m == 15_000
    gru = build_cell("ud-gru", m, n, bias=False)
    assert weights(gru) == 2 * (n * n + n * m) + (n * n + n * m) == 45_000
    # the paper's canonical LSTM has full cell-to-gate matrices on its three gates: 3(n² + n² + nm) + (n² + nm);
    # the single-product LSTM drops exactly those three n×n matrices
    lstm = build_cell("ud-lstm", m, n, bias=False)
    assert weights(lstm) + 3 * n * n == 3 * (n * n + n * n + n * m) + (n * n + n * m) == 90_000
    # with biases (the default): one per row of the product
    assert weights(build_cell("ud-gru", m, n)) == 45_000 + 3 * n
    assert weights(build_cell("ud-lstm", m, n)) == 60_000 + 4 * n


@pytest.mark.parametrize("name,hidden", [("ud-gru", 200), ("ud-lstm", 150)])
def test_ud_paper_section2_counts(name: str, hidden: int) -> None:
    """GRU 200 and LSTM 150 on 200-d input: the paper's 600² + 200×600 and 600² + 600² per layer come from
    counting each layer as a basic RNN as wide as its product (3×200 = 4×150 = 600); the cells' actual
    weights are g·n·(m + n)."""
    layers = [build_cell(name, 200, hidden, bias=False), build_cell(name, hidden, hidden, bias=False)]
    assert paper_counts(layers) == [600**2 + 200 * 600, 600**2 + 600**2] == [480_000, 720_000]
    actual = [weights(c) for c in layers]
    assert actual == ([240_000, 240_000] if name == "ud-gru" else [210_000, 180_000])


# ----------------------------------------------------------------------------------- diagonal init


def test_diagonal_init_makes_every_gate_block_diagonal_and_biases_zero() -> None:
    torch.manual_seed(4)
    model = build_model("seq2seq", 20, 20, cell="ud-lstm", emb=6, hidden=4)
    emb_before = model.src_emb.words.weight.clone()
    diagonal_init_(model, value=0.5)
    cell = model.encoder[0]
    for w in (cell.weight_ih, cell.weight_hh):
        for block in w.split(4):
            torch.testing.assert_close(block, 0.5 * torch.eye(4, w.size(1)))
    torch.testing.assert_close(model.out.weight, 0.5 * torch.eye(20, 4))
    assert all(torch.all(p == 0) for n, p in model.named_parameters() if n.endswith("bias"))
    torch.testing.assert_close(model.src_emb.words.weight, emb_before)
    transformer = build_model("transformer", 20, 20, d_model=8, ffn=16, heads=2, layers=1)
    diagonal_init_(transformer)
    norm = transformer.encoder[0].norms[0]
    assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)
    torch.testing.assert_close(transformer.encoder[0].feed_forward[0].weight, torch.eye(16, 8))


# -------------------------------------------------------------------------------------- seq2seq models

SOURCES = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
TARGETS = [[8, 7, 6, 5], [10, 9], [13, 12, 11]]


def source_batch(sources: list[list[int]], factored: bool) -> tuple[Tensor, Tensor]:
    """Padded source with </s>; with `factored`, a second factor (a fake dependency label per token)."""
    words, mask = pad(sources, eos=True)
    if not factored:
        return words, mask
    labels = torch.where(mask, words % 3 + 4, 0)
    return torch.stack([words, labels], -1), mask


def tiny(arch: str, seed: int, factored: bool = False, **settings) -> torch.nn.Module:
    torch.manual_seed(seed)
    if factored:
        dims = [4] if arch == "transformer" else [3]
        settings["factors"] = {"vocab_sizes": [7], "dims": dims}
    if arch == "seq2seq":
        settings = {"emb": 8, "hidden": 12, "layers": 2, **settings}
    else:
        settings = {"d_model": 16, "ffn": 32, "heads": 2, "layers": 2, "dropout": 0.0, **settings}
    return build_model(arch, 20, 20, **settings)


def train(model: torch.nn.Module, factored: bool, steps: int = 30) -> list[float]:
    src, mask = source_batch(SOURCES, factored)
    tgt_in, _ = pad(TARGETS, bos=True)
    tgt_out, _ = pad(TARGETS, eos=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


greedy = greedy_loop


def check_decoding(model: torch.nn.Module, factored: bool) -> None:
    """Beam 1 is the greedy loop; a batched beam-4 search equals searching each sentence alone."""
    model.eval()
    src, mask = source_batch(SOURCES, factored)
    hyps = beam_search(model, src, mask, beam=1, max_len=8)
    batched = beam_search(model, src, mask, beam=4, max_len=8)
    for i in range(len(SOURCES)):
        n = int(mask[i].sum())
        one, one_mask = src[i:i + 1, :n], mask[i:i + 1, :n]
        assert hyps[i][0] == greedy(model, one, one_mask, 8)
        assert beam_search(model, one, one_mask, beam=4, max_len=8)[0][0] == batched[i][0]


CASES = [(cell, factored) for cell in ("gru", "ud-gru", "ud-lstm") for factored in (False, True)]


@pytest.mark.parametrize("cell,factored", CASES)
def test_seq2seq_trains_and_decodes(cell: str, factored: bool) -> None:
    model = tiny("seq2seq", 5, factored, cell=cell)
    losses = train(model, factored, steps=40)
    assert losses[-1] < 0.3 * losses[0]
    check_decoding(model, factored)
    # trained on reversal without attention, greedy decoding reproduces every training pair
    for source, target in zip(SOURCES, TARGETS, strict=True):
        assert beam_search(model, *source_batch([source], factored), beam=1, max_len=8)[0][0] == target


def test_seq2seq_reads_each_source_reversed_and_hands_every_layer_its_final_state() -> None:
    model = tiny("seq2seq", 6, cell="ud-lstm").eval()
    src, mask = source_batch(SOURCES, False)
    state = model.start(src, mask)
    for i, sentence in enumerate(SOURCES):
        x = model.src_emb(torch.tensor([(sentence + [EOS_ID])[::-1]]))   # reversed by hand, no padding
        ones = torch.ones(1, x.size(1), dtype=torch.bool)
        for layer, cell in enumerate(model.encoder):
            out, final = run(cell, x, ones)
            torch.testing.assert_close(state[f"layer{layer}"][i], final[0])
            x = out


@pytest.mark.parametrize("arch", ["seq2seq", "transformer"])
def test_logits_do_not_depend_on_batch_padding(arch: str) -> None:
    model = tiny(arch, 7, cell="ud-gru") if arch == "seq2seq" else tiny(arch, 7)
    model.eval()
    src, mask = source_batch(SOURCES, False)
    tgt_in, _ = pad(TARGETS, bos=True)
    both = model(src, mask, tgt_in)
    n = int(mask[1].sum())
    alone = model(src[1:2, :n], mask[1:2, :n], tgt_in[1:2, :3])
    torch.testing.assert_close(both[1, :3], alone[0])


def test_seq2seq_factored_input_widths_match_the_ud_paper() -> None:
    plain = build_model("seq2seq", 50, 50, emb=200, hidden=200)
    factored = build_model("seq2seq", 50, 50, emb=150, hidden=200, factors={"vocab_sizes": [40], "dims": [50]})
    for model in (plain, factored):
        assert model.encoder[0].input_size == model.decoder[0].input_size == 200
        assert len(model.encoder) == len(model.decoder) == 2
    with pytest.raises(InputError, match="layers must be at least 1"):
        build_model("seq2seq", 50, 50, layers=0)


# ------------------------------------------------------------------------------------------- transformer


@pytest.mark.parametrize("factored", [False, True])
def test_transformer_trains_and_decodes(factored: bool) -> None:
    model = tiny("transformer", 8, factored)
    losses = train(model, factored)
    assert losses[-1] < 0.3 * losses[0]
    check_decoding(model, factored)


def test_transformer_incremental_step_equals_teacher_forced_forward() -> None:
    model = tiny("transformer", 9, dec_layers=3).eval()
    src, mask = source_batch(SOURCES, False)
    tgt_in, _ = pad(TARGETS, bos=True)
    full = torch.log_softmax(model(src, mask, tgt_in), -1)
    state = model.start(src, mask)
    for t in range(tgt_in.size(1)):
        logp, state = model.step(tgt_in[:, t], state)
        torch.testing.assert_close(logp, full[:, t])
        assert state["k0"].shape == (3, t + 1, 16)       # batch-first cache, one position per step


@pytest.mark.parametrize("arch,settings", [("transformer", {"attention_dropout": 0.1}), ("seq2seq", {})])
def test_dropout_acts_only_in_training(arch: str, settings: dict) -> None:
    model = tiny(arch, 10, dropout=0.3, **settings)
    src, mask = source_batch(SOURCES, False)
    tgt_in, _ = pad(TARGETS, bos=True)
    model.train()
    assert not torch.equal(model(src, mask, tgt_in), model(src, mask, tgt_in))
    model.eval()
    torch.testing.assert_close(model(src, mask, tgt_in), model(src, mask, tgt_in))


def test_transformer_base_counts_and_the_atr_table4_row() -> None:
    d, f, layers = 512, 2048, 6
    attention, ffn, norm = 4 * (d * d + d), 2 * d * f + f + d, 2 * d
    core = layers * (attention + ffn + 2 * norm) + layers * (2 * attention + ffn + 3 * norm)
    with torch.device("meta"):
        tied = build_model("transformer", 1000, 1200)
        joint = build_model("transformer", 1000, 1000, share_embeddings=True)
        untied = build_model("transformer", 1000, 1200, tie_output=False)
    assert weights(tied) == core + (1000 + 1200) * d
    assert weights(joint) == core + 1000 * d
    assert weights(untied) == core + (1000 + 2 * 1200) * d
    with pytest.raises(InputError, match="share_embeddings needs one joint vocabulary"):
        build_model("transformer", 10, 12, d_model=8, ffn=8, heads=2, share_embeddings=True)
    row = next(r for r in evaluate(atr.ROWS, ROOT) if r["system"] == "Transformer")
    assert abs(row["rel_diff"]) <= row["tolerance"]
