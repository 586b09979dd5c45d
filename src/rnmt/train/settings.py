"""Training settings: one typed class, its defaults, and the check of a settings mapping (a job's
--settings JSON) with messages that name the setting."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rnmt.config import closest
from rnmt.io import InputError

# Settings a resumed run may change (budgets and bookkeeping); any other change starts afresh.
BUDGET_FIELDS = {"max_epochs", "max_steps", "max_minutes", "patience", "log_every", "checkpoint_every", "threads",
                 "device", "resume", "valid_bleu", "keep_checkpoints", "tensorboard"}


def accumulation(settings: TrainSettings) -> int:
    """Batches per update: `accumulate` where set, else the paper's GPU count (`replicas`). The processes
    of a data-parallel run share each batch (rnmt.train.distributed), so an update holds replicas
    batches on any number of processes: DTMT's 4,096 tokens on each of n GPUs (eq. 17's n)."""
    return settings.accumulate or settings.replicas


@dataclass
class TrainSettings:
    seed: int = 1
    batch_size: int = 80               # sentences per batch (ATR 80, SR-NMT 64) ...
    batch_tokens: int = 0              # ... or, when > 0, padded tokens per batch and side (DTMT 4096)
    max_len: int = 80                  # per side; longer training pairs are skipped ...
    max_len_unit: str = "subwords"     # ... counted in subwords, or in words before BPE (ATR: 80 words)
    optimizer: str = "adam"
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    rho: float = 0.95                  # AdaDelta's decay (Zeiler 2012; UD paper's optimiser)
    clip: float = 5.0
    schedule: str = "constant"         # constant | halve_every_epoch | rnmt_plus
    warmup_steps: int = 500            # rnmt_plus p
    decay_start: int = 8000            # rnmt_plus s
    decay_end: int = 64000             # rnmt_plus e
    replicas: int = 1                  # the paper's GPUs (rnmt_plus n): each update sees replicas × one batch
    accumulate: int = 0                # batches summed into one update; 0: replicas (the paper's batch)
    plateau_retrains: int = 0          # SR-NMT: when patience runs out, restart from the best checkpoint ...
    plateau_factor: float = 0.5        # ... at this fraction of the rate, this many times
    label_smoothing: float = 0.0
    init: str = "uniform"              # uniform | xavier | diagonal | default
    init_scale: float = 0.08           # uniform ±init_scale (ATR, DTMT)
    max_epochs: int = 10
    max_steps: int = 0                 # 0: no limit
    max_minutes: float = 0.0           # 0: no limit; training time only (validation excluded)
    valid_every: int = 500             # steps
    valid_bleu: bool = True            # greedy dev BLEU at each validation
    select_by: str = "loss"            # loss | bleu: what picks the kept checkpoint (model.pt) and drives patience
    patience: int = 0                  # validations without improvement (by select_by) before stopping; 0: off
    nan_policy: str = "stop"           # stop | skip (a batch with a NaN/inf loss)
    log_every: int = 50
    checkpoint_every: int = 0          # steps between last.pt saves besides validations; 0: validations only
    keep_checkpoints: int = 0          # the last k validations' weights kept as checkpoints/step<N>.pt, for
    #                                    `rnmt average-checkpoints`; 0: none
    tensorboard: bool = False          # the train.jsonl records also as TensorBoard events in tensorboard/
    resume: bool = True
    threads: int = 0                   # CPU threads for torch; 0: torch's default
    device: str = "auto"
    amp: bool = True                   # bfloat16 autocast on CUDA
    pretrained_src: str = ""           # word2vec text file of source word vectors (UD paper: GloVe); "": none

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainSettings:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            hints = [f"{k} (did you mean {closest(k, sorted(names))[0]}?)" if closest(k, sorted(names)) else k
                     for k in unknown]
            raise InputError(f"unknown training setting(s) {', '.join(hints)}; valid: {', '.join(sorted(names))}")
        d = dict(d)
        defaults = cls()
        for k, v in d.items():                       # the type of each default is the setting's type
            want = type(getattr(defaults, k))
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) if want is float
                  else isinstance(v, int) and not isinstance(v, bool) if want is int
                  else isinstance(v, (list, tuple)) and len(v) == 2 if want is tuple else isinstance(v, want))
            if not ok:
                raise InputError(f"training setting {k} must be {want.__name__}, not {type(v).__name__} {v!r}")
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        s = cls(**d)
        if s.nan_policy not in ("stop", "skip"):
            raise InputError(f"nan_policy must be 'stop' or 'skip', not {s.nan_policy!r}")
        if s.max_len_unit not in ("subwords", "words"):
            raise InputError(f"max_len_unit must be 'subwords' or 'words', not {s.max_len_unit!r}")
        if s.select_by not in ("loss", "bleu"):
            raise InputError(f"select_by must be 'loss' (dev loss) or 'bleu' (greedy dev BLEU), not {s.select_by!r}")
        if s.select_by == "bleu" and not s.valid_bleu:
            raise InputError("select_by: bleu needs the dev BLEU of every validation: set valid_bleu: true, or "
                             "select_by: loss")
        if s.keep_checkpoints < 0:
            raise InputError(f"keep_checkpoints must be >= 0 (0: none), not {s.keep_checkpoints}")
        if s.accumulate < 0 or s.replicas < 1:
            raise InputError(f"accumulate must be >= 0 (0: replicas) and replicas >= 1, not "
                             f"accumulate {s.accumulate}, replicas {s.replicas}")
        return s
