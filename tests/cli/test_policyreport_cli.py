"""`mlgate validate -o policyreport`: a real process, its stdout and exit code pinned by golden files, and every
report it prints held to the upstream CRDs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from golden import check_golden, orphans

from mlgate.cli.main import validate
from mlgate.loading.schemas import SchemaCatalog
from mlgate.reports import REPORT_APIS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "policyreport"
EXAMPLES = ["examples/pytorchjob-privileged.yaml", "examples/trainingjob-too-many-gpus.yaml",
            "examples/trainingjob-ok.yaml", "examples/inferenceservice.yaml",
            "tests/cli/policyreport/cluster-serving-runtime.yaml"]
EPOCH = "1893456000"  # 2030-01-01T00:00:00Z: reproducible timestamps

CASES = {
    "validate-examples": (["validate", "-o", "policyreport", *EXAMPLES], 1),
    "validate-examples-openreports": (["validate", "-o", "policyreport", "--report-api", "openreports.io/v1alpha1",
                                       *EXAMPLES], 1),
    "validate-list-items": (["validate", "-o", "policyreport", "tests/cli/lists/pods.yaml"], 1),
}


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
    return subprocess.run([sys.executable, "-m", "mlgate", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, env=env)


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.mark.parametrize("name", sorted(CASES))
def test_policyreport_output_matches_golden(name: str) -> None:
    args, code = CASES[name]
    result = run_cli(args)
    assert "Traceback" not in result.stderr
    check_golden(GOLDEN / f"{name}.out",
                 f"exit: {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}")
    assert result.returncode == code


def test_every_golden_file_belongs_to_a_case() -> None:
    assert orphans(GOLDEN, {f"{name}.out" for name in CASES}) == []


@pytest.mark.parametrize("api", REPORT_APIS)
def test_every_printed_report_holds_to_its_upstream_crd(api: str) -> None:
    catalog = SchemaCatalog.from_paths([ROOT / "manifests" / "reports"])
    result = run_cli(["validate", "-o", "policyreport", "--report-api", api, *EXAMPLES,
                      "tests/cli/lists/pods.yaml"])
    reports = documents(result.stdout)
    assert {r["apiVersion"] for r in reports} == {api}
    assert {r["metadata"].get("namespace") for r in reports} == {None, "default", "ml"}
    for report in reports:
        verdict = catalog.check(report)
        assert verdict is not None and verdict.violations == [], verdict


def test_a_list_items_field_paths_are_in_the_item_not_the_list_document() -> None:
    reports = documents(run_cli(["validate", "-o", "policyreport", "tests/cli/lists/pods.yaml"]).stdout)
    paths = [r["properties"]["path"] for report in reports for r in report["results"]]
    assert paths and all(p.startswith("/spec/") for p in paths), paths


def test_the_same_manifests_in_another_order_print_the_same_bytes() -> None:
    forward = run_cli(["validate", "-o", "policyreport", *EXAMPLES]).stdout
    assert forward
    assert run_cli(["validate", "-o", "policyreport", *reversed(EXAMPLES)]).stdout == forward


def test_the_report_api_choices_are_the_builders() -> None:
    option = next(p for p in validate.params if p.name == "report_api")
    assert tuple(option.type.choices) == REPORT_APIS  # type: ignore[attr-defined]
