"""Cells and RNNSearch: equal to the torch reference, blind to padding, trainable, decodable."""

from pathlib import Path

import pytest
import torch

from conftest import greedy_loop
from rnmt.cells import build_cell, run
from rnmt.data.batching import pad
from rnmt.data.vocab import Vocab
from rnmt.decode.beam import beam_search
from rnmt.io import InputError
from rnmt.models import build_model, checkpoint


def test_gru_equals_torch_grucell() -> None:
    torch.manual_seed(0)
    ours = build_cell("gru", 5, 7).double()
    ref = torch.nn.GRUCell(5, 7).double()
    ref.load_state_dict(ours.state_dict())
    x, h = torch.randn(3, 5, dtype=torch.double), torch.randn(3, 7, dtype=torch.double)
    torch.testing.assert_close(ours.step(ours.project_inputs(x), h), ref(x, h))


@pytest.mark.parametrize("reverse", [False, True])
def test_padding_never_changes_real_positions(reverse: bool) -> None:
    torch.manual_seed(1)
    cell = build_cell("gru", 4, 6)
    long, short = torch.randn(1, 7, 4), torch.randn(1, 3, 4)
    batch = torch.zeros(2, 7, 4)
    batch[0], batch[1, :3] = long[0], short[0]
    mask = torch.tensor([[True] * 7, [True] * 3 + [False] * 4])
    out, final = run(cell, batch, mask, reverse=reverse)
    alone, alone_final = run(cell, short, torch.ones(1, 3, dtype=torch.bool), reverse=reverse)
    torch.testing.assert_close(out[1, :3], alone[0])
    torch.testing.assert_close(final[1], alone_final[0])
    assert torch.all(out[1, 3:] == 0)
    if reverse:      # the backward pass starts at the sentence's last real token
        first_step, _ = run(cell, short[:, 2:], torch.ones(1, 1, dtype=torch.bool))
        torch.testing.assert_close(out[1, 2], first_step[0, 0])


def tiny_model(cell: str = "gru", seed: int = 0):
    torch.manual_seed(seed)
    return build_model("rnnsearch", 20, 20, cell=cell, emb=8, hidden=12, dropout=0.0).eval()


def test_rnnsearch_logits_do_not_depend_on_batch_padding() -> None:
    model = tiny_model()
    a, b = [5, 6, 7, 8, 9, 10], [11, 12]
    src, mask = pad([a, b], eos=True)
    tgt_in, _ = pad([[4, 5, 6], [7, 8, 9]], bos=True)
    both = model(src, mask, tgt_in)
    src_b, mask_b = pad([b], eos=True)
    alone = model(src_b, mask_b, tgt_in[1:])
    torch.testing.assert_close(both[1], alone[0])


def greedy(model, src: list[int], steps: int) -> list[int]:
    return greedy_loop(model, *pad([src], eos=True), steps)


def test_beam_one_is_greedy_and_beam_search_is_batched_consistently() -> None:
    model = tiny_model(seed=3)
    sources = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]
    src, mask = pad(sources, eos=True)
    hyps = beam_search(model, src, mask, beam=1, max_len=12)
    for s, (hyp, _) in zip(sources, hyps, strict=True):
        assert hyp == greedy(model, s, 12)
    batched = beam_search(model, src, mask, beam=4, max_len=12)
    for i, s in enumerate(sources):
        s1, m1 = pad([s], eos=True)
        assert beam_search(model, s1, m1, beam=4, max_len=12)[0][0] == batched[i][0]


def test_training_steps_lower_the_loss() -> None:
    model = tiny_model().train()
    src, mask = pad([[5, 6, 7], [8, 9]], eos=True)
    tgt_in, _ = pad([[9, 8, 7], [6, 5]], bos=True)
    tgt_out, _ = pad([[9, 8, 7], [6, 5]], eos=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten(),
                                                 ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


def test_checkpoint_roundtrip_gives_the_same_translations(tmp_path: Path) -> None:
    model = tiny_model(seed=5)
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[f"w{i}" for i in range(16)]])
    cfg = {"arch": "rnnsearch", "cell": "gru", "emb": 8, "hidden": 12, "dropout": 0.0}
    checkpoint.save(tmp_path / "m.pt", model, cfg, vocab, vocab)
    loaded, sv, tv = checkpoint.load_model(tmp_path / "m.pt")
    assert sv.itos == vocab.itos
    src, mask = pad([[5, 6, 7, 8]], eos=True)
    assert beam_search(model, src, mask, 3, 10)[0] == beam_search(loaded, src, mask, 3, 10)[0]


def test_truncated_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    model = tiny_model()
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *[f"w{i}" for i in range(16)]])
    checkpoint.save(tmp_path / "m.pt", model, {"arch": "rnnsearch", "emb": 8, "hidden": 12}, vocab, vocab)
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "m.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="not a readable rnmt checkpoint"):
        checkpoint.load(tmp_path / "m.pt")


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(InputError, match="unknown cell 'gruu'; valid cells: .*atr, .*gru, .*lstm"):
        build_cell("gruu", 2, 2)
    with pytest.raises(InputError, match="unknown architecture 'rnnserch'; valid architectures: .*rnnsearch"):
        build_model("rnnserch", 10, 10)


