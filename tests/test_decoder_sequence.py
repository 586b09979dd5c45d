"""The fused decoder (models/decoder_sequence.py) against its step loop: logits and the gradient of every
parameter, with padded sources, for each RNNSearch cell it serves, for a GNMT decoder's first layer and for
DTMT's multi-head decoder between its transition blocks; the cells it does not serve keep the loop."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rnmt
from rnmt.cells.base import use_path
from rnmt.data.batching import pad
from rnmt.models import attention as attention_module
from rnmt.models import build_model, decoder_sequence

SRC = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 5, 6, 7]]
TGT = [[7, 6, 5, 9], [11, 10], [6, 5, 8, 8, 9]]
MODELS = {
    "gru-reset-before": ("rnnsearch", {"cell": "gru", "cell_options": {"reset": "before"}}),
    "gru": ("rnnsearch", {"cell": "gru"}),
    "atr": ("rnnsearch", {"cell": "atr"}),
    "atr-no-bias": ("rnnsearch", {"cell": "atr", "cell_options": {"bias": False}}),
    "atr-ca": ("rnnsearch-ca", {"cell": "atr"}),
    # the kernels draw dropout's noise step by step as F.dropout does: a seeded pass drops the same units
    "gru-candidate-dropout": ("rnnsearch", {"cell": "gru", "cell_options": {"candidate_dropout": 0.3}}),
    # a GNMT decoder's first layer and its attention, without a higher cell; the layers above run after it
    "deep-rnnsearch": ("deep-rnnsearch", {"cell": "gru", "init": "bridge", "layers": 3}),
    "gnmt-atr": ("gnmt", {"cell": "atr", "layers": 2}),
    # DTMT's transition blocks (query: L-GRU + T-GRUs; decoder: the same over W_o's map of the heads' contexts),
    # with candidate dropout, without gate norm, with another module's cell, and ShallowRNMT's GRUs
    "dtmt-1": ("dtmt", {"depth": 1, "heads": 2, "rnn_dropout": 0.3}),
    "dtmt-2-no-gate-norm": ("dtmt", {"depth": 2, "heads": 4, "rnn_dropout": 0.0, "gate_norm": False}),
    "dtmt-lau-query-gru": ("dtmt", {"cell": "lau", "depth": 1, "heads": 2, "modules": {"query": {"cell": "gru",
                                                                                                  "depth": 0}}}),
    "shallow-rnmt": ("shallow-rnmt", {"heads": 2}),
    # heads 16 and 32 wide: on CUDA the heads' attention is the Triton kernels' (blocks of 16 within a head)
    "dtmt-wide-heads": ("dtmt", {"depth": 1, "heads": 2, "hidden": 32}),
}


def make(key: str, dtype: torch.dtype = torch.float64):
    arch, settings = MODELS[key]
    torch.manual_seed(0)
    model = build_model(arch, 20, 20, **{"emb": 6, "hidden": 8, "dropout": 0.0, **settings}).to(dtype)
    for p in model.parameters():                  # away from the init's small values, so errors show
        torch.nn.init.uniform_(p, -0.5, 0.5)
    return model


def fused(t: torch.Tensor) -> bool:
    """Whether the autograd graph behind t holds the fused decoder."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "DecoderSequenceBackward":
            return True
        todo += [n for n, _ in node.next_functions]
    return False


def logits_and_grads(model, path: str, autocast: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    device = next(model.parameters()).device
    src, mask = (t.to(device) for t in pad(SRC, eos=True))
    tgt_in = pad(TGT, bos=True)[0].to(device)
    model.zero_grad()
    torch.manual_seed(1)
    with use_path(path), torch.autocast(device.type, torch.bfloat16, enabled=autocast):
        logits = model(src, mask, tgt_in)
    assert fused(logits) == (path == "sequence"), path
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype, device=device).view_as(logits)
    (logits.float() * weights.float()).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("key", sorted(MODELS))
