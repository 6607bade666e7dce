"""`helm install` of charts/mlgate against a real kube-apiserver (no kubelet: the Pods never run), then
`helm uninstall`. Every object `helm template` renders is stored, the CRDs come from the chart, no webhook is
registered by Helm, the API server accepts the registration the webhook will write; after the uninstall every
object is gone but the CRDs, which Helm never deletes
(helm.sh/docs/chart_best_practices/custom_resource_definitions)."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from control_plane import ControlPlane, Result
from helm_chart import CHART, KEPT, RELEASE, Helm, Obj, configurations, documents, webhooks

pytestmark = pytest.mark.e2e
CRDS = sorted(yaml.safe_load(p.read_text(encoding="utf-8"))["metadata"]["name"]
              for p in (CHART / "crds").glob("*.yaml"))


def reference(obj: Obj) -> str:
    """TYPE/NAME for kubectl, with the group so that no other kind of the same name is meant."""
    group = obj["apiVersion"].rpartition("/")[0]
    return f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']}"


def stored(cluster: ControlPlane, namespace: str, objects: list[Obj]) -> tuple[set[str], Result]:
    result = cluster.kubectl("get", "-n", namespace, "--ignore-not-found", "-o", "json",
                             *[reference(o) for o in objects])
    items = json.loads(result.stdout)["items"] if result.ok and result.stdout.strip() else []
    return {reference(item) for item in items}, result


def test_helm_install_stores_every_object_and_helm_uninstall_removes_them(helm: Helm, bare_cluster: ControlPlane,
                                                                         ) -> None:
    cluster, namespace = bare_cluster, f"mlgate-{uuid.uuid4().hex[:6]}"
    kubeconfig = cluster.kubeconfig
    rendered = helm.render(namespace=namespace)
    assert cluster.kubectl("get", "crd", CRDS[0]).code != 0  # the chart brings them

    install = helm.run("install", RELEASE, str(CHART), "--namespace", namespace, "--create-namespace",
                       "--timeout", "60s", kubeconfig=kubeconfig).check()
    assert "STATUS: deployed" in install.stdout and f"installed in the namespace {namespace}" in install.stdout

    have, result = stored(cluster, namespace, rendered)
    assert have == {reference(o) for o in rendered}, result
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", *[f"crd/{c}" for c in CRDS]).check()
    deployment = cluster.get_object("deployment", "mlgate-webhook", namespace)
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert deployment["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == namespace

    # Helm registers no webhook: the webhook does, once it runs (`--self-managed`), so an install whose Pods never
    # start locks nothing out. The API server accepts the registration as rendered (its CEL matchConditions
    # compile). No admission request is sent: without cluster DNS the Service name would resolve off this machine.
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        assert cluster.kubectl("get", kind, "mlgate").code != 0
    accepted = cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-",
                               stdin=configurations(rendered)).check()
    live = webhooks(documents(accepted.stdout))
    ours = webhooks(rendered)
    assert sorted(live) == sorted(ours)
    for name, hook in ours.items():
        assert {f: live[name].get(f) or None for f in (*KEPT, "namespaceSelector", "failurePolicy")} == {
            f: hook.get(f) or None for f in (*KEPT, "namespaceSelector", "failurePolicy")}, name

    uninstall = helm.run("uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout", "60s",
                         kubeconfig=kubeconfig).check()
    assert f'release "{RELEASE}" uninstalled' in uninstall.stdout
    have, result = stored(cluster, namespace, rendered)
    assert have == set(), result
    assert helm.run("list", "--all", "--namespace", namespace, "-q", kubeconfig=kubeconfig).check().stdout == ""
    for crd in CRDS:
        cluster.kubectl("get", "crd", crd).check()
