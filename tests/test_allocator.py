"""The allocator tuning: a training loop's big buffers stay mapped between steps instead of being faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# min over steady-state iterations of the minor page faults of one fused-ATR forward+backward at
# hidden 512, batch 40, length 40 (its buffers are ~3 MB each, above glibc's default mmap threshold)
PROBE = textwrap.dedent("""
    import torch
    from rnmt.machine import allocator
    applied = allocator.keep_freed_memory()
    from rnmt.cells import build_cell, run
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cell = build_cell("atr", 512, 512)
    x = torch.randn(40, 40, 512, requires_grad=True)
    mask = torch.ones(40, 40, dtype=torch.bool)
    faults = []
    for _ in range(8):
        before = allocator.minor_faults()
        out, _ = run(cell, x, mask)
        out.sum().backward()
        faults.append(allocator.minor_faults() - before)
    print(applied, min(faults[3:]), max(faults[:1]))
""")


def probe(tuning: str) -> tuple[bool, int, int]:
    env = {**os.environ, "RNMT_MALLOC_TUNING": tuning}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    applied, steady, first = out.stdout.split()
    return applied == "True", int(steady), int(first)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_tuned_allocator_stops_refaulting_the_same_buffers() -> None:
    applied, steady, first = probe("1")
    assert applied
    assert first > 1000                   # the first step maps its buffers (a few MB)
    assert steady < 100                   # later steps reuse them (without the tuning: ~800 every step)


def test_tuning_can_be_turned_off() -> None:
    applied, _, _ = probe("0")
    assert not applied

