"""SRU, the SR-NMT units and models, and the stacked baseline: each unit equals a step-by-step reference
written here with plain torch ops, gradients check out, padding is invisible, every architecture trains
and decodes, and SR-NMT Table 2's parameter counts are met."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from conftest import ROOT
from rnmt.cells import build_cell, run
from rnmt.cells.srnmt import DecoderUnit, EncoderUnit
from rnmt.data.batching import pad
from rnmt.data.vocab import BOS_ID, EOS_ID
from rnmt.decode.beam import beam_search
from rnmt.io import InputError
from rnmt.models import build_model
from rnmt.models.stacked import merge_directions
from rnmt.report.paper_params import srnmt as table2
from rnmt.report.params import evaluate

D = torch.double


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: several OpenMP threads only contend (100× slower on a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- independent references (plain ops)

def ref_layer_norm(a: Tensor, gain: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    mean = a.mean(-1, keepdim=True)
    var = ((a - mean) ** 2).mean(-1, keepdim=True)
    return (a - mean) / torch.sqrt(var + eps) * gain + bias


def ref_normed(m: nn.Module, x: Tensor) -> Tensor:
    """LN(W x) or W x + b, read from a NormedLinear's parameters."""
    a = x @ m.linear.weight.T
    if m.linear.bias is not None:
        return a + m.linear.bias
    return ref_layer_norm(a, m.norm.weight, m.norm.bias)


def ref_sru(x: Tensor, weight: Tensor, bias: Tensor, hidden: int) -> tuple[Tensor, Tensor]:
    """Lei et al. 2017 over one sentence x [T, in] → (h [T, d], final c [d])."""
    c, hs = torch.zeros(hidden, dtype=x.dtype), []
    for t in range(x.size(0)):
        u = weight @ x[t]
        f = 1 / (1 + torch.exp(-(u[hidden:2 * hidden] + bias[:hidden])))
        r = 1 / (1 + torch.exp(-(u[2 * hidden:3 * hidden] + bias[hidden:])))
        skip = x[t] if weight.size(0) == 3 * hidden else u[3 * hidden:]
        c = f * c + (1 - f) * u[:hidden]
        hs.append(r * torch.tanh(c) + (1 - r) * skip)
    return torch.stack(hs), c


def ref_weak(xt: list[Tensor], gt: list[Tensor]) -> list[Tensor]:
    """h_t = (1 − σ(g_t)) h_{t−1} + σ(g_t) x̃_t from h_0 = 0."""
    h, out = torch.zeros_like(xt[0]), []
    for x, g in zip(xt, gt, strict=True):
        s = torch.sigmoid(g)
        h = (1 - s) * h + s * x
        out.append(h)
    return out


def ref_encoder(unit: EncoderUnit, x: Tensor) -> Tensor:
    """Section 3.1 over one unpadded sentence x [S, d]."""
    d, half = unit.hidden_size, unit.hidden_size // 2
    a = [ref_normed(unit.proj, x[i]) for i in range(x.size(0))]
    fwd = ref_weak([ai[:half] for ai in a], [ai[2 * half:3 * half] for ai in a])
    bwd = ref_weak([ai[half:2 * half] for ai in reversed(a)], [ai[3 * half:4 * half] for ai in reversed(a)])[::-1]
    out = []
    for i, ai in enumerate(a):
        h = torch.cat([fwd[i], bwd[i]])
        if unit.highway:
            z = torch.sigmoid(ai[2 * d:])
            h = (1 - z) * h + z * x[i]
        out.append(h)
    return torch.stack(out)


def ref_decoder(unit: DecoderUnit, y: Tensor, memory: Tensor, length: int) -> Tensor:
    """Section 3.2 over one target y [T, d] and memory [S, d] of which the first `length` are real."""
    d = unit.hidden_size
    s_tilde, outs = torch.zeros(d, dtype=y.dtype), []
    for t in range(y.size(0)):
        a = ref_normed(unit.proj, y[t])
        g = torch.sigmoid(a[d:2 * d])
        s_tilde = (1 - g) * s_tilde + g * a[:d]
        o = s_tilde
        if unit.attention is not None:
            att = unit.attention
            q = ref_normed(att.query, s_tilde)
            scores = torch.stack([att.v.weight[0] @ torch.tanh(q + ref_normed(att.key, memory[j]))
                                  for j in range(length)])
            alpha = torch.exp(scores - scores.max())
            alpha = alpha / alpha.sum()
            c = sum(alpha[j] * memory[j] for j in range(length)) / math.sqrt(d)
            o = torch.tanh(ref_normed(unit.state_out, s_tilde) + ref_normed(unit.context_out, c))
        if unit.highway:
            z = torch.sigmoid(a[2 * d:])
            o = (1 - z) * o + z * y[t]
        outs.append(o)
    return torch.stack(outs)


