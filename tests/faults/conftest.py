"""The fault-injection suite (`pytest -m faults`; plain `pytest` runs it too).

Each test injects a fault for real (kills a process, truncates or corrupts a file, fills a disk, cuts
the network) or feeds a bad input, and says so through the `record` fixture. At the end a summary
counts what the tests recorded: a fault counts as survived, and a bad input as rejected with the
promised message, only when its test passed (its assertions on the outcome and the message held).
"""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rnmt import cli

KINDS = {"fault": "faults injected", "input": "bad inputs fed", "safety": "safety checks"}
OUTCOME = {"fault": "survived", "input": "rejected with the promised message", "safety": "held"}
_records: list[tuple[str, str, str]] = []       # (kind, what, passed | failed)
_skipped: list[tuple[str, str]] = []            # (test, reason)


class Recorder:
    """What a test injects or feeds; stored on the test's report (user_properties)."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item

    def fault(self, what: str) -> None:
        self.item.user_properties.append(("fault", what))

    def bad_input(self, what: str) -> None:
        self.item.user_properties.append(("input", what))

    def safety(self, what: str) -> None:
        self.item.user_properties.append(("safety", what))


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append((report.nodeid.split("::")[-1], reason.removeprefix("Skipped: ")))
    elif report.when == "call":
        for kind, what in report.user_properties:
            if kind in KINDS:
                _records.append((kind, what, "passed" if report.passed else "failed"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not (_records or _skipped):
        return
    tr = terminalreporter
    tr.section("fault injection summary")
    for kind, label in KINDS.items():
        mine = [r for r in _records if r[0] == kind]
        ok = sum(r[2] == "passed" for r in mine)
        tr.write_line(f"{label}: {len(mine)}, {OUTCOME[kind]}: {ok}")
        for _, what, outcome in mine:
            if outcome != "passed":
                tr.write_line(f"    NOT {OUTCOME[kind]}: {what}")
    for test, reason in _skipped:
        tr.write_line(f"skipped: {test}: {reason}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A size-limited tmpfs (2 MiB) mounted under tmp_path; skipped where mounting is not permitted."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({(got.stderr or got.stdout).strip() or 'mount failed'}); "
                    "the full-disk faults need root or CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """The rnmt command line run in this process (what `rnmt ARGS` runs, without a Python start of its own
    for each case): → (exit code, standard error). An exception other than rnmt's own input errors escapes
    it, and so fails the test, as a traceback would."""
    monkeypatch.setattr(cli.allocator, "keep_freed_memory", lambda: None)     # the test process's heap stays

    def run(*args: str, stdin: bytes = b"a small test .\n") -> tuple[int, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        capsys.readouterr()
        code = cli.main(list(args))
        return code, capsys.readouterr().err
    return run