@pytest.mark.parametrize("heads", [0, 2])
def test_attention_is_the_tanh_formula(heads: int) -> None:
    """The sigmoid form of the energies gives the weights, context and gradients of vᵀ tanh(W_q q + W_m m_j + b)."""
    from rnmt.models.attention import AdditiveAttention, MultiHeadAdditiveAttention

    torch.manual_seed(0)
    att = (MultiHeadAdditiveAttention(6, 8, 8, heads) if heads else AdditiveAttention(6, 8, 10)).double()
    query = torch.randn(4, 6, dtype=torch.double, requires_grad=True)
    memory = torch.randn(4, 5, 8, dtype=torch.double, requires_grad=True)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1, 3:] = False
    keys = att.keys(memory)
    context, weights = att(query, keys, memory, mask)
    N, S, _ = keys.shape
    h = heads or 1
    e = att.v(torch.tanh(keys.view(N, S, h, -1) + att.query_proj(query).view(N, 1, h, -1))).squeeze(-1)
    w = torch.softmax(e.masked_fill(~mask.unsqueeze(-1), float("-inf")), 1)
    c = torch.einsum("nsh,nshd->nhd", w, memory.view(N, S, h, -1)).reshape(N, -1)
    if heads:
        c = att.out(c)
    torch.testing.assert_close(weights, w.mean(-1))
    torch.testing.assert_close(context, c)
    inputs = [query, memory, *att.parameters()]
    for ours, literal in zip(torch.autograd.grad(context.square().sum(), inputs, retain_graph=True),
                             torch.autograd.grad(c.square().sum(), inputs), strict=True):
        torch.testing.assert_close(ours, literal)
    with torch.no_grad():                          # the in-place inference path gives the same
        torch.testing.assert_close(att(query, keys, memory, mask)[0], c)


def test_dtmt_ablations_build_the_papers_systems() -> None:
    """DTMT Table 4: a module "replaced with the corresponding part of the conventional shallow RNMT" is
    a GRU without T-GRUs while the others keep theirs; Table 5's "− Advanced Techniques" has no layer
    norm in any cell, T-GRUs included."""
    from rnmt.cells.gru import GRU
    from rnmt.cells.lgru import LGRU

    m = build_model("dtmt", 20, 20, emb=8, hidden=8, heads=2, depth=3, modules={"query": {"cell": "gru", "depth": 0}})
    assert isinstance(m.query.bottom, GRU) and len(m.query.transitions) == 0 and m.query.bottom.gate_norm
    for kept in (m.enc_fwd, m.enc_bwd, m.decoder):
        assert isinstance(kept.bottom, LGRU) and len(kept.transitions) == 3
    full = build_model("dtmt", 20, 20, emb=8, hidden=8, heads=2, depth=3, cell="gru")
    plain = build_model("dtmt", 20, 20, emb=8, hidden=8, heads=2, depth=3, cell="gru", gate_norm=False)
    assert any(isinstance(x, torch.nn.LayerNorm) for x in full.modules())
    assert not any(isinstance(x, torch.nn.LayerNorm) for x in plain.modules())
    assert all(not t.gate_norm for t in plain.decoder.transitions)
    with pytest.raises(InputError, match="unknown modules entries attention, query.layers"):
        build_model("dtmt", 20, 20, emb=8, hidden=8, heads=2, modules={"attention": {}, "query": {"layers": 2}})


def _base(hint: object) -> tuple[object, bool]:
    """A type hint → (its type without None and any parameters, whether None is allowed)."""
    import types
    import typing

    args = typing.get_args(hint)
    nullable = isinstance(hint, types.UnionType) and type(None) in args
    base = next(a for a in args if a is not type(None)) if nullable else hint
    return typing.get_origin(base) or base, nullable


def test_the_model_settings_class_names_every_constructor_setting_with_its_type() -> None:
    """The config schema's `model` block is generated from ModelSettings: a setting an architecture takes but
    the class lacks would be refused in every config, and one no architecture takes would be accepted and then
    dropped. Each shared name has one type; null is allowed where a constructor takes it."""
    import inspect
    import typing
    from dataclasses import fields

    from rnmt.models.registry import MODELS
    from rnmt.models.settings import ModelSettings

    declared = typing.get_type_hints(ModelSettings)
    taken: dict[str, list[tuple[str, object]]] = {}
    for arch, cls in MODELS.items():
        for klass in cls.__mro__:
            if "__init__" not in vars(klass):
                continue
            init = vars(klass)["__init__"]
            hints = typing.get_type_hints(init)
            params = inspect.signature(init).parameters
            for name, p in params.items():
                if name not in ("self", "src_vocab_size", "tgt_vocab_size") and p.kind is not p.VAR_KEYWORD:
                    taken.setdefault(name, []).append((arch, hints[name]))
            if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                break
    assert sorted(taken) == sorted(f.name for f in fields(ModelSettings))
    for name, uses in taken.items():
        want, may_be_null = _base(declared[name])
        for arch, hint in uses:
            got, nullable = _base(hint)
            assert got is want, f"{arch}: {name} is {hint}, ModelSettings says {declared[name]}"
            assert may_be_null or not nullable, f"{arch}: {name} may be None, ModelSettings does not allow null"
