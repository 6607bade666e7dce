"""`mlgate validate` refuses what the API server refuses for a CRD's kind, side by side: every bad object below is
sent to the real API server (dry run, strict field validation as kubectl asks for it) with the CRDs of
manifests/crds and tests/e2e_crds installed, and given to `mlgate validate --crds tests/e2e_crds`. Each
refusal the API server gives (field and error type, and a CEL rule's message) must be mlgate's too; what it
accepts, mlgate must not refuse.

The API server stops at unknown fields (strict decoding) and says nothing else; mlgate goes on and says the
rest too, so for those cases the API server's refusals are a subset of mlgate's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from builders import DELETE, change, trainingjob
from control_plane import REPO, ControlPlane

from mlgate.loading.schemas import CEL_BLOCKED

pytestmark = pytest.mark.e2e

# mlgate's reasons as the API server's cause reasons; "unknown field" comes from strict decoding instead
CAUSES = {"unsupported value": "FieldValueNotSupported", "required value": "FieldValueRequired",
          "invalid value": "FieldValueInvalid", "invalid type": "FieldValueTypeInvalid",
          "too long": "FieldValueTooLong", "too many": "FieldValueTooMany", "forbidden": "FieldValueForbidden",
          "duplicate value": "FieldValueDuplicate", "unknown field": "UnknownField"}
NOT_CHECKED = ("<nil>", "CELNotChecked")  # "some validation rules were not checked because the object was invalid"
PLURALS = {"TrainingJob": "trainingjobs", "JobSet": "jobsets", "LeaderWorkerSet": "leaderworkersets"}

TJ = trainingjob()
TF_PS = change(change(change(change(TJ, "/spec/framework", "tensorflow"), "/spec/replicas", 3),
                      "/spec/distributedStrategy", "parameter_server"), "/spec/tensorflow", {"parameterServers": 1})
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
          "spec": {"replicatedJobs": [
              {"name": n, "template": {"spec": {"template": {"spec": {
                  "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example/train:1.0"}]}}}}}
              for n in ("a", "b")]}}
LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "lws"},
       "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
           "containers": [{"name": "c", "image": "registry.example/serve:1.0"}]}}}}}

CASES: list[tuple[str, dict[str, Any]]] = [
    ("valid-trainingjob", TJ),
    ("the-issue", change(change(change(change(TJ, "/spec/framework", "mxnet"), "/spec/replicas", 0),
                                "/spec/image", DELETE), "/spec/resources/mig", "1g.10gb")),
    ("framework-mxnet", change(TJ, "/spec/framework", "mxnet")),
    ("zero-replicas", change(TJ, "/spec/replicas", 0)),
    ("replicas-as-text", change(TJ, "/spec/replicas", "2")),
    ("replicas-2.5", change(TJ, "/spec/replicas", 2.5)),
    ("replicas-2.0", change(TJ, "/spec/replicas", 2.0)),
    ("null-replicas", change(TJ, "/spec/replicas", None)),
    ("no-image", change(TJ, "/spec/image", DELETE)),
    ("null-image", change(TJ, "/spec/image", None)),
    ("image-too-long", change(TJ, "/spec/image", "x" * 1025)),
    ("129-hyperparameters", change(TJ, "/spec/hyperparameters", {f"K{i}": "v" for i in range(129)})),
    ("numeric-hyperparameter", change(TJ, "/spec/hyperparameters", {"LR": 0.1})),
    ("cpu-as-list", change(TJ, "/spec/resources/cpu", ["4"])),
    ("negative-cpu", change(TJ, "/spec/resources/cpu", "-1")),
    ("mig-with-5-slices", change(change(TJ, "/spec/resources/gpu", DELETE), "/spec/resources/mig", "5g.40gb")),
    ("arg-as-number", change(TJ, "/spec/args", [1])),
    ("relative-mount-path", change(TJ, "/spec/checkpoint", {"claimName": "c", "mountPath": "ckpt"})),
    ("status-a-create-cannot-set", change(TJ, "/status", {"phase": "Done"})),
    ("gpu-and-mig", change(TJ, "/spec/resources/mig", "1g.10gb")),
    ("gpu-and-mig-and-zero-replicas", change(change(TJ, "/spec/resources/mig", "1g.10gb"), "/spec/replicas", 0)),
    ("tensorflow-on-default-framework", change(change(TJ, "/spec/framework", DELETE), "/spec/tensorflow",
                                               {"parameterServers": 1})),
    ("valid-tensorflow-parameter-server", TF_PS),
    ("valid-model-config", change(TJ, "/spec/modelConfig", {"hyperparameters": {"LR": "1"},  # a real bucket name:
                                                            "dataPath": "s3://datasets/train",  # the webhook judges it
                                                            "outputPath": "/out"})),
    ("strategy-on-pytorch", change(TJ, "/spec/distributedStrategy", "multi_worker_mirrored")),
    ("mirrored-on-three-replicas", change(change(TF_PS, "/spec/distributedStrategy", "mirrored"), "/spec/tensorflow",
                                          DELETE)),
    ("multi-worker-mirrored-with-ps", change(TF_PS, "/spec/distributedStrategy", "multi_worker_mirrored")),
    ("parameter-server-without-ps", change(TF_PS, "/spec/tensorflow", DELETE)),
    ("parameter-server-without-worker", change(TF_PS, "/spec/replicas", 1)),
    ("hyperparameters-in-both-places", change(change(TJ, "/spec/hyperparameters", {"A": "1"}),
                                              "/spec/modelConfig/hyperparameters", {"B": "2"})),
    ("relative-data-path", change(TJ, "/spec/modelConfig", {"dataPath": "data/train"})),
    ("checkpoint-claim-and-uri", change(TJ, "/spec/checkpoint", {"claimName": "c", "mountPath": "/c",
                                                                 "uri": "s3://b/c"})),
    ("min-member-without-gang", change(TJ, "/spec/scheduling", {"minMember": 2})),
    ("unknown-spec-field", change(TJ, "/spec/replica", 3)),
    ("unknown-metadata-field", change(TJ, "/metadata/label", {"a": "b"})),
    ("unknown-field-and-zero-replicas", change(change(TJ, "/spec/replica", 3), "/spec/replicas", 0)),
    ("valid-jobset", JOBSET),
    ("jobset-in-order-with-depends-on", change(change(JOBSET, "/spec/startupPolicy", {"startupPolicyOrder": "InOrder"}),
                                               "/spec/replicatedJobs/1/dependsOn", [{"name": "a", "status": "Ready"}])),
    ("jobset-container-typo", change(JOBSET, "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/"
                                             "imagePullPolcy", "Always")),
    ("valid-leaderworkerset", LWS),
    ("leaderworkerset-size-as-text", change(LWS, "/spec/leaderWorkerTemplate/size", "2")),
]


def api_refusals(cluster: ControlPlane, namespace: str, obj: dict[str, Any]) -> tuple[set[tuple[str, str]], str]:
    """(field, cause reason) of every refusal the API server gives on a dry-run create, and its message."""
    url = (f"{cluster.server}/apis/{obj['apiVersion']}/namespaces/{namespace}/{PLURALS[obj['kind']]}"
           "?dryRun=All&fieldValidation=Strict")
    body = change(obj, "/metadata/namespace", namespace)
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=cluster.ssl_context(), timeout=10):
            return set(), ""
    except urllib.error.HTTPError as exc:
        status = json.loads(exc.read())
    message = str(status.get("message", ""))
    if status.get("code") == 400:  # strict decoding: the unknown fields, and nothing else
        assert "strict decoding error" in message, status
        return {(f, "UnknownField") for f in re.findall(r'unknown field "([^"]+)"', message)}, message
    assert status.get("code") == 422, status
    found = set()
    for cause in status["details"]["causes"]:
        if cause["field"] != "<nil>":
            found.add((cause["field"], cause["reason"]))
        elif "some validation rules were not checked" in cause["message"]:
            found.add(NOT_CHECKED)
        # else: `must validate at least one schema (anyOf)` beside an int-or-string's type error, said once by mlgate
    return found, message


def dotted(path: str) -> str:
    """A JSON pointer as the API server writes field paths: spec.args[0]."""
    out = ""
    for token in path.strip("/").split("/"):
        out += f"[{token}]" if token.isdigit() else f".{token.replace('~1', '/').replace('~0', '~')}"
    return out.lstrip(".")


def mlgate_refusals(results: list[dict[str, Any]]) -> list[tuple[set[tuple[str, str]], list[str]]]:
    """Per object: (field, cause reason) of its CRD refusals, and the details of its CEL refusals."""
    out = []
    for result in results:
        crd = [v for v in result["violations"] if v["policy"] == "crd"]
        found = {(dotted(v["path"]), CAUSES[v["reason"]]) for v in crd}
        if any(u["policy"] == "crd" and u["reason"] == CEL_BLOCKED for u in result["unchecked"]):
            found.add(NOT_CHECKED)
        out.append((found, [v["detail"] for v in crd if v["rule"] == "cel"]))
    return out


def test_every_crd_refusal_of_the_api_server_is_also_given_by_mlgate_validate(
    cluster: ControlPlane, namespace: str, tmp_path: Path,
) -> None:
    manifests = tmp_path / "objects.yaml"
    manifests.write_text("---\n".join(json.dumps(obj) + "\n" for _, obj in CASES))
    run = subprocess.run([sys.executable, "-m", "mlgate", "validate", "-o", "json", "-j", "1",
                          "--crds", str(REPO / "tests" / "e2e_crds"), str(manifests)],
                         capture_output=True, text=True, check=False, cwd=REPO)
    assert run.returncode in (0, 1), run.stderr
    results = json.loads(run.stdout)["results"]
    assert len(results) == len(CASES)
    ours = mlgate_refusals(results)
    for (case, obj), (mine, cel_details) in zip(CASES, ours, strict=True):
        theirs, message = api_refusals(cluster, namespace, obj)
        if case.startswith("valid-") or case in ("replicas-2.0", "null-replicas", "status-a-create-cannot-set"):
            assert theirs == set() == mine, (case, message, mine)
        elif any(reason == "UnknownField" for _, reason in theirs):
            assert theirs <= mine, (case, message, mine)
        else:
            assert theirs == mine, (case, message, mine)
        for detail in cel_details:  # a CEL rule's message, word for word
            assert detail in message, (case, detail, message)
