"""What a decoder step launches on CUDA, counted on a CPU: the teacher-forced decoders' step loops and fused
functions (models/decoder_sequence.py), forward and backward, and a beam search's step (the model's, with its
cells' step kernels as on CUDA: cells/base.py `fast_step`; the search's own top-k, bookkeeping and reorder),
with CUDA's kernels forced onto the CPU through triton's interpreter (the cells' row kernels, the Triton
attention).

A count is the aten operations that compute (views, allocations and dtype queries left out) plus the Triton
launches, for one more target word: the difference between target lengths 6 and 5 (batch 4, source 7, hidden
64, 4 heads for DTMT, training mode with the systems' candidate dropout). A CUDA step launches about as many
kernels; the dropout noise's draws differ (3 operations a cell on the CPU: bernoulli_, div_ and mul; on CUDA
one dropout kernel), and under autocast each product adds its operands' rounding. A search step's count is
the mean over the steps of a beam-10 search of 3 sentences (eval mode, float32).

    python benchmarks/gpu/decoder-kernels.py [OUT.csv]      (about a minute; no GPU)
"""

from __future__ import annotations

import csv
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"          # before triton is first imported

import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from rnmt.cells import triton as cell_kernels  # noqa: E402
from rnmt.data.batching import pad  # noqa: E402
from rnmt.decode import graphs  # noqa: E402
from rnmt.decode.beam import beam_search  # noqa: E402
from rnmt.models import build_model, decoder_sequence  # noqa: E402

SYSTEMS = {"RNNSearch+ATR": ("rnnsearch", {"cell": "atr", "cell_options": {"bias": False}}),
           "RNNSearch+GRU": ("rnnsearch", {"cell": "gru", "cell_options": {"reset": "before"}}),
           "ShallowRNMT": ("shallow-rnmt", {"heads": 4}),
           "DTMT#1": ("dtmt", {"depth": 1, "heads": 4}),
           "DTMT#4": ("dtmt", {"depth": 4, "heads": 4})}
NOT_KERNELS = {"view", "_unsafe_view", "select", "slice", "transpose", "t", "unsqueeze", "squeeze", "expand",
               "as_strided", "split", "split_with_sizes", "unbind", "permute", "alias", "detach", "empty",
               "empty_like", "new_empty", "empty_strided", "new_empty_strided", "_reshape_alias", "lift_fresh",
               "resolve_conj", "resolve_neg", "is_same_size", "sym_size", "sym_stride", "numel", "promote_types"}
B, S, HIDDEN = 4, 7, 64


class Counter(TorchDispatchMode):
    """Counts the operations that compute, and (patched in below) the Triton launches, outside the launches'
    own interpretation."""

    def __init__(self) -> None:
        super().__init__()
        self.n, self.inside = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func.overloadpacket.__name__ not in NOT_KERNELS and not self.inside:
            self.n += 1
        return func(*args, **(kwargs or {}))


COUNTER = Counter()
_run = interpreter.InterpretedFunction.run


def _counted_run(self, *args, **kwargs):  # noqa: ANN001, ANN202
    COUNTER.n += 1
    COUNTER.inside += 1
    try:
        return _run(self, *args, **kwargs)
    finally:
        COUNTER.inside -= 1


interpreter.InterpretedFunction.run = _counted_run


def per_word(model: torch.nn.Module, path: str, forced: bool) -> tuple[int, int]:
    """(forward, backward) operations of one more target word on `path` ("loop" or "sequence")."""
    memory = torch.randn(B, S, model.attention.memory_proj.weight.size(1))
    params = [w for w in model.parameters() if w.requires_grad]
    counts = []
    for T in (5, 6):
        p = torch.randn(B, T, model.dec_lower.projection_size, requires_grad=True)
        state = {"state": torch.zeros(B, HIDDEN), "memory": memory, "keys": model.attention.keys(memory).detach(),
                 "mask": torch.ones(B, S, dtype=torch.bool)}
        with cell_kernels.force_on_cpu() if forced else torch.enable_grad():
            COUNTER.n = 0
            with COUNTER:
                outs, contexts = model.decoder_loop(p, state) if path == "loop" else \
                    decoder_sequence.decode(model, p, state)
            forward, COUNTER.n = COUNTER.n, 0
            with COUNTER:
                torch.autograd.grad(outs.sum() + contexts.sum(), [p, *params], allow_unused=True)
            counts.append((forward, COUNTER.n))
    return counts[1][0] - counts[0][0], counts[1][1] - counts[0][1]


def per_search_step(model: torch.nn.Module, forced: bool) -> tuple[float, float]:
    """(the model's step, the search's own: select and reorder) operations, the mean over a beam-10 search's
    steps, stepped as a graphed search steps (on its buffers, eagerly here)."""
    decoder = graphs.GraphedDecoder(model, torch.device("cpu"), capture=False)
    model_steps, search_steps = [], []
    step, search_step = model.step, decoder.search_step

    def counted_step(*args):  # noqa: ANN002, ANN202
        before = COUNTER.n
        out = step(*args)
        model_steps.append(COUNTER.n - before)
        return out

    def counted_search_step(*args):  # noqa: ANN002, ANN202
        COUNTER.n = 0
        with COUNTER:
            out = search_step(*args)
        search_steps.append(COUNTER.n)
        return out

    model.step, decoder.search_step = counted_step, counted_search_step
    src, mask = pad([[5, 6, 7, 8, 9, 10], [11, 12], [13, 5, 6, 7]], eos=True)
    with torch.no_grad(), cell_kernels.force_on_cpu() if forced else torch.no_grad():
        beam_search(model, src, mask, 10, (mask.sum(1) * 2 + 3).long(), cuda_graphs=decoder)
    del model.step
    mean = sum(model_steps) / len(model_steps)
    return mean, sum(search_steps) / len(search_steps) - mean


def main(out: str | None) -> None:
    rows = []
    for system, (arch, settings) in SYSTEMS.items():
        torch.manual_seed(0)
        model = build_model(arch, 20, 20, emb=HIDDEN, hidden=HIDDEN, **settings).train()
        for label, path, forced in (("step loop", "loop", False), ("fused, CPU operations", "sequence", False),
                                    ("fused, CUDA's kernels", "sequence", True)):
            forward, backward = per_word(model, path, forced)
            rows.append({"system": system, "path": label, "forward": forward, "backward": backward})
            print(f"{system:14} {label:22} forward {forward:4d}  backward {backward:4d}", flush=True)
        model.eval()
        for label, forced in (("search step, torch's operations", False), ("search step, CUDA's kernels", True)):
            own, search = per_search_step(model, forced)
            rows += [{"system": system, "path": f"{label}: the model's", "forward": round(own, 1), "backward": ""},
                     {"system": system, "path": f"{label}: the search's", "forward": round(search, 1),
                      "backward": ""}]
            print(f"{system:14} {label:32} the model's {own:5.1f}  the search's {search:5.1f}", flush=True)
    if out:
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
