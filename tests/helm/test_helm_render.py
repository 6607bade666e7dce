"""`helm lint` and `helm template` of charts/mlgate: with default values the chart renders what
`kubectl kustomize manifests/` renders, but for the deliberate differences listed here (each one tested to
still be a difference); the webhook rules are those of manifests/webhooks.yaml under every values profile;
values reach the objects they name and nothing else."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
from helm_chart import (
    CHART,
    KEPT,
    MANIFESTS,
    NAMESPACE,
    REPO,
    WEBHOOK_CONFIGMAP,
    Helm,
    Key,
    Obj,
    by_key,
    documents,
    kustomize,
    webhooks,
)
from unit.test_webhook_registration import fail_closed_beyond_ml_kinds, hooks

PROFILES = sorted((CHART / "ci").glob("*-values.yaml"))
# Objects kustomize renders and the chart does not, and why.
NOT_RENDERED: dict[Key, str] = {
    ("Namespace", "", NAMESPACE): "Helm creates the release namespace (--create-namespace) and never owns it; "
                                  "NOTES.txt prints the labels manifests/namespace.yaml sets",
}
# Fields that differ on purpose in the objects both render, and why.
FIELD_DIFFERENCES = {
    "metadata.labels": "the chart adds Helm's standard labels (instance, version, managed-by, helm.sh/chart)",
    "CustomResourceDefinition metadata.labels": "Helm never templates crds/: they are byte copies of manifests/crds, "
                                                "without the part-of label kustomize adds",
    "webhooks[].clientConfig.caBundle": "left out while empty, so a CA injected later survives `helm upgrade`",
    "ConfigMap mlgate-webhook-configurations data": "compared parsed: the chart renders it from the values, "
                                                    "kustomize holds webhooks.yaml as written",
}
FAILURE_POLICY_VALUES = {"mlJobs": "ValidatingWebhookConfiguration/ml-jobs.validate.mlgate.dev",
                         "debugContainers": "ValidatingWebhookConfiguration/debug-containers.validate.mlgate.dev"}


def without_deliberate_differences(obj: Obj) -> Obj:
    """The object minus the fields of FIELD_DIFFERENCES (checked on their own below)."""
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("labels", None)
    if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == WEBHOOK_CONFIGMAP:
        obj["data"] = {"webhooks.yaml": [without_deliberate_differences(c)
                                         for c in documents(obj["data"]["webhooks.yaml"])]}
    for hook in obj.get("webhooks", []):
        if not hook["clientConfig"].get("caBundle"):
            hook["clientConfig"].pop("caBundle", None)
    return obj


def compare_with_kustomize(chart: list[Obj], base: list[Obj]) -> list[str]:
    """What differs between the two renders beyond the deliberate differences; [] when nothing does."""
    ours, theirs = by_key(chart), by_key(base)
    wrong = [f"not rendered by the chart: {k}" for k in sorted(theirs.keys() - ours.keys() - NOT_RENDERED.keys())]
    wrong += [f"rendered by the chart only: {k}" for k in sorted(ours.keys() - theirs.keys())]
    wrong += [f"listed as not rendered but rendered: {k}" for k in sorted(NOT_RENDERED.keys() & ours.keys())]
    for k in sorted(ours.keys() & theirs.keys()):
        labels, wanted = ours[k]["metadata"].get("labels") or {}, theirs[k]["metadata"].get("labels") or {}
        if k[0] == "CustomResourceDefinition":
            wanted = {n: v for n, v in wanted.items() if n != "app.kubernetes.io/part-of"}
        wrong += [f"{k}: label {name}={value!r} missing" for name, value in sorted(wanted.items())
                  if labels.get(name) != value]
        want, got = without_deliberate_differences(theirs[k]), without_deliberate_differences(ours[k])
        if want != got:
            wrong.append(f"{k} differs:\n{diff(want, got)}")
    return wrong


def diff(want: Any, got: Any, path: str = "") -> str:
    """The first few paths where two parsed objects differ, for a readable failure."""
    if isinstance(want, dict) and isinstance(got, dict):
        return "".join(diff(want.get(k), got.get(k), f"{path}.{k}") for k in sorted(want.keys() | got.keys())
                       if want.get(k) != got.get(k))
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return "".join(diff(w, g, f"{path}[{i}]") for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g)
    return f"  {path}: kustomize {want!r}, chart {got!r}\n"


def profile(path: Path) -> list[str]:
    return ["--values", str(path)]


# --- lint ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [None, *PROFILES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_passes_strictly_for_every_values_profile(helm: Helm, values: Path | None) -> None:
    args = profile(values) if values else []
    result = helm.run("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *args).check()
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", PROFILES, ids=lambda p: p.name)
def test_every_values_profile_renders_objects_with_names_and_kinds(helm: Helm, values: Path) -> None:
    objects = helm.render(*profile(values))
    assert objects and all(o.get("kind") and o.get("metadata", {}).get("name") for o in objects)


# --- the kustomize base -------------------------------------------------------------------------------------------

def test_default_values_render_what_kustomize_renders_but_for_the_listed_differences(helm: Helm) -> None:
    wrong = compare_with_kustomize(helm.render("--include-crds"), kustomize())
    assert not wrong, "\n".join(wrong)


def test_the_comparison_with_kustomize_sees_a_changed_field_a_lost_label_and_a_missing_object(helm: Helm) -> None:
    chart, base = helm.render("--include-crds"), kustomize()
    (deployment,) = [o for o in chart if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlgate-webhook"]
    deployment["spec"]["template"]["spec"]["containers"][0]["args"].append("--extra")
    deployment["metadata"]["labels"].pop("app.kubernetes.io/part-of")
    chart = [o for o in chart if o["kind"] != "PodDisruptionBudget"]
    wrong = compare_with_kustomize(chart, base)
    assert any("Deployment" in w and "args" in w and "--extra" in w for w in wrong), wrong
    assert any("label app.kubernetes.io/part-of" in w for w in wrong), wrong
    assert sum(w.startswith("not rendered by the chart: ('PodDisruptionBudget'") for w in wrong) == 2, wrong


def test_every_listed_difference_is_still_a_difference(helm: Helm) -> None:
    chart, base = by_key(helm.render("--include-crds")), by_key(kustomize())
    assert NOT_RENDERED.keys() <= base.keys() and not NOT_RENDERED.keys() & chart.keys()
    deployment = ("Deployment", NAMESPACE, "mlgate-webhook")
    assert chart[deployment]["metadata"]["labels"] != base[deployment]["metadata"]["labels"]
    ours, theirs = webhooks(chart.values()), webhooks(base.values())
    assert all(h["clientConfig"].get("caBundle") == "" for h in theirs.values())
    assert all("caBundle" not in h["clientConfig"] for h in ours.values())
    configmap = ("ConfigMap", NAMESPACE, WEBHOOK_CONFIGMAP)
    assert chart[configmap]["data"] != base[configmap]["data"]
    crd = ("CustomResourceDefinition", "", "trainingjobs.mlgate.dev")
    assert "app.kubernetes.io/part-of" not in (chart[crd]["metadata"].get("labels") or {})
    assert base[crd]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mlgate"
    assert set(FIELD_DIFFERENCES) == {"metadata.labels", "CustomResourceDefinition metadata.labels",
                                      "webhooks[].clientConfig.caBundle",
                                      "ConfigMap mlgate-webhook-configurations data"}


def test_the_cert_manager_profile_renders_what_the_documented_overlay_renders(helm: Helm, tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "cert-manager.md").read_text(), re.S)
    kustomization, certificates = blocks
    base = os.path.relpath(MANIFESTS, tmp_path)  # kustomize wants the base as a relative path
    (tmp_path / "kustomization.yaml").write_text(kustomization.replace("../../manifests", base))
    (tmp_path / "certificates.yaml").write_text(certificates)
    chart = helm.render("--include-crds", *profile(CHART / "ci" / "cert-manager-values.yaml"))
    wrong = compare_with_kustomize(chart, kustomize(tmp_path))
    assert not wrong, "\n".join(wrong)
    assert {o["kind"] for o in chart} >= {"Issuer", "Certificate"}


# --- the webhooks ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [None, *PROFILES], ids=lambda p: p.name if p else "defaults")
def test_every_profile_registers_the_webhook_rules_of_the_manifests(helm: Helm, values: Path | None) -> None:
    ours = webhooks(helm.render(*(profile(values) if values else []), namespace="ml-admission"))
    theirs = webhooks(documents((MANIFESTS / "webhooks.yaml").read_text(encoding="utf-8")))
    assert list(ours) == list(theirs)
    for name, hook in theirs.items():
        assert {f: ours[name].get(f) for f in KEPT} == {f: hook.get(f) for f in KEPT}, name
        assert ours[name]["clientConfig"]["service"] == {**hook["clientConfig"]["service"], "namespace": "ml-admission"}
        if name not in FAILURE_POLICY_VALUES.values():
            assert ours[name]["failurePolicy"] == hook["failurePolicy"], name


def test_only_the_webhooks_the_manifests_let_fail_closed_take_a_failure_policy_from_the_values(helm: Helm) -> None:
    manifest = documents((MANIFESTS / "webhooks.yaml").read_text(encoding="utf-8"))
    may_fail_closed = set()
    for kind, hook in hooks(manifest):
        doctored = copy.deepcopy(manifest)
        for _, other in hooks(doctored):
            if other["name"] == hook["name"]:
                other["failurePolicy"] = "Fail"
        if not fail_closed_beyond_ml_kinds(doctored):
            may_fail_closed.add(f"{kind}/{hook['name']}")
    assert may_fail_closed == set(FAILURE_POLICY_VALUES.values())

    default = webhooks(helm.render())
    opened = webhooks(helm.render(values={"webhook": {"failurePolicy": dict.fromkeys(FAILURE_POLICY_VALUES,
                                                                                     "Ignore")}}))
    changed = {name for name in default if default[name]["failurePolicy"] != opened[name]["failurePolicy"]}
    assert changed == may_fail_closed
    assert {opened[name]["failurePolicy"] for name in changed} == {"Ignore"}


def test_namespace_exclusions_and_selector_terms_come_from_the_values(helm: Helm) -> None:
    extra = {"key": "team.example/tier", "operator": "NotIn", "values": ["sandbox"]}
    rendered = webhooks(helm.render(namespace="ml-admission", values={"webhook": {
        "excludeNamespaces": ["kube-system", "ml-admission", "monitoring"],
        "namespaceSelector": {"matchLabels": {"team.example/ml": "true"}, "matchExpressions": [extra]}}}))
    for hook in rendered.values():
        assert hook["namespaceSelector"] == {
            "matchLabels": {"team.example/ml": "true"},
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", "ml-admission", "monitoring"]},  # the release namespace only once
                {"key": "mlgate.dev/ignore", "operator": "NotIn", "values": ["true"]}, extra]}


def test_the_release_namespace_is_never_intercepted_even_when_the_exclusions_leave_it_out(helm: Helm) -> None:
    for hook in webhooks(helm.render(namespace="ml-admission", values={"webhook": {"excludeNamespaces": []}})).values():
        (by_name,) = [e for e in hook["namespaceSelector"]["matchExpressions"]
                      if e["key"] == "kubernetes.io/metadata.name"]
        assert by_name == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ml-admission"]}


@pytest.mark.parametrize("mode", ["selfManaged", "certManager", "secret"])
def test_helm_applies_the_webhook_configurations_only_in_certs_mode_secret(helm: Helm, mode: str) -> None:
    objects = helm.render(values={"certs": {"mode": mode}})
    applied = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
    (container,) = by_key(objects)[("Deployment", NAMESPACE, "mlgate-webhook")]["spec"]["template"]["spec"][
        "containers"]
    registers = "--self-managed" in container["args"]
    in_configmap = any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == WEBHOOK_CONFIGMAP for o in objects)
    assert (len(applied), registers, in_configmap) == ((2, False, False) if mode == "secret" else (0, True, True))
    assert ("--ca-file=/etc/mlgate/tls/ca.crt" in container["args"]) == (mode == "certManager")


def test_a_ca_bundle_from_the_values_is_in_every_webhook(helm: Helm) -> None:
    rendered = webhooks(helm.render(values={"certs": {"mode": "secret", "caBundle": "Y2EtcGVt"}}))
    assert {h["clientConfig"]["caBundle"] for h in rendered.values()} == {"Y2EtcGVt"}


# --- the other values ---------------------------------------------------------------------------------------------

def test_the_custom_profile_reaches_both_deployments_in_another_namespace(helm: Helm) -> None:
    text = helm.template(*profile(CHART / "ci" / "custom-values.yaml"), namespace="ml-admission").check().stdout
    assert NAMESPACE not in text
    objects = by_key(documents(text))
    webhook = objects[("Deployment", "ml-admission", "mlgate-webhook")]["spec"]
    pod = webhook["template"]["spec"]
    (container,) = pod["containers"]
    assert webhook["replicas"] == 3
    assert container["image"] == "registry.example/platform/mlgate:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always" and "--log-level=debug" in container["args"]
    assert container["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"},
                                      "limits": {"cpu": "2", "memory": "512Mi"}}
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert "nodeAffinity" in pod["affinity"]
    assert {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"] == "mlgate-serving"
    reconciler = objects[("Deployment", "ml-admission", "mlgate-reconciler")]["spec"]
    assert reconciler["replicas"] == 1
    assert reconciler["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert ("PodDisruptionBudget", "ml-admission", "mlgate-reconciler") not in objects  # one replica
    binding = objects[("ClusterRoleBinding", "", "mlgate-webhook")]
    assert binding["subjects"][0]["namespace"] == "ml-admission"


def test_policies_come_from_the_shipped_set_and_the_values(helm: Helm) -> None:
    site = "apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata: {name: site}\n"
    shipped = {p.name: p.read_text(encoding="utf-8") for p in (REPO / "policies").glob("*.yaml")}

    def data(values: dict[str, Any]) -> dict[str, str]:
        (configmap,) = [o for o in helm.render(values=values) if o["kind"] == "ConfigMap"
                        and o["metadata"]["name"] == "mlgate-policies"]
        return configmap["data"]  # type: ignore[no-any-return]

    assert data({}) == shipped
    assert data({"policies": {"extra": {"site.yaml": site}}}) == {**shipped, "site.yaml": site}
    assert data({"policies": {"shipped": False, "extra": {"site.yaml": site}}}) == {"site.yaml": site}


def test_without_the_reconciler_and_with_one_replica_only_the_webhook_is_rendered(helm: Helm) -> None:
    objects = helm.render(*profile(CHART / "ci" / "webhook-only-values.yaml"))
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert not any("reconciler" in name for _, name in names)
    assert ("Deployment", "mlgate-webhook") in names
    assert not any(kind == "PodDisruptionBudget" for kind, _ in names)  # one replica: a PDB would block drains
