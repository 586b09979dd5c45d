"""Which kind of path each recurrence a process trained took, kept for its metrics file (train.json's `paths`): "step
loop" (autograd through the step), "rnmt kernel" (a whole-sequence path of rnmt's: a loop with a hand-written
backward, a scan; "(Triton)" on CUDA, "(Triton, persistent)" for ATR's persistent kernels) or "torch layer"
(cuDNN, oneDNN), so that tables can say whether their speed ratios compare cells on the same kind of path.
`run` (cells/base.py) and the fused decoder (models/decoder_sequence.py) record theirs.
"""

from __future__ import annotations

from torch import Tensor, nn

from rnmt.cells.triton import kind

_TAKEN: dict[str, str] = {}
_ROUND = [0]            # `forget_taken` starts a new round, in which every module records its path again


def unrecorded(module: nn.Module) -> bool:
    """Whether `module` has not yet recorded its path in this round (its key is not free at every call)."""
    return getattr(module, "_path_round", -1) != _ROUND[0]


def record_path(what: str, label: str, module: nn.Module | None = None) -> None:
    """Keep the kind of path a training computation took (the first time it runs in this process, or since
    `forget_taken`); `module`: the cell or model it ran, marked as recorded for the round."""
    _TAKEN.setdefault(what, label)
    if module is not None:
        module._path_round = _ROUND[0]


def forget_taken() -> None:
    """Forget the paths taken, so that the next computations record theirs (a benchmark times one model's
    step eagerly, then as a replayed CUDA graph, where other paths can be chosen)."""
    _TAKEN.clear()
    _ROUND[0] += 1


def taken_paths() -> dict[str, str]:
    """What kind of path each recurrence this process trained took (the module's kinds), computation → kind."""
    return dict(_TAKEN)


def path_label(path: str, out: Tensor, inputs: tuple[Tensor | None, ...] = ()) -> str:
    """What kind of path made `out` from `inputs` (the cell's input and initial state: the work before them,
    another cell's, is not this one's)."""
    if path == "torch":
        return f"torch layer ({'cuDNN' if out.is_cuda else 'oneDNN'})"
    if path == "sequence":
        triton = kind(out, inputs) if out.is_cuda else None
        return f"rnmt kernel ({triton})" if triton else "rnmt kernel"
    return "step loop"