# ---------------------------------------------------------------- cells and units equal the references

@pytest.mark.parametrize("input_size", [5, 4])      # 5 ≠ hidden: x' = U₃; 4 = hidden: x' = x
def test_sru_equals_reference(input_size: int) -> None:
    torch.manual_seed(0)
    cell = build_cell("sru", input_size, 4).double()
    nn.init.uniform_(cell.bias, -1, 1)
    x = torch.randn(1, 6, input_size, dtype=D)
    out, state = run(cell, x, torch.ones(1, 6, dtype=torch.bool))
    h, c = ref_sru(x[0], cell.weight, cell.bias, 4)
    torch.testing.assert_close(out[0], h)
    torch.testing.assert_close(state[0], torch.cat([c, h[-1]]))
    assert cell.weight_matrix_count == (4 if input_size != 4 else 3)


@pytest.mark.parametrize("layer_norm", [True, False])
def test_srnmt_cell_equals_reference(layer_norm: bool) -> None:
    torch.manual_seed(1)
    cell = build_cell("srnmt", 5, 3, layer_norm=layer_norm).double()
    if layer_norm:
        nn.init.uniform_(cell.proj.norm.weight, 0.5, 1.5)
        nn.init.uniform_(cell.proj.norm.bias, -0.5, 0.5)
    assert (cell.proj.linear.bias is None) == layer_norm       # no bias when LN is on
    assert cell.weight_matrix_count == 2
    x = torch.randn(1, 5, 5, dtype=D)
    out, _ = run(cell, x, torch.ones(1, 5, dtype=torch.bool))
    a = [ref_normed(cell.proj, x[0, t]) for t in range(5)]
    ref = ref_weak([ai[:3] for ai in a], [ai[3:] for ai in a])
    torch.testing.assert_close(out[0], torch.stack(ref))


ABLATIONS = [dict(), dict(layer_norm=False), dict(highway=False), dict(layer_norm=False, highway=False)]


def randomise_norms(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.5, 0.5)


@pytest.mark.parametrize("opts", ABLATIONS)
def test_encoder_unit_equals_reference(opts: dict) -> None:
    torch.manual_seed(2)
    unit = EncoderUnit(6, 6, dropout=0.0, **opts).double()
    randomise_norms(unit)
    expected_rows = 4 * 3 + (6 if opts.get("highway", True) else 0)    # W ∈ R^{d×(4·d/2+d)}
    assert unit.proj.linear.weight.shape == (expected_rows, 6)
    x = torch.randn(1, 5, 6, dtype=D)
    torch.testing.assert_close(unit(x, torch.ones(1, 5, dtype=torch.bool))[0], ref_encoder(unit, x[0]))


@pytest.mark.parametrize("opts", [*ABLATIONS, dict(attention=False), dict(attention=False, highway=False)])
def test_decoder_unit_equals_reference(opts: dict) -> None:
    torch.manual_seed(3)
    unit = DecoderUnit(4, 4, dropout=0.0, **opts).double()
    randomise_norms(unit)
    y, memory = torch.randn(2, 5, 4, dtype=D), torch.randn(2, 6, 4, dtype=D)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    keys = unit.attention.keys(memory) if unit.attention is not None else None
    out, last = unit(y, torch.zeros(2, 4, dtype=D), keys, memory, mask)
    for b, length in enumerate((6, 3)):
        torch.testing.assert_close(out[b], ref_decoder(unit, y[b], memory[b], length))
    # decoding one position at a time, carrying s̃, gives the same outputs
    state, steps = torch.zeros(2, 4, dtype=D), []
    for t in range(5):
        o, state = unit(y[:, t:t + 1], state, keys, memory, mask)
        steps.append(o[:, 0])
    torch.testing.assert_close(torch.stack(steps, 1), out)
    torch.testing.assert_close(state, last)


# ---------------------------------------------------------------- gradients