def test_the_fused_decoder_equals_the_step_loop_in_float64(key: str) -> None:
    model = make(key)
    assert decoder_sequence.chosen(model, torch.zeros(1, 1, 1, dtype=torch.float64), torch.zeros(1, 1, 1)) \
        == "loop", "nothing measured: the step loop"
    loop, loop_grads = logits_and_grads(model, "loop")
    fused, fused_grads = logits_and_grads(model, "sequence")
    torch.testing.assert_close(fused, loop, rtol=1e-10, atol=1e-12)
    assert fused_grads.keys() == loop_grads.keys()
    assert "attention.v.weight" in fused_grads and "attention.memory_proj.weight" in fused_grads
    for name, g in loop_grads.items():
        torch.testing.assert_close(fused_grads[name], g, rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.parametrize("key", ["gru-reset-before", "gru", "atr", "deep-rnnsearch", "dtmt-2-no-gate-norm"])
def test_the_fused_decoder_under_bf16_autocast_is_no_further_from_float32_than_the_loop(key: str) -> None:
    """Under autocast the fused loop runs in float32 (as the cells' whole-sequence paths do) and the products
    around it in bfloat16: its logits and its worst parameter gradient are no further from float32's than the
    step loop's under the same autocast (measured here: 0.4–0.5% against 0.5–0.6% on the logits, 3–4% against
    4–9% on the worst gradient)."""
    model = make(key, torch.float32)
    want, want_grads = logits_and_grads(model, "loop")

    def errors(path: str) -> tuple[float, float]:
        got, grads = logits_and_grads(model, path, autocast=True)
        worst = max(float((grads[n].float() - g).norm() / g.norm()) for n, g in want_grads.items())
        return float((got.float() - want).abs().max() / want.abs().max()), worst

    (loop_logits, loop_grads), (fused_logits, fused_grads) = errors("loop"), errors("sequence")
    assert fused_logits <= 1.1 * loop_logits and fused_grads <= 1.1 * loop_grads, (loop_logits, fused_logits,
                                                                                  loop_grads, fused_grads)


def test_a_decoder_whose_cells_have_no_kernel_or_another_output_keeps_the_loop() -> None:
    """The LSTM's output is h, a part of its state [h; c]; the RAN's cell may squash its output, and so may
    ATR's with `output_tanh`: the fused function does not serve them, and forcing it takes the step loop."""
    for cell, options in (("lstm", {}), ("ran", {}), ("atr", {"output_tanh": True})):
        torch.manual_seed(0)
        model = build_model("rnnsearch", 20, 20, emb=6, hidden=8, dropout=0.0, cell=cell, cell_options=options)
        with use_path("sequence"):
            assert decoder_sequence.chosen(model, torch.zeros(2, 3, 4), torch.zeros(2, 3, 16)) == "loop"


INTERPRETED = '''
import json, torch
from rnmt.cells import triton as cell_kernels
from rnmt.cells.triton import gated
from rnmt.cells.base import use_path
from rnmt.data.batching import pad
from rnmt.models import attention as attention_module
from rnmt.models import build_model, decoder_sequence
errors = {}
# DTMT: 4 heads over attention width 64 and memory 128 (blocks of 16 within a head), its cells' dropout on
for arch, cell, options in (("rnnsearch", "atr", {}), ("rnnsearch", "gru", {"reset": "before"}),
                            ("deep-rnnsearch", "gru", {}), ("dtmt", "lgru", {})):
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(0)
        sizes = {"hidden": 64, "heads": 4, "depth": 1, "rnn_dropout": 0.3} if arch == "dtmt" else {"hidden": 40}
        model = build_model(arch, 20, 20, emb=6, dropout=0.0, cell=cell, cell_options=options, **sizes,
                            **({"layers": 2} if arch == "deep-rnnsearch" else {})).to(dtype)
        src, mask = pad([[5, 6, 7, 8, 9, 10], [11, 12], [13, 5, 6, 7]], eos=True)
        tgt, _ = pad([[7, 6, 5, 9], [11, 10], [6, 5, 8, 8, 9]], bos=True)
        runs = []
        for forced in (False, True):
            model.zero_grad()
            torch.manual_seed(1)
            with use_path("sequence"):
                if forced:
                    with cell_kernels.force_on_cpu():
                        heads, widths = sizes.get("heads", 1), model.attention.query_proj.weight.size(0)
                        attention = attention_module.attention_kernels(
                            torch.zeros(1, dtype=dtype), 7, heads, widths,
                            model.attention.out.weight.size(0) if heads > 1 else widths)
                        calls, entries = [], [(attention, "forward"), (attention, "backward"), (gated, "rows_forward"),
                                              (gated, "rows_backward")]
                        reals = [getattr(module, entry) for module, entry in entries]
                        for (module, entry), real in zip(entries, reals):
                            setattr(module, entry, lambda *a, real=real, entry=entry: calls.append(entry) or real(*a))
                        logits = model(src, mask, tgt)
                        (logits * torch.linspace(-1, 1, logits.numel(), dtype=dtype).view_as(logits)).sum().backward()
                        for (module, entry), real in zip(entries, reals):
                            setattr(module, entry, real)
                        T, S = tgt.size(1), src.size(1)
                        # the attention two kernels each way a step; a gated cell one row kernel each way a step:
                        # DTMT's 2 in each encoder direction and in each decoder block, DeepRNNSearch's first
                        # decoder layer (a GRU with the reset gate after its product)
                        assert calls.count("forward") == calls.count("backward") == T, calls
                        rows = {"dtmt": 2 * 2 * S + 4 * T, "deep-rnnsearch": T}.get(arch, 0)
                        assert calls.count("rows_forward") == calls.count("rows_backward") == rows, calls
                else:
                    logits = model(src, mask, tgt)
                    (logits * torch.linspace(-1, 1, logits.numel(), dtype=dtype).view_as(logits)).sum().backward()
            runs.append([logits.detach()] + [p.grad.clone() for p in model.parameters()])
        errors[f"{arch} {cell} {dtype}"] = max(float(((a - b).abs() / (b.abs() + 1e-3)).max()) for a, b in zip(*runs))
print(json.dumps(errors))
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed (it comes with "
                    "`pip install -e .[dev]` on Linux); the CUDA kernels are tested through its interpreter")
def test_the_attention_kernels_equal_the_torch_steps_through_tritons_interpreter() -> None:
    """models/triton/attention.py's step kernels (attention widths 80, over the kernels' 64-wide blocks, and a
    padded source) give the torch path's logits and every gradient, in RNNSearch, in a GNMT decoder's first
    layer and in DTMT's decoder (4 heads, 16-wide blocks, with its cells' row kernels and dropout): float64
    to 1e-9, float32 to 3e-4 (measured: 9e-14 to 5e-13 and 5e-5 to 1.2e-4)."""
    src = str(Path(rnmt.__file__).resolve().parents[1])
    path = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    env.pop("RNMT_TRITON", None)
    proc = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(errors) == {f"{a} {c} torch.float{b}" for a, c in (("rnnsearch", "atr"), ("rnnsearch", "gru"),
                                                                   ("deep-rnnsearch", "gru"), ("dtmt", "lgru"))
                      for b in (64, 32)}
    for case, error in errors.items():
        assert error <= (1e-9 if "float64" in case else 3e-4), (case, error)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_attention_kernels_serve_heads_whose_widths_their_blocks_split() -> None:
    """One head: 64-wide blocks, the last one masked (RNNSearch's 2,000); several: the widest power of two of at
    least 16 that divides a head's attention and memory widths (DTMT's 16 heads of 64 and 128 at width 1024, of
    16 and 32 at `mini`'s 256), else the torch path (8 heads of 125 at width 1000)."""
    from rnmt.models.triton import attention as triton_attention

    assert triton_attention.width(1, 2000, 2000) == 64
    assert triton_attention.width(16, 1024, 2048) == 64
    assert triton_attention.width(16, 256, 512) == 16
    assert triton_attention.width(4, 64, 128) == 16
    assert triton_attention.width(8, 1000, 2000) is None
    cpu = torch.zeros(1)
    assert attention_module.attention_kernels(cpu, 7, 16, 1024, 2048) is None      # CUDA only, unforced


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_attention_kernels_compile_for_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What only the compiler rejects: the kernels compiled to sm_90 binaries (triton's ptxas, no GPU), the
    forward ones also as a search's step runs them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rnmt.models.triton import attention as triton_attention

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    forward = (triton_attention.attention_step_energies, triton_attention.attention_step_forward)
    for fn in triton_attention.KERNELS:
        # a training step's (int8 mask, 2K, u kept) and, forward, a search step's (its bool mask, K, no u)
        for dtype, search in [(d, s) for d in ("fp32", "fp64") for s in (False, True) if fn in forward or not s]:
            constants = {"BLOCK_S": 32, "BLOCK_W": triton_attention.BLOCK_W,
                         **({"KEYS_SCALE": 2.0 if search else 1.0, "KEEP_U": not search}
                            if "KEEP_U" in fn.arg_names else {})}
            signature = {arg: (("*i1" if search else "*i8") if arg == "mask_ptr" else f"*{dtype}")
                         if arg.endswith("_ptr") else "constexpr" if arg in constants else "i32"
                         for arg in fn.arg_names}
            compiled = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": 4})
            assert compiled.asm["cubin"], (fn.__name__, dtype, search)


def test_training_records_which_path_the_decoder_took(monkeypatch: pytest.MonkeyPatch) -> None:
    from rnmt.cells import taken

    monkeypatch.setattr(taken, "_TAKEN", {})
    model = make("atr")
    logits_and_grads(model, "sequence")
    decoder = [label for what, label in taken.taken_paths().items() if what.startswith("RNNSearch decoder")]
    assert decoder == ["rnmt kernel"]
    monkeypatch.setattr(taken, "_TAKEN", {})
    logits_and_grads(make("atr"), "loop")                 # each model's first training pass is recorded
    assert "step loop" in taken.taken_paths().values()
