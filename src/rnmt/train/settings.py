"""Training settings: one typed class, its defaults, and the check of a settings mapping (a job's
--settings JSON) with messages that name the setting."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from rnmt.io import InputError
from rnmt.settings import checked
from rnmt.settings import setting as _setting

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
    """Every training setting and its default, written once: the config schema's `train` block is generated
    from this class, and config.yaml's `train:` holds only what a run changes."""

    NOT_IN_CONFIG: ClassVar[tuple[str, ...]] = ("seed",)     # set per job

    seed: int = _setting(1, "the row's seed (set per seed by the plan)")
    batch_size: int = _setting(80, "sentences per batch (ATR 80, SR-NMT 64)", minimum=1)
    batch_tokens: int = _setting(0, "when > 0, padded tokens per batch and side instead (DTMT 4096)", minimum=0)
    max_len: int = _setting(80, "per side; longer training pairs are skipped", minimum=1)
    max_len_unit: str = _setting("subwords", "what max_len counts: subwords, or words before BPE (ATR: 80 words)",
                                 enum=["subwords", "words"])
    optimizer: str = _setting("adam", enum=["adam", "adadelta"])
    lr: float = _setting(5e-4, exclusiveMinimum=0)
    betas: tuple[float, float] = _setting((0.9, 0.999), "Adam's betas")
    eps: float = _setting(1e-8, exclusiveMinimum=0)
    rho: float = _setting(0.95, "AdaDelta's decay (Zeiler 2012: 0.95; the UD paper's optimiser)", exclusiveMinimum=0,
                          exclusiveMaximum=1)
    clip: float = _setting(5.0, "gradient norm clipping", minimum=0)
    schedule: str = _setting("constant", enum=["constant", "halve_every_epoch", "rnmt_plus"])
    warmup_steps: int = _setting(500, "rnmt_plus p", minimum=1)
    decay_start: int = _setting(8000, "rnmt_plus s", minimum=0)
    decay_end: int = _setting(64000, "rnmt_plus e", minimum=1)
    replicas: int = _setting(1, "the paper's GPUs: an update sees replicas × one batch (rnmt_plus n)", minimum=1)
    accumulate: int = _setting(0, "batches per update; 0: replicas (the paper's batch)", minimum=0)
    plateau_retrains: int = _setting(0, "SR-NMT: when patience runs out, restart from the best checkpoint at "
                                        "plateau_factor of the rate, this many times", minimum=0)
    plateau_factor: float = _setting(0.5, exclusiveMinimum=0, maximum=1)
    label_smoothing: float = _setting(0.0, minimum=0, maximum=1)
    init: str = _setting("uniform", enum=["uniform", "xavier", "diagonal", "default"])
    init_scale: float = _setting(0.08, "uniform ±init_scale (ATR, DTMT)", minimum=0)
    max_epochs: int = _setting(10, minimum=1)
    max_steps: int = _setting(0, "0: no limit", minimum=0)
    max_minutes: float = _setting(0.0, "a safety cap on training time (validation excluded); 0: none", minimum=0)
    valid_every: int = _setting(500, "steps between validations", minimum=1)
    valid_bleu: bool = _setting(True, "greedy dev BLEU at each validation")
    select_by: str = _setting("loss", "what keeps the checkpoint (model.pt) and drives patience: dev loss or "
                                      "greedy dev BLEU", enum=["loss", "bleu"])
    patience: int = _setting(0, "validations without improvement (by select_by) before stopping; 0: off", minimum=0)
    nan_policy: str = _setting("stop", "a batch with a NaN/inf loss stops training or is skipped",
                               enum=["stop", "skip"])
    log_every: int = _setting(50, "steps per log line and train.jsonl record", minimum=1)
    checkpoint_every: int = _setting(0, "steps between last.pt saves besides validations; 0: validations only",
                                     minimum=0)
    keep_checkpoints: int = _setting(0, "the last k validations kept as checkpoints/step<N>.pt (rnmt "
                                        "average-checkpoints); 0: none", minimum=0)
    tensorboard: bool = _setting(False, "train.jsonl's records also as TensorBoard events in the model folder's "
                                        "tensorboard/")
    resume: bool = _setting(True, "continue from last.pt when the settings allow")
    threads: int = _setting(0, "CPU threads for torch; 0: torch's default", minimum=0)
    device: str = _setting("auto", "auto, cpu, cuda or cuda:<n>", pattern="^(auto|cpu|cuda(:[0-9]+)?)$")
    cuda_graphs: bool = _setting(True, "on CUDA, each whole training step (forward, backward, clipping, Adam) as "
                                       "a CUDA graph per bucket of batch shapes, replayed (rnmt.train.graphs; 3-5x "
                                       "the eager step's speed); eager elsewhere, the reason in train.json")
    amp: bool = _setting(True, "bfloat16 autocast of training's forward pass where the device multiplies "
                                "bfloat16 in hardware: CUDA, or a CPU with AVX512-BF16 or AMX")
    pretrained_src: str = _setting("", "word2vec text file of source word vectors (UD paper: GloVe); empty: none")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainSettings:
        s = checked(cls, d, "training")      # names, types, enums and bounds
        if s.select_by == "bleu" and not s.valid_bleu:
            raise InputError("select_by: bleu needs the dev BLEU of every validation: set valid_bleu: true, or "
                             "select_by: loss")
        return s


def complete(partial: dict[str, Any]) -> dict[str, Any]:
    """A variant's training settings: `partial` (the config's, scale's, table's and row's layers) over every
    default, checked as the training job checks them, without the seed (each seed's job adds its own)."""
    settings = asdict(TrainSettings.from_dict(partial))
    settings.pop("seed")
    settings["betas"] = list(settings["betas"])
    return settings
