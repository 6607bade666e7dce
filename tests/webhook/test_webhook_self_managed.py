"""`mlgate serve --self-managed` without an API server: what it registers, when it writes, who writes.

The API server here is `FakeApi`, a dict of objects by path with resourceVersions (409 on a stale write), enough
for the leader's reads and writes; tests/e2e/test_e2e_self_managed.py runs the same code against a real one.
"""

from __future__ import annotations

import base64
import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mlgate.kube.lease import Lease
from mlgate.kube.rest import ApiError
from mlgate_webhook.commands import certs, serve
from mlgate_webhook.registration import CONFIG_PATHS, ENFORCING, desired, shipped_configurations, sync
from mlgate_webhook.selfmanaged import SelfManaged, SelfManagedOptions

ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/mlgate-webhook"
VALIDATING = f"{CONFIG_PATHS['ValidatingWebhookConfiguration']}/mlgate"
SHIPPED = shipped_configurations()


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {ROLE: {"metadata": {"name": "mlgate-webhook", "uid": "role-uid",
                                                                       "resourceVersion": "1"}}}
        self.writes: Counter[str] = Counter()
        self.version = 1

    def __call__(self, method: str, path: str, body: Any = None, *,
                 content_type: str = "application/json") -> dict[str, Any] | None:
        if method == "GET":
            return copy.deepcopy(self.objects.get(path))
        self.writes[f"{method} {path.rsplit('/', 2)[-2] if method != 'POST' else path.rsplit('/', 1)[-1]}"] += 1
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                raise ApiError(409, "already exists")
        elif method == "PUT":
            if path not in self.objects:
                return None
            if body["metadata"].get("resourceVersion") != self.objects[path]["metadata"]["resourceVersion"]:
                raise ApiError(409, "the object has been modified")
            if body["metadata"].get("ownerReferences") != self.objects[path]["metadata"].get("ownerReferences"):
                # OwnerReferencesPermissionEnforcement (on in OpenShift, and in tests/e2e): the webhook may not delete
                raise ApiError(403, "cannot set an ownerRef on a resource you can't delete")
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[path] = stored
        return copy.deepcopy(stored)


def failure_policies(configs: list[dict[str, Any]]) -> dict[str, str]:
    return {h["name"]: h["failurePolicy"] for c in configs for h in c["webhooks"]}


def managed(api: FakeApi, tmp_path: Path, identity: str = "replica-a", ready: bool = False) -> SelfManaged:
    options = SelfManagedOptions(namespace="ml-admission", identity=identity, url="https://127.0.0.1:9443")
    webhook = SelfManaged(options, api, tmp_path / identity)
    webhook.ready = lambda: ready
    return webhook


def test_until_a_replica_is_ready_every_webhook_is_registered_with_failure_policy_ignore() -> None:
    configs = desired(SHIPPED, namespace="mlgate-system", ca_bundle="Q0E=", enforcing=False)
    assert set(failure_policies(configs).values()) == {"Ignore"}
    assert {c["metadata"]["annotations"][ENFORCING] for c in configs} == {"false"}


def test_once_ready_the_shipped_failure_policies_are_registered() -> None:
    configs = desired(SHIPPED, namespace="mlgate-system", ca_bundle="Q0E=", enforcing=True)
    assert failure_policies(configs) == failure_policies(SHIPPED)
    assert failure_policies(configs)["ml-jobs.validate.mlgate.dev"] == "Fail"


def test_a_url_replaces_the_service_and_mlgates_own_namespace_is_never_intercepted() -> None:
    configs = desired(SHIPPED, namespace="ml-admission", ca_bundle="Q0E=", enforcing=True,
                      url="https://127.0.0.1:9443/")
    for hook in (h for c in configs for h in c["webhooks"]):
        assert hook["clientConfig"]["url"] in ("https://127.0.0.1:9443/validate", "https://127.0.0.1:9443/mutate")
        assert "service" not in hook["clientConfig"] and hook["clientConfig"]["caBundle"] == "Q0E="
        (by_name,) = [t for t in hook["namespaceSelector"]["matchExpressions"]
                      if t["key"] == "kubernetes.io/metadata.name"]
        assert by_name["values"] == ["kube-system", "ml-admission"]
    in_cluster = desired(SHIPPED, namespace="ml-admission", ca_bundle="Q0E=", enforcing=True)
    assert {h["clientConfig"]["service"]["namespace"] for c in in_cluster for h in c["webhooks"]} == {"ml-admission"}


