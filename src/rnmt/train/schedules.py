"""Learning-rate schedules, each a function of (step, epoch) → factor applied to the base rate."""

from __future__ import annotations

from collections.abc import Callable

from rnmt.io import InputError

Schedule = Callable[[int, int], float]


def constant(step: int, epoch: int) -> float:
    return 1.0


def halve_every_epoch(step: int, epoch: int) -> float:
    """ATR paper section 4.2: "decayed the learning rate with a factor of 0.5 between each training epoch"."""
    return 0.5 ** epoch


SCHEDULES: dict[str, Schedule] = {"constant": constant, "halve_every_epoch": halve_every_epoch}


def get(name: str) -> Schedule:
    if name not in SCHEDULES:
        raise InputError(f"unknown schedule {name!r}; valid schedules: {', '.join(sorted(SCHEDULES))}")
    return SCHEDULES[name]
