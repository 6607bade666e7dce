"""The by-hand certificate path (docs/webhook.md, "Install"): `mlgate certs` makes the pair, the overlay
overlays/static-certs/ has the webhook serve it from the Secret, and Helm's certs.mode=secret renders the same
webhook Deployment. The overlay is rendered by the real `kubectl kustomize`, the chart by the real helm."""

from __future__ import annotations

import operator
import re
import subprocess
import sys
from pathlib import Path

from helm_chart import NAMESPACE, REPO, Helm, Obj, by_key, kustomize

OVERLAY = REPO / "overlays" / "static-certs"
DEPLOYMENT = ("Deployment", NAMESPACE, "mlgate-webhook")


def webhook_pod(objects: list[Obj]) -> Obj:
    return by_key(objects)[DEPLOYMENT]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def secret_mount(pod: Obj) -> tuple[str, str]:
    """(the Secret's name, where the webhook container mounts it)."""
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount.get("readOnly") is True
    return volume["secret"]["secretName"], mount["mountPath"]


def test_the_static_certs_overlay_serves_the_secrets_pair_and_registers_nothing() -> None:
    objects = kustomize(OVERLAY)
    pod = webhook_pod(objects)
    args = pod["containers"][0]["args"]
    secret, directory = secret_mount(pod)
    assert secret == "mlgate-webhook-tls"
    assert f"--cert-file={directory}/tls.crt" in args and f"--key-file={directory}/tls.key" in args
    assert not [a for a in args if a.startswith(("--self-managed", "--webhooks-file"))], args
    assert not any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == "mlgate-webhook-configurations"
                   for o in objects)
    assert all(m["mountPath"] != "/etc/mlgate/webhooks" for m in pod["containers"][0]["volumeMounts"])


def test_the_shipped_base_still_manages_its_own_certificates() -> None:
    args = webhook_pod(kustomize())["containers"][0]["args"]
    assert "--self-managed" in args and not any(a.startswith("--cert-file") for a in args)


def test_the_overlay_renders_the_webhook_deployment_of_the_charts_certs_mode_secret(helm: Helm) -> None:
    ours, theirs = webhook_pod(kustomize(OVERLAY)), webhook_pod(helm.render(values={"certs": {"mode": "secret"}}))
    (container,), (chart_container,) = ours["containers"], theirs["containers"]
    assert container["args"] == chart_container["args"]
    by_name = operator.itemgetter("name")
    assert sorted(container["volumeMounts"], key=by_name) == sorted(chart_container["volumeMounts"], key=by_name)
    assert sorted(ours["volumes"], key=by_name) == sorted(theirs["volumes"], key=by_name)


def test_mlgate_certs_prints_the_secret_the_overlay_mounts(tmp_path: Path) -> None:
    out = tmp_path / "certs-out"
    done = subprocess.run([sys.executable, "-m", "mlgate", "certs", "--namespace", NAMESPACE,
                           "--out-dir", str(out), "--patch", str(REPO / "manifests" / "webhooks.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    named = re.search(r"kubectl -n (\S+) create secret tls (\S+) --cert=(\S+) --key=(\S+)", done.stderr)
    assert named, done.stderr
    secret, _ = secret_mount(webhook_pod(kustomize(OVERLAY)))
    assert named.groups() == (NAMESPACE, secret, str(out / "tls.crt"), str(out / "tls.key"))
    assert 'caBundle: ""' not in (out / "webhooks.yaml").read_text(encoding="utf-8")
