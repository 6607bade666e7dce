"""pod-security-admission's own fixtures, found where tools/control-plane/pod-security-admission.sh links them.

The module k8s.io/pod-security-admission at v0.Y.Z (the staging release of tools/control-plane/VERSION 1.Y.Z)
ships `test/testdata/{baseline,restricted}/v1.0 … v1.Y/{pass,fail}/*.yaml`: pods its checks allow (pass) or
forbid (fail) at that level and version. `judge()` runs one such folder through mlgate's rule of that level,
pinned to that version, and returns the fixtures it judged otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from builders import policy_set

from mlgate.engine import PolicySet, evaluate
from mlgate.model.facts import NO_FACTS

REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = (REPO / "tools" / "control-plane" / "VERSION").read_text(encoding="utf-8").strip()
MODULE = f"k8s.io/pod-security-admission@v0.{K8S_VERSION.removeprefix('1.')}"
NEWEST_MINOR = int(K8S_VERSION.split(".")[1])  # upstream's fixtures go up to its own minor version
LEVELS = ("baseline", "restricted")
VERDICTS = ("pass", "fail")
FETCH_COMMAND = "tools/control-plane/pod-security-admission.sh (or make control-plane)"
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def module_dir() -> Path:
    """MLGATE_PSA_MODULE, else the link the fetch script leaves beside the cached kube-apiserver."""
    if configured := os.environ.get("MLGATE_PSA_MODULE"):
        return Path(configured)
    root = os.environ.get("MLGATE_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlgate" / "k8s")
    return Path(root) / f"v{K8S_VERSION}" / "pod-security-admission"


def testdata() -> Path:
    return module_dir() / "test" / "testdata"


@dataclass(frozen=True)
class Mismatch:
    fixture: str
    expected: str  # "pass" or "fail"
    reasons: tuple[str, ...]  # what mlgate found (empty: it allowed the pod)

    def __str__(self) -> str:
        got = f"denied ({', '.join(self.reasons)})" if self.reasons else "allowed"
        return f"{self.fixture}: upstream {'allows' if self.expected == 'pass' else 'forbids'} it, mlgate {got}"


@dataclass
class Tally:
    """How many fixtures were judged and how many of them as upstream judges them, over the session."""

    judged: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    skipped: str = ""


TALLY = Tally()


def rule_set(level: str, minor: int) -> PolicySet:
    return policy_set({"rule": f"pod-security.{level}", "action": "deny", "params": {"version": f"v1.{minor}"}})


def load(path: Path) -> dict[str, Any]:
    document = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    assert isinstance(document, dict) and document.get("kind") == "Pod", f"{path} is not a Pod"
    return document


def judge(folder: Path, expected: str, rules: PolicySet) -> tuple[int, list[Mismatch]]:
    """Each fixture of one pass/ or fail/ folder through `rules`: (how many, those judged otherwise)."""
    files = sorted(folder.glob("*.yaml"))
    mismatches = []
    for path in files:
        decision = evaluate(load(path), rules, facts=NO_FACTS)
        if decision.allowed != (expected == "pass"):
            reasons = tuple(sorted({f.reason for r in decision.violations for f in r.findings}))
            mismatches.append(Mismatch(str(path.relative_to(folder.parents[2])), expected, reasons))
    return len(files), mismatches
