"""The pin file: the sha256 of each file a registry's `url:` sources download.

It lies beside the registry (`workflow/corpora.yaml` → `workflow/corpora.sha256`) in the format of
`sha256sum` (`<hash>  <file name>` per line, `#` comments), so that
`cd results/downloads && sha256sum -c ../../workflow/corpora.sha256` checks the downloads too.
`rnmt corpus pin` writes it; the registry reads it with the pins written in the registry itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from rnmt.config import ConfigError
from rnmt.io import atomic_writer, read_lines

SHA256 = re.compile(r"[0-9a-f]{64}")
HEADER = ("# sha256 of the files the corpus registry downloads (results/downloads/<name>), written by\n"
          "# `rnmt corpus pin`. Check with: cd results/downloads && sha256sum -c <this file>\n")


def pin_file(registry: str | Path) -> Path:
    return Path(registry).with_suffix(".sha256")


def check_sha256(value: str, where: str) -> str:
    """A lower-case hex sha256, or a ConfigError naming `where`."""
    v = str(value).strip().lower()
    if not SHA256.fullmatch(v):
        raise ConfigError(f"{where}: {value!r} is not a sha256 (64 hexadecimal digits)")
    return v


def read_pins(path: str | Path) -> dict[str, str]:
    """File name → sha256 (empty when there is no pin file)."""
    path = Path(path)
    if not path.is_file():
        return {}
    pins: dict[str, str] = {}
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{path}, line {n}: expected '<sha256>  <file name>', got {line!r}")
        sha, name = check_sha256(parts[0], f"{path}, line {n}"), parts[1].lstrip("*")
        if pins.get(name, sha) != sha:
            raise ConfigError(f"{path}, line {n}: {name} is pinned twice with different checksums")
        pins[name] = sha
    return pins


def write_pins(path: str | Path, pins: dict[str, str]) -> None:
    with atomic_writer(path) as f:
        f.write(HEADER)
        f.writelines(f"{sha}  {name}\n" for name, sha in sorted(pins.items()))
