"""`mlgate validate` refuses the built-in objects the API server refuses before admission, side by side: each
document of tests/cli/builtins/malformed.yaml is sent as written to the real kube-apiserver of the pinned version
(`kubectl apply --dry-run=server`, kubectl's default strict field validation, no webhook), and the whole file is
given to `mlgate validate`. Each must be refused by both, mlgate at the field and line of the one change; the
built-in objects of the real fixtures (tests/fixtures/real) must be taken by both."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane, started_plane

from mlgate.loading.builtin_schemas import shipped
from mlgate.loading.documents import read_documents

pytestmark = pytest.mark.e2e

MALFORMED = REPO / "tests" / "cli" / "builtins" / "malformed.yaml"
REAL = REPO / "tests" / "fixtures" / "real"
# name -> (the pointer mlgate refuses, the text of its line in the file, what the API server's answer names)
CASES = {
    "containers-not-a-list": ("/spec/containers", "containers: 5", "spec.containers"),
    "containers-a-string": ("/spec/template/spec/containers", 'containers: "x"', "spec.containers"),
    "replicas-a-word": ("/spec/replicas", "replicas: two", "spec.replicas"),
    "misspelt-field": ("/spec/containers/0/imagePullPolicyy", "imagePullPolicyy: Always", "imagePullPolicyy"),
    "container-without-name": ("/spec/containers/0/name", "- image: busybox:1.36", "spec.containers[0].name"),
    "label-a-number": ("/metadata/labels/tier", "labels: {tier: 5}", "metadata.labels"),
    "port-a-string": ("/spec/template/spec/containers/0/ports/0/containerPort", 'containerPort: "5432"',
                      "containerPort"),
    "env-a-map": ("/spec/template/spec/containers/0/env", "env: {LOG_LEVEL: debug}", "spec.containers.env"),
    "no-schedule": ("/spec/schedule", "spec:  # no schedule", "spec.schedule"),
    "removed-version": ("/apiVersion", "apiVersion: batch/v1beta1", "batch/v1beta1"),
    "service-port-a-string": ("/spec/ports/0/port", 'port: "80"', "spec.ports.port"),
    "value-a-number": ("/data/replicas", "replicas: 3", "data"),
    "limits-a-list": ("/spec/containers/0/resources/limits", "limits: [cpu]", "resources.limits"),
}


class BuiltinsOnly(ControlPlane):
    """The API server alone: built-in kinds need no CRD, and no webhook is registered."""

    def install_crds(self) -> None:
        pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = started_plane(tmp_path_factory.mktemp("builtins-plane"), BuiltinsOnly)
    yield plane
    plane.stop()


@pytest.fixture(scope="module")
def namespace(cluster: ControlPlane) -> str:
    cluster.kubectl("create", "namespace", "builtins").check()
    return "builtins"


def documents() -> list[tuple[str, str]]:
    """(name, the document's text as written) for every document of the malformed file."""
    texts = MALFORMED.read_text(encoding="utf-8").split("\n---\n")
    return [(yaml.safe_load(t)["metadata"]["name"], t) for t in texts]


def line_of(text: str) -> int:
    lines = MALFORMED.read_text(encoding="utf-8").splitlines()
    found = [i + 1 for i, line in enumerate(lines) if line.strip() in (text, f"- {text}")]
    assert len(found) == 1, f"{text!r} is on lines {found} of {MALFORMED.name}; the table needs one"
    return found[0]


@pytest.fixture(scope="module")
def mlgate_report() -> dict[str, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "mlgate", "validate", "-o", "json", str(MALFORMED)],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 1, done.stderr
    return {r["name"]: r for r in json.loads(done.stdout)["results"]}


def test_every_malformed_document_has_a_case_and_there_are_at_least_eight() -> None:
    assert sorted(name for name, _ in documents()) == sorted(CASES)
    assert len(CASES) >= 8


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_api_server_and_mlgate_both_refuse_the_malformed_object_at_its_field(
        name: str, cluster: ControlPlane, namespace: str, mlgate_report: dict[str, dict[str, Any]]) -> None:
    pointer, text, server_names = CASES[name]
    document = dict(documents())[name]
    answer = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=document)
    assert not answer.ok, f"the API server took {name}: {answer.output}"
    assert server_names in answer.stderr, answer.stderr
    record = mlgate_report[name]
    assert record["status"] == "denied"
    assert record["patch"] == []  # refused before admission: nothing to mutate
    refusals = [(v["path"], v["line"]) for v in record["violations"] if v["policy"] == "kubernetes"]
    assert refusals == [(pointer, line_of(text))]


def real_builtin_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for document in read_documents(sorted(str(p) for p in REAL.glob("*.yaml"))):
        data = document.data
        if isinstance(data, dict) and shipped().served(str(data.get("apiVersion")), str(data.get("kind"))):
            found.append((f"{Path(document.source).name}:{document.line}", data))
    return found


def test_the_real_fixtures_have_built_in_objects_of_five_kinds_or_more() -> None:
    assert len({obj["kind"] for _, obj in real_builtin_objects()}) >= 5


@pytest.mark.parametrize(("where", "obj"), real_builtin_objects(), ids=[w for w, _ in real_builtin_objects()])
def test_a_real_built_in_object_is_taken_by_the_api_server_and_not_refused_by_mlgate(
        where: str, obj: dict[str, Any], cluster: ControlPlane, namespace: str) -> None:
    assert shipped().check(obj) == []
    placed = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}}
    # create, not apply: some fixtures name themselves with generateName, which apply cannot take
    answer = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=placed)
    assert answer.ok, f"{where}: {answer.output}"
