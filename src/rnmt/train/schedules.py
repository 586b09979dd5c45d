"""Learning-rate schedules: each maps (step, epoch) to a factor of the base rate.

- constant
- halve_every_epoch: ATR paper section 4.2, "decayed the learning rate with a factor of 0.5 between
  each training epoch": factor 0.5^epoch.
- rnmt_plus: DTMT eq. 17 (from RNMT+, Chen et al. 2018), with n replicas, p warm-up steps, decay from
  step s to step e:   lr = lr0 · min(1 + t(n − 1)/(n p), n, n (2n)^((s − n t)/(e − s))).
The SR-NMT schedule (retrain from the best checkpoint at half the rate once the dev perplexity stops
improving) depends on validation results, so the trainer applies it (TrainSettings.plateau_*).
(Why not torch.optim.lr_scheduler: a factor here is a function of the saved progress, step and epoch,
so a resumed run, or a CUDA graph that reads the rate from a device tensor, gets the rate exactly,
with no scheduler state to keep in step with the optimizer's; LambdaLR would wrap these functions.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rnmt.io import InputError

Schedule = Callable[[int, int], float]


def constant(**_: Any) -> Schedule:
    return lambda step, epoch: 1.0


def halve_every_epoch(**_: Any) -> Schedule:
    return lambda step, epoch: 0.5 ** epoch


def rnmt_plus(replicas: int = 1, warmup_steps: int = 500, decay_start: int = 8000, decay_end: int = 64000,
              **_: Any) -> Schedule:
    n, p, s, e = replicas, warmup_steps, decay_start, decay_end
    if not (p > 0 and e > s >= 0 and n >= 1):
        raise InputError(f"rnmt_plus schedule needs warmup_steps > 0, decay_end > decay_start >= 0 and replicas >= 1 "
                         f"(got p={p}, s={s}, e={e}, n={n})")

    def factor(t: int, epoch: int) -> float:
        return min(1 + t * (n - 1) / (n * p), n, n * (2 * n) ** ((s - n * t) / (e - s)))

    return factor


def describe(name: str, lr: float, replicas: int = 1, warmup_steps: int = 500, decay_start: int = 8000,
             decay_end: int = 64000, **_: Any) -> str:
    """The rate schedule `name` gives from base rate `lr`, in words for a table: 'constant 0.002', 'halved
    every epoch from 0.0005', '0.001 rising to 0.002 over 1,000 steps, falling from step 4,000 to 0.0005 at
    step 32,000 (RNMT+ schedule)' (rnmt_plus reaches n·lr0 at step n·p, and its decay term, falling as n·t
    passes s, meets lr0/2 where n·t = e)."""
    if name == "rnmt_plus":
        n, s, e = replicas, decay_start, decay_end
        rise = f"{lr:g} rising to {lr * n:g} over {n * warmup_steps:,} steps" if n > 1 else f"{lr:g}"
        return f"{rise}, falling from step {s // n:,} to {lr / 2:g} at step {e // n:,} (RNMT+ schedule)"
    if name == "halve_every_epoch":
        return f"halved every epoch from {lr:g}"
    return f"constant {lr:g}" if name == "constant" else f"{name} {lr:g}"


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "constant": constant, "halve_every_epoch": halve_every_epoch, "rnmt_plus": rnmt_plus}


def get(name: str, **params: Any) -> Schedule:
    if name not in SCHEDULES:
        raise InputError(f"unknown schedule {name!r}; valid schedules: {', '.join(sorted(SCHEDULES))}")
    return SCHEDULES[name](**params)
