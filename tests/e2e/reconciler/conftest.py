"""Fixtures of the reconciler's end-to-end tests. They judge the reconciler alone, including objects admission
would have refused or defaulted, so their namespaces opt out of the session's webhook (OUT_OF_WEBHOOK)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from control_plane import REPO, ControlPlane
from e2e_objects import OUT_OF_WEBHOOK

from mlgate.engine import PolicySet
from mlgate.loading.policies import load_policy_paths
from mlgate_reconciler.client import Transport, kube_transport


@pytest.fixture
def namespace(make_namespace: Callable[..., str]) -> str:
    return make_namespace(OUT_OF_WEBHOOK)


@pytest.fixture(scope="session")
def policies() -> PolicySet:
    return load_policy_paths([REPO / "policies"])


@pytest.fixture(scope="session")
def transport(cluster: ControlPlane) -> Transport:
    return kube_transport(str(cluster.kubeconfig))