def test_gradcheck_cells_and_units() -> None:
    torch.manual_seed(4)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    for name, size in (("sru", 3), ("sru", 2), ("srnmt", 2)):
        cell = build_cell(name, 3, size).double()
        x = torch.randn(2, 4, 3, dtype=D, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, c=cell: run(c, x, mask, reverse=True)[0], (x,))
        assert torch.autograd.gradcheck(lambda x, c=cell: run(c, x, mask)[1], (x,))
    enc = EncoderUnit(4, 4, dropout=0.0).double()
    x = torch.randn(2, 4, 4, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: enc(x, mask), (x,))
    dec = DecoderUnit(4, 4, dropout=0.0).double()
    y, memory = torch.randn(2, 3, 4, dtype=D, requires_grad=True), torch.randn(2, 4, 4, dtype=D, requires_grad=True)
    s0 = torch.randn(2, 4, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda y, m, s: dec(y, s, dec.attention.keys(m), m, mask)[0], (y, memory, s0))


class DecoderWithKeys(nn.Module):
    """A decoder unit with its keys computed inside, so that every parameter is an input of one call."""

    def __init__(self, unit: DecoderUnit) -> None:
        super().__init__()
        self.unit = unit

    def forward(self, y: Tensor, memory: Tensor, mask: Tensor) -> Tensor:
        s0 = y.new_zeros(y.size(0), self.unit.hidden_size)
        return self.unit(y, s0, self.unit.attention.keys(memory), memory, mask)[0]


@pytest.mark.parametrize("layer_norm", [True, False])
def test_gradcheck_parameters(layer_norm: bool) -> None:
    torch.manual_seed(5)
    model = DecoderWithKeys(DecoderUnit(3, 3, layer_norm=layer_norm, dropout=0.0)).double()
    y, memory = torch.randn(2, 3, 3, dtype=D), torch.randn(2, 4, 3, dtype=D)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    names = [n for n, _ in model.named_parameters()]

    def f(*values: Tensor) -> Tensor:
        return torch.func.functional_call(model, dict(zip(names, values, strict=True)), (y, memory, mask))

    params = tuple(p.detach().clone().requires_grad_() for p in model.parameters())
    assert torch.autograd.gradcheck(f, params)


# ---------------------------------------------------------------- padding

def padded_pair(size: int) -> tuple[Tensor, Tensor, Tensor]:
    long, short = torch.randn(1, 7, size), torch.randn(1, 3, size)
    batch = torch.zeros(2, 7, size)
    batch[0], batch[1, :3] = long[0], short[0]
    return batch, short, torch.tensor([[True] * 7, [True] * 3 + [False] * 4])


@pytest.mark.parametrize("name", ["sru", "srnmt"])
@pytest.mark.parametrize("reverse", [False, True])
def test_padding_never_changes_real_positions(name: str, reverse: bool) -> None:
    torch.manual_seed(6)
    cell = build_cell(name, 4, 6)
    batch, short, mask = padded_pair(4)
    out, final = run(cell, batch, mask, reverse=reverse)
    alone, alone_final = run(cell, short, torch.ones(1, 3, dtype=torch.bool), reverse=reverse)
    torch.testing.assert_close(out[1, :3], alone[0])
    torch.testing.assert_close(final[1], alone_final[0])
    assert torch.all(out[1, 3:] == 0)


def test_encoder_unit_ignores_padding_in_both_directions() -> None:
    torch.manual_seed(7)
    unit = EncoderUnit(6, 6, dropout=0.0)
    randomise_norms(unit)
    batch, short, mask = padded_pair(6)
    out = unit(batch, mask)
    with torch.no_grad():     # the backward direction of the short sentence starts at its token 3
        torch.testing.assert_close(out[1, :3], ref_encoder(unit, short[0]))
        torch.testing.assert_close(out[0], ref_encoder(unit, batch[0]))


# ---------------------------------------------------------------- architectures

ARCHS = [
    ("srnmt", dict(layers=1)),
    ("srnmt", dict(layers=3)),
    ("srnmt", dict(layers=3, layer_norm=False)),
    ("srnmt", dict(layers=3, highway=False, emb=10)),
    ("srnmt", dict(layers=3, multi_attention=False)),
    ("srnmt", dict(layers=3, layer_norm=False, highway=False, multi_attention=False)),
    ("stacked", dict(cell="lstm", layers=2)),
    ("stacked", dict(cell="sru", layers=3)),
    ("stacked", dict(cell="sru", layers=2, input_feeding=False)),
]


