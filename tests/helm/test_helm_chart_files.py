"""The chart carries copies of what it cannot read from outside its directory (Helm loads only the chart):
the CRDs, the shipped policies, the webhook registration, the RBAC and the monitoring objects. Each copy equals
its source byte for byte;
MLGATE_UPDATE_GOLDEN=1 rewrites the copies, and a copy whose source is gone is an error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from golden import UPDATE, check_golden, orphans
from helm_chart import CHART, MANIFESTS, REPO

import mlgate

# The chart's directories of copies, each with its sources (the copy keeps the source's name unless mapped).
COPIES: dict[Path, dict[str, Path]] = {
    CHART / "crds": {p.name: p for p in sorted([*(MANIFESTS / "crds").glob("mlgate.dev_*.yaml"),
                                                *(MANIFESTS / "reports").glob("*_*.yaml")])},
    CHART / "files" / "policies": {p.name: p for p in sorted((REPO / "policies").glob("*.yaml"))},
    CHART / "files": {"webhooks.yaml": MANIFESTS / "webhooks.yaml"},
    CHART / "files" / "rbac": {"webhook.yaml": MANIFESTS / "rbac.yaml",
                               "reconciler.yaml": MANIFESTS / "reconciler" / "rbac.yaml",
                               "audit.yaml": MANIFESTS / "audit" / "rbac.yaml"},
    CHART / "files" / "monitoring": {p.name: p for p in sorted((MANIFESTS / "monitoring").iterdir())
                                     if p.name != "kustomization.yaml"},
}


@pytest.mark.parametrize("directory", sorted(COPIES), ids=lambda p: str(p.relative_to(CHART)))
def test_the_chart_copies_equal_their_sources(directory: Path) -> None:
    sources = COPIES[directory]
    assert sources, f"no source files for {directory}"
    for name, source in sources.items():
        check_golden(directory / name, source.read_text(encoding="utf-8"))
    if UPDATE:
        for name in orphans(directory, set(sources)):
            (directory / name).unlink()
    assert orphans(directory, set(sources)) == [], "copies whose source is gone"


def test_every_crd_of_the_kustomize_base_is_in_the_chart() -> None:
    listed = [name for directory in ("crds", "reports") for name in yaml.safe_load(
        (MANIFESTS / directory / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]]
    assert sorted(listed) == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))


def test_the_chart_ships_the_version_the_kustomize_base_and_the_package_ship() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    base = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    (image,) = [i for i in base["images"] if i["name"] == "mlgate"]
    assert chart["appVersion"] == image["newTag"] == mlgate.__version__
