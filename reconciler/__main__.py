"""`python -m mlgate_reconciler ...` is `mlgate operator ...` (see command.py)."""

from __future__ import annotations

from .command import operator

if __name__ == "__main__":
    operator(prog_name="python -m mlgate_reconciler")
