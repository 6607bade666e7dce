"""Fixtures of the chart tests: the real helm, and for the e2e test a control plane of its own.

The control plane is the e2e harness's (tests/e2e/control_plane.py) without mlgate's CRDs, so that the chart
installs them; it is not shared with tests/e2e, whose webhook a chart release would otherwise intercept.
In CI (CI=true) helm and the control plane are mandatory: missing binaries fail the tests instead of skipping.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from control_plane import ControlPlane, started_plane
from helm_chart import Helm, HelmMissing, helm_path

CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _missing(reason: str) -> None:
    if CI:
        pytest.fail(f"CI=true and helm is mandatory: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        return Helm(helm_path(), tmp_path_factory.mktemp("helm-home"))
    except HelmMissing as exc:
        _missing(str(exc))
        raise


class BarePlane(ControlPlane):
    """A control plane without CRDs: `helm install` brings mlgate's own."""

    def install_crds(self) -> None:
        return None


@pytest.fixture(scope="session")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = started_plane(tmp_path_factory.mktemp("helm-control-plane"), BarePlane)
    yield plane
    plane.stop()
