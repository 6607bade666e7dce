"""End-to-end fixtures: one control plane and one webhook process per session, a fresh namespace per test.

In CI (CI=true) the control plane is mandatory: missing binaries or a failed start fail every e2e
test, and a skipped e2e test fails the run. Elsewhere, missing binaries skip the e2e tests with a
message naming `make control-plane`.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from control_plane import BUILD_COMMAND, CI, REPO, ControlPlane, HarnessError, started_plane
from e2e_webhook import WebhookProcess

GANG_POLICY = REPO / "examples" / "policies" / "gang-volcano.yaml"
PROBE_NAMESPACE = "e2e-probe"
_active: list[ControlPlane] = []
_skipped_in_ci: list[str] = []


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = started_plane(tmp_path_factory.mktemp("control-plane"))
    _active.append(plane)
    yield plane
    plane.stop()
    _active.remove(plane)


@pytest.fixture(scope="session")
def webhook(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    """The webhook on the shipped policies/, plus the Volcano gang example stored as a ClusterMLPolicy."""
    server = WebhookProcess(cluster, tmp_path_factory.mktemp("webhook"))
    try:
        cluster.kubectl("create", "namespace", PROBE_NAMESPACE).check()
        cluster.kubectl("apply", "-f", str(GANG_POLICY)).check()
        server.start()
        server.register(PROBE_NAMESPACE)
    except (HarnessError, AssertionError, OSError) as exc:
        server.stop()
        pytest.fail(f"the webhook did not start or register: {exc}\n{cluster.tails()}", pytrace=False)
    yield server
    server.stop()


NamespaceFactory = Callable[..., str]


@pytest.fixture
def make_namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> NamespaceFactory:
    """Fresh namespaces named after the test. Nothing deletes them: with no namespace controller they
    would never finish terminating, and each test has its own."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:40].strip("-")

    def make(labels: dict[str, str] | None = None) -> str:
        name = f"{base}-{uuid.uuid4().hex[:5]}"
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        cluster.kubectl("create", "-f", "-", stdin=obj).check()
        return name

    return make


@pytest.fixture
def namespace(make_namespace: NamespaceFactory) -> str:
    return make_namespace()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                             pytest.TestReport]:
    """A failed e2e test shows the tail of every control-plane process log (the webhook's included)."""
    report = yield
    if report.failed and _active and item.get_closest_marker("e2e") is not None:
        for plane in _active:
            report.sections.append(("control plane logs", plane.tails(30)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if CI and report.skipped and not hasattr(report, "wasxfail") and "e2e" in report.keywords:
        _skipped_in_ci.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """CI never goes green with skipped e2e tests."""
    if _skipped_in_ci and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped_in_ci:
        terminalreporter.write_line(f"CI=true: {len(_skipped_in_ci)} e2e test(s) skipped; the control plane is "
                                    f"mandatory in CI (build it with `{BUILD_COMMAND}`)", red=True)
