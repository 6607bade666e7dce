"""The kustomize base: it renders, its webhooks are fenced in, its RBAC only reads, its Pod is locked down."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from golden import check_golden

from mlgate.loading.policies import default_policy_dir

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
POLICY_CONFIGMAP = MANIFESTS / "policies-configmap.yaml"
EXCLUDED = {"kubernetes.io/metadata.name": ["kube-system", "mlgate-system"]}


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def webhooks() -> list[tuple[str, dict]]:
    return [(doc["kind"], hook) for doc in documents("webhooks.yaml") for hook in doc["webhooks"]]


def render_policy_configmap() -> str:
    lines = ["# Generated from policies/ by tests/webhook/test_webhook_manifests.py (MLGATE_UPDATE_GOLDEN=1).",
             "# The webhook reloads these files when the ConfigMap changes.",
             "apiVersion: v1", "kind: ConfigMap", "metadata:", "  name: mlgate-policies",
             "  namespace: mlgate-system", "  labels:", "    app.kubernetes.io/name: mlgate-webhook", "data:"]
    for path in sorted(default_policy_dir().glob("*.yaml")):
        lines.append(f"  {path.name}: |")
        lines.extend(f"    {line}".rstrip() for line in path.read_text().splitlines())
    return "\n".join(lines) + "\n"


def test_the_policy_configmap_holds_the_shipped_policies():
    rendered = render_policy_configmap()
    check_golden(POLICY_CONFIGMAP, rendered)
    data = yaml.safe_load(rendered)["data"]
    assert data == {p.name: p.read_text() for p in default_policy_dir().glob("*.yaml")}


def test_every_webhook_has_the_safe_settings():
    for kind, hook in webhooks():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] == 5
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["failurePolicy"] in ("Fail", "Ignore")
        assert hook["clientConfig"]["service"]["namespace"] == "mlgate-system"
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "IfNeeded"
            assert hook["clientConfig"]["service"]["path"] == "/mutate"
        else:
            assert hook["clientConfig"]["service"]["path"] == "/validate"


def test_every_webhook_skips_system_namespaces_and_opted_out_ones():
    for _, hook in webhooks():
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": EXCLUDED["kubernetes.io/metadata.name"]} in expressions
        assert {"key": "mlgate.dev/ignore", "operator": "NotIn", "values": ["true"]} in expressions


def test_pods_are_intercepted_only_with_an_object_selector_for_job_owned_pods():
    for _, hook in webhooks():
        resources = {r for rule in hook["rules"] for r in rule["resources"]}
        if "pods" in resources:
            assert resources == {"pods"}
            assert hook["failurePolicy"] == "Ignore"
            (expression,) = hook["objectSelector"]["matchExpressions"]
            assert expression["operator"] == "Exists"
            assert expression["key"] in ("training.kubeflow.org/job-name", "mlgate.dev/job-name")


def test_the_ml_kinds_are_matched():
    matched = {(group, resource) for _, hook in webhooks() for rule in hook["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    for kind in ("trainingjobs", "inferenceservices"):
        assert ("mlgate.dev", kind) in matched
    for kind in ("pytorchjobs", "tfjobs", "xgboostjobs", "mpijobs"):
        assert ("kubeflow.org", kind) in matched
    assert ("batch", "jobs") in matched
    assert {("mlgate.dev", "mlpolicies"), ("mlgate.dev", "clustermlpolicies")} <= matched  # refused if broken


def test_rbac_only_reads_what_the_caches_watch_writes_policy_status_and_creates_events():
    (role,) = [d for d in documents("rbac.yaml")
               if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "mlgate-webhook"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    from mlgate_webhook.kube import EXCEPTIONS, FACTS, POLICIES

    def group_and_resource(path: str) -> tuple[str, str]:  # /api/v1/nodes, /apis/<group>/<version>/<plural>
        parts = path.strip("/").split("/")
        return ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])

    wanted = {group_and_resource(p) for p in (*FACTS.values(), *POLICIES.values(), *EXCEPTIONS.values())}
    assert ("trainer.kubeflow.org", "clustertrainingruntimes") in wanted and ("", "nodes") in wanted
    status_writes = {(g, r + "/status", "patch")
                     for g, r in map(group_and_resource, (*POLICIES.values(), *EXCEPTIONS.values()))}
    events = {("events.k8s.io", "events", "create")}  # mlgate_webhook.events: denials a controller received
    registration = {("admissionregistration.k8s.io", f"{kind}webhookconfigurations", verb)  # --self-managed
                    for kind in ("validating", "mutating") for verb in ("create", "get", "update")}
    owner = {("rbac.authorization.k8s.io", "clusterroles", "get")}
    assert granted == ({(g, r, v) for g, r in wanted for v in ("get", "list", "watch")} | status_writes | events
                       | registration | owner)


def test_the_deployment_is_locked_down_and_probed():
    (deployment,) = documents("deployment.yaml")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # on the metrics port's threads, not behind admission work on the TLS port's loop
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "--metrics-port=8080" in container["args"]
    assert "--policies=/etc/mlgate/policies" in container["args"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["policies"]["configMap"]["name"] == "mlgate-policies"
    (pdb,) = documents("pdb.yaml")
    assert pdb["spec"]["minAvailable"] == 1


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_kustomize_renders_the_base():
    result = subprocess.run(["kubectl", "kustomize", str(MANIFESTS)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
                 "PodDisruptionBudget", "Service"):
        assert kind in kinds
    # registered by the webhook once it runs (--self-managed), never applied before its Pods exist
    assert not [k for k in kinds if k.endswith("WebhookConfiguration")]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_the_cert_manager_overlay_in_the_docs_serves_its_certificate_and_registers_its_ca(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "cert-manager.md").read_text(), re.S)
    kustomization, certificates = blocks
    assert "../../manifests" in kustomization
    base = os.path.relpath(MANIFESTS, tmp_path)  # kustomize wants the base as a relative path
    (tmp_path / "kustomization.yaml").write_text(kustomization.replace("../../manifests", base))
    (tmp_path / "certificates.yaml").write_text(certificates)
    result = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert not [d for d in rendered if d["kind"].endswith("WebhookConfiguration")]  # the webhook registers them
    (serving,) = [d for d in rendered if d["kind"] == "Certificate" and d["metadata"]["name"] == "mlgate-webhook-tls"]
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlgate-webhook"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == serving["spec"]["secretName"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {"--self-managed", f"--ca-file={mounts['tls']}/ca.crt", f"--cert-file={mounts['tls']}/tls.crt",
            f"--key-file={mounts['tls']}/tls.key"} <= set(container["args"])
    assert serving["spec"]["dnsNames"][-1] == "mlgate-webhook.mlgate-system.svc.cluster.local"
