"""When a built report needs writing: only when more than its timestamps changed."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from mlgate.model.results import Action, Finding, Outcome, RuleResult
from mlgate.reports import Judged, ObjectRef, build_reports, digest, dumps, settle, stale, unchanged

NOW = datetime(2030, 1, 31, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
JOB = ObjectRef(kind="PyTorchJob", name="resnet", namespace="research", api_version="kubeflow.org/v1")
FAILED = RuleResult("gpu", "gpu.max", Action.DENY, Outcome.FAIL,
                    (Finding("/spec/x/resources/limits/nvidia.com~1gpu", "too many gpus", "12 > 8", "ask for 8"),))
WARNED = replace(FAILED, policy="pod-security", rule="pod-security.restricted", action=Action.WARN,
                 outcome=Outcome.WARN)


def report(*results: RuleResult, at: datetime = NOW) -> dict[str, Any]:
    return build_reports([Judged(JOB, results)], now=at)[0]


def stored(built: dict[str, Any]) -> dict[str, Any]:
    """The report as the API server gives it back after `kubectl apply`: its and kubectl's metadata added."""
    copied = copy.deepcopy(built)
    copied["metadata"].update(uid="0e3c", resourceVersion="812", creationTimestamp="2030-01-31T12:00:01Z",
                              managedFields=[{"manager": "mlgate"}],
                              annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"})
    return copied


def test_a_report_built_again_later_with_the_same_verdicts_is_unchanged() -> None:
    assert unchanged(stored(report(FAILED)), report(FAILED, at=LATER))
    assert digest(stored(report(FAILED))) == digest(report(FAILED, at=LATER))


def test_a_new_finding_is_a_change() -> None:
    assert not unchanged(stored(report(FAILED)), report(FAILED, WARNED, at=LATER))
    assert digest(report(FAILED)) != digest(report(FAILED, WARNED))


def test_no_stored_report_is_a_change() -> None:
    assert not unchanged(None, report(FAILED))
    assert settle(None, report(FAILED)) == report(FAILED)


def test_settle_says_there_is_nothing_to_write_when_only_time_moved() -> None:
    assert settle(stored(report(FAILED)), report(FAILED, at=LATER)) is None


def test_settle_keeps_when_a_result_was_first_found() -> None:
    written = settle(stored(report(FAILED)), report(FAILED, WARNED, at=LATER))
    assert written is not None
    stamps = {r["rule"]: r["timestamp"]["seconds"] for r in written["results"]}
    assert stamps == {"gpu.max": int(NOW.timestamp()), "pod-security.restricted": int(LATER.timestamp())}


def test_dumps_is_the_same_bytes_whatever_the_key_order() -> None:
    built = report(FAILED)
    reordered = {k: built[k] for k in reversed(list(built))}
    assert dumps(reordered) == dumps(built)


def test_stale_names_the_stored_reports_no_built_one_replaces() -> None:
    built = [report(FAILED)]
    assert stale(["mlgate-1-of-2", "mlgate", "mlgate-2-of-2"], built) == ["mlgate-1-of-2", "mlgate-2-of-2"]


def test_the_package_exports_exactly_its_all() -> None:
    import mlgate.reports as package

    public = {n for n, v in vars(package).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
    assert public == set(package.__all__)
