"""Golden files: compare, or rewrite them all with MLGATE_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

UPDATE = os.environ.get("MLGATE_UPDATE_GOLDEN") == "1"


def check_golden(path: Path, actual: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"missing golden file {path}; run with MLGATE_UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert actual == expected, f"output differs from {path} (MLGATE_UPDATE_GOLDEN=1 rewrites it)"


def orphans(directory: Path, names: set[str]) -> list[str]:
    """Golden files no test claims any more."""
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.name not in names)