def test_sync_creates_the_configurations_once_and_updates_them_only_when_their_content_changes() -> None:
    api = FakeApi()
    first = desired(SHIPPED, namespace="mlgate-system", ca_bundle="Q0E=", enforcing=False)
    assert sync(api, first) == ["created MutatingWebhookConfiguration/mlgate",
                                "created ValidatingWebhookConfiguration/mlgate"]
    assert sync(api, first) == []
    rotated = desired(SHIPPED, namespace="mlgate-system", ca_bundle="Q0EgTkVX", enforcing=False)
    assert sync(api, rotated) == ["updated MutatingWebhookConfiguration/mlgate",
                                  "updated ValidatingWebhookConfiguration/mlgate"]
    assert api.writes == {"POST mutatingwebhookconfigurations": 1, "POST validatingwebhookconfigurations": 1,
                          "PUT mutatingwebhookconfigurations": 1, "PUT validatingwebhookconfigurations": 1}


def test_the_leader_writes_the_secret_and_the_configurations_and_a_follower_only_reads(tmp_path: Path) -> None:
    api = FakeApi()
    leader, follower = managed(api, tmp_path, "replica-a"), managed(api, tmp_path, "replica-b")
    leader.tick()
    writes = sum(api.writes.values())
    follower.tick()
    assert sum(api.writes.values()) == writes and leader.leading and not follower.leading
    assert (tmp_path / "replica-b" / "tls.crt").read_bytes() == (tmp_path / "replica-a" / "tls.crt").read_bytes()
    secret = api.objects["/api/v1/namespaces/ml-admission/secrets/mlgate-webhook-certs"]
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "rbac.authorization.k8s.io/v1",
                                                      "kind": "ClusterRole", "name": "mlgate-webhook",
                                                      "uid": "role-uid"}]
    bundle = base64.b64decode(api.objects[VALIDATING]["webhooks"][0]["clientConfig"]["caBundle"])
    assert bundle == base64.b64decode(secret["data"]["ca-bundle.crt"])
    leader.tick()
    assert sum(api.writes.values()) == writes + 1  # the Lease renewal; nothing else changed
    assert leader.leading


def test_a_new_leader_keeps_enforcing_what_a_ready_replica_turned_on(tmp_path: Path) -> None:
    api = FakeApi()
    managed(api, tmp_path, "replica-a", ready=True).tick()
    assert api.objects[VALIDATING]["metadata"]["annotations"][ENFORCING] == "true"
    api.objects.pop("/apis/coordination.k8s.io/v1/namespaces/ml-admission/leases/mlgate-webhook")  # leader gone
    successor = managed(api, tmp_path, "replica-b", ready=False)
    successor.tick()
    assert successor.leading
    assert failure_policies([api.objects[VALIDATING]])["ml-jobs.validate.mlgate.dev"] == "Fail"


@pytest.mark.parametrize(("args", "message"), [
    (["--self-managed"], "--self-managed needs --in-cluster or --kubeconfig"),
    (["--webhook-url", "https://127.0.0.1:9443"], "go with --self-managed"),
    (["--self-managed", "--in-cluster", "--webhook-url", "http://127.0.0.1:9443"], "https only"),
], ids=["no cluster credentials", "a url without --self-managed", "a plain-http url"])
def test_serve_refuses_self_managed_arguments_that_cannot_work(args: list[str], message: str) -> None:
    result = CliRunner().invoke(serve, args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_certs_tells_to_create_the_namespace_before_the_secret(tmp_path: Path) -> None:
    result = CliRunner().invoke(certs, ["--out-dir", str(tmp_path)])
    lines = result.stderr.splitlines()
    namespace = next(i for i, line in enumerate(lines) if "kubectl create namespace mlgate-system" in line)
    secret = next(i for i, line in enumerate(lines) if "create secret tls" in line)
    assert namespace < secret


def test_a_follower_takes_the_lease_once_the_leader_stopped_renewing_for_a_lease_duration() -> None:
    api, now = FakeApi(), [0.0]
    leader = Lease(api, "ml-admission", "mlgate-webhook", "replica-a", clock=lambda: now[0])
    follower = Lease(api, "ml-admission", "mlgate-webhook", "replica-b", clock=lambda: now[0])
    assert leader.try_acquire_or_renew() and not follower.try_acquire_or_renew()
    now[0] = 14.9
    assert not follower.try_acquire_or_renew()  # 14.9 s since it saw the record change: not yet expired
    now[0] = 15.1
    assert follower.try_acquire_or_renew()
    assert not leader.try_acquire_or_renew()  # the record changed under it: it is a follower now


def test_with_a_ca_file_the_leader_registers_that_ca_and_keeps_no_secret(tmp_path: Path) -> None:
    api, ca_file = FakeApi(), tmp_path / "ca.crt"
    ca_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ncert-manager's CA\n-----END CERTIFICATE-----\n")
    options = SelfManagedOptions(namespace="ml-admission", identity="replica-a", ca_file=ca_file)
    SelfManaged(options, api, tmp_path / "state").tick()
    assert not [path for path in api.objects if "/secrets/" in path]
    bundle = base64.b64decode(api.objects[VALIDATING]["webhooks"][0]["clientConfig"]["caBundle"])
    assert bundle == ca_file.read_bytes()