def tiny(arch: str, settings: dict, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(arch, 20, 20, **{"emb": 12, "hidden": 12, "dropout": 0.0, **settings}).eval()


def greedy(model, src: Tensor, mask: Tensor, steps: int) -> list[list[int]]:
    """The argmax token at every step for the whole batch at once, cut at each sentence's first </s>."""
    state, prev, tokens = model.start(src, mask), torch.full((src.size(0),), BOS_ID), []
    for _ in range(steps):
        logp, state = model.step(prev, state)
        prev = logp.argmax(-1)
        tokens.append(prev)
    rows = torch.stack(tokens, 1).tolist()
    return [row[: row.index(EOS_ID)] if EOS_ID in row else row for row in rows]


@pytest.mark.parametrize(("arch", "settings"), ARCHS)
def test_architecture_trains_and_decodes(arch: str, settings: dict) -> None:
    model = tiny(arch, settings).train()
    src, mask = pad([[5, 6, 7, 8], [9, 10]], eos=True)
    tgt_in, _ = pad([[11, 12, 13], [14, 15]], bos=True)
    tgt_out, _ = pad([[11, 12, 13], [14, 15]], eos=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(60):
        loss = F.cross_entropy(model(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    model.eval()
    # teacher forcing equals step-by-step decoding
    st, logps = model.start(src, mask), []
    for t in range(tgt_in.size(1)):
        logp, st = model.step(tgt_in[:, t], st)
        logps.append(logp)
    torch.testing.assert_close(torch.stack(logps, 1), torch.log_softmax(model(src, mask, tgt_in), -1))
    # beam 1 is greedy; beam search gives the same best hypothesis batched and alone
    sources = [[5, 6, 7, 8], [9, 10], [16]]
    s, m = pad(sources, eos=True)
    assert [hyp for hyp, _ in beam_search(model, s, m, beam=1, max_len=8)] == greedy(model, s, m, 8)
    batched = beam_search(model, s, m, beam=3, max_len=8)
    for i, source in enumerate(sources):
        s1, m1 = pad([source], eos=True)
        assert beam_search(model, s1, m1, beam=3, max_len=8)[0][0] == batched[i][0]


@pytest.mark.parametrize(("arch", "settings"), [ARCHS[1], ARCHS[6], ARCHS[7]])
def test_logits_do_not_depend_on_batch_padding(arch: str, settings: dict) -> None:
    model = tiny(arch, settings, seed=1)
    src, mask = pad([[5, 6, 7, 8, 9, 10], [11, 12]], eos=True)
    tgt_in, _ = pad([[4, 5, 6], [7, 8, 9]], bos=True)
    s1, m1 = pad([[11, 12]], eos=True)
    torch.testing.assert_close(model(src, mask, tgt_in)[1], model(s1, m1, tgt_in[1:])[0])


def test_factored_source_and_dropout_settings() -> None:
    torch.manual_seed(8)
    model = build_model("srnmt", 20, 20, layers=2, emb=8, hidden=8, dropout=0.3,
                        factors={"vocab_sizes": [5], "dims": [8], "combine": "sum"})
    src = torch.tensor([[[5, 2], [6, 3], [3, 0]]])
    logits = model.train()(src, torch.ones(1, 3, dtype=torch.bool), torch.tensor([[BOS_ID, 7]]))
    assert logits.shape == (1, 2, 20)
    assert sum(isinstance(m, nn.Dropout) and m.p == 0.3 for m in model.modules()) >= 2 * 2 + 1


def test_highway_with_other_sizes_is_a_clear_error() -> None:
    with pytest.raises(InputError, match=r"input size \(300\) must equal hidden \(500\).*emb = hidden.*highway"):
        build_model("srnmt", 10, 10, emb=300, hidden=500)
    with pytest.raises(InputError, match="source embedding.*combine 'sum'"):
        build_model("srnmt", 10, 10, emb=8, hidden=8, factors={"vocab_sizes": [5], "dims": [4]})
    build_model("srnmt", 10, 10, emb=300, hidden=500, highway=False)     # fine without the highway
    with pytest.raises(InputError, match="hidden \\(7\\) must be even"):
        build_model("stacked", 10, 10, hidden=7)


def test_merge_directions_gives_the_decoder_h_then_c() -> None:
    hf, cf, hb, cb = (torch.full((1, 2), v) for v in (1.0, 2.0, 3.0, 4.0))
    merged = merge_directions(torch.cat([hf, cf], -1), torch.cat([hb, cb], -1), 2)
    assert merged.tolist() == [[1.0, 1.0, 3.0, 3.0, 2.0, 2.0, 4.0, 4.0]]


def test_srnmt_layers_match_the_paper_shapes() -> None:
    with torch.device("meta"):
        model = build_model("srnmt", 100, 100, layers=4, multi_attention=False)
    assert [u.attention is not None for u in model.decoder] == [False, False, False, True]
    assert model.encoder[0].proj.linear.weight.shape == (4 * 250 + 500, 500)       # W ∈ R^{d×(4·d/2+d)}
    assert model.decoder[3].proj.linear.weight.shape == (3 * 500, 500)             # W ∈ R^{d×3d}


# ---------------------------------------------------------------- SR-NMT Table 2 parameter counts

def test_table2_parameter_counts_within_tolerance() -> None:
    results = evaluate(table2.ROWS, ROOT)
    assert [r["system"] for r in results] == ["LSTM 2L", "LSTM 3L", "LSTM 5L", "SRU 3L",
                                              *(f"SR-NMT {n}L" for n in range(1, 11))]
    for r in results:
        assert r["tolerance"] == 0.02 and abs(r["rel_diff"]) <= r["tolerance"], r
        assert r["src_vocab"] == r["tgt_vocab"] == table2.V and str(table2.V) in r["note"]
    assert abs(results[0]["rel_diff"]) < 1e-4          # LSTM 2L fixes the vocabulary


def test_srnmt_starts_from_the_reference_initialisation() -> None:
    torch.manual_seed(9)
    model = build_model("srnmt", 50, 50, layers=2, emb=64, hidden=64)
    for name, p in model.named_parameters():
        if "norm" in name:
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name
        elif p.dim() == 1:
            assert p.abs().max() <= 0.1 and p.abs().max() > 0.05, name
    w = model.decoder[0].proj.linear.weight.detach()   # Xavier-normal: std √(2 / (fan_in + fan_out))
    assert abs(float(w.std()) / math.sqrt(2 / (64 + 192)) - 1) < 0.1
    assert torch.all(model.src_emb.weight[0] == 0) and torch.all(model.tgt_emb.weight[0] == 0)


def test_figure3_plots_training_and_validation_perplexity_against_time(tmp_path, monkeypatch) -> None:
    """SR-NMT Figure 3: per system, the training perplexity of its logged minibatches (smoothed) and the
    dev perplexity of its validations, both against training minutes."""
    import json
    from pathlib import Path

    from rnmt.planning.table import load_table
    from rnmt.report import figures

    root = Path(__file__).resolve().parents[1]
    table = load_table(root / "workflow/experiments/srnmt-figure3.yaml", "c")
    logs = []
    for variant, losses in (("srnmt-sru-3l", [3.0, 2.0, 1.0]), ("srnmt-3l", [2.5, 1.5, 0.5])):
        log = tmp_path / "models/c" / variant / "seed1/train.jsonl"
        log.parent.mkdir(parents=True)
        records = [{"kind": "train", "step": i + 1, "loss": v, "train_seconds": 60.0 * (i + 1)}
                   for i, v in enumerate(losses)]
        records.append({"kind": "valid", "step": 3, "dev_ppl": 7.0, "train_seconds": 180.0})
        log.write_text("".join(json.dumps(r) + "\n" for r in records))
        logs.append(log)
    saved = []
    monkeypatch.setattr(figures, "save", lambda fig, out: saved.append(fig))
    figures.draw(table, tmp_path / "f.png", logs=logs)
    lines = {line.get_label(): line for line in saved[0].axes[0].get_lines()}
    sru = lines["SRU 3L: training"]
    assert list(sru.get_xdata()) == [1.0, 2.0, 3.0]
    smoothed = [3.0, 2.5, 2.0]                                      # 5-minibatch trailing mean
    assert list(sru.get_ydata()) == pytest.approx([math.exp(v) for v in smoothed])
    assert list(lines["SR-NMT 3L: validation"].get_ydata()) == [7.0]
    with pytest.raises(InputError, match="no training log with training and validation records"):
        figures.draw(table, tmp_path / "g.png", logs=[])
