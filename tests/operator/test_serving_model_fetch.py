"""A predictor gets its model as KServe's storage initializer injector gives it (v0.20.0
pkg/webhook/admission/pod/storage_initializer_injector.go): an init container for a download, a read-only claim
for pvc://, credentials only by Secret reference; a URI the shared allowlist refuses is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlgate.rules.storage import DEFAULT_SCHEMES
from mlgate_reconciler.desired_inference import desired_inference_children, inference_problem


def isvc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2"},
            "spec": {"modelUri": "s3://models/sent/v3", "runtime": "triton", **spec}}


def pod(**spec: Any) -> dict[str, Any]:
    (deployment,) = [c for c in desired_inference_children(isvc(**spec)) if c["kind"] == "Deployment"]
    found: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return found


@pytest.mark.parametrize("uri", ["s3://models/sent/v3", "gs://models/sent/v3", "hf://org/sent:main",
                                 "https://acct.blob.core.windows.net/models/sent"])
def test_a_remote_model_is_downloaded_by_the_storage_initializer_into_a_shared_empty_dir(uri):
    spec = pod(modelUri=uri)
    (init,) = spec["initContainers"]
    assert (init["name"], init["image"]) == ("storage-initializer", "kserve/storage-initializer:v0.20.0")
    assert init["args"] == [uri, "/mnt/models"]
    assert init["volumeMounts"] == [{"name": "kserve-provision-location", "mountPath": "/mnt/models"}]
    assert {"name": "kserve-provision-location", "emptyDir": {}} in spec["volumes"]
    assert {"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True} in \
        spec["containers"][0]["volumeMounts"]


def test_a_pvc_model_mounts_the_claim_read_only_at_its_path_without_an_init_container():
    spec = pod(modelUri="pvc://models-claim/sent/v3")
    assert "initContainers" not in spec
    assert {"name": "kserve-pvc-source",
            "persistentVolumeClaim": {"claimName": "models-claim", "readOnly": True}} in spec["volumes"]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "kserve-pvc-source", "mountPath": "/mnt/models", "readOnly": True, "subPath": "sent/v3"}]


def test_a_pvc_model_at_the_claims_root_has_no_sub_path():
    (mount,) = pod(modelUri="pvc://models-claim")["containers"][0]["volumeMounts"]
    assert "subPath" not in mount


def test_credentials_come_from_the_named_secret_and_are_never_written_into_the_deployment():
    spec = pod(storage={"secretName": "s3-creds"})
    (init,) = spec["initContainers"]
    assert init["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert "env" not in init


def test_a_gs_model_reads_the_secret_as_a_mounted_key_file_through_google_application_credentials():
    spec = pod(modelUri="gs://models/sent/v3", storage={"secretName": "gcs-key"})
    (init,) = spec["initContainers"]
    assert init["env"] == [{"name": "GOOGLE_APPLICATION_CREDENTIALS",
                            "value": "/var/secrets/gcloud-application-credentials.json"}]
    assert "envFrom" not in init
    assert {"name": "user-gcp-sa", "mountPath": "/var/secrets/", "readOnly": True} in init["volumeMounts"]
    assert {"name": "user-gcp-sa", "secret": {"secretName": "gcs-key"}} in spec["volumes"]
    assert not any(m["name"] == "user-gcp-sa" for m in spec["containers"][0]["volumeMounts"])  # the server never


def test_without_a_secret_the_init_container_has_no_environment_from_one():
    (init,) = pod()["initContainers"]
    assert "envFrom" not in init


def test_the_init_container_meets_the_restricted_pod_security_standard_by_itself():
    (init,) = pod()["initContainers"]
    assert init["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_the_predictor_no_longer_gets_a_model_uri_variable_nothing_reads():
    assert "MODEL_URI" not in json.dumps(pod())


@pytest.mark.parametrize(("uri", "reason"), [
    ("ftp://models/sent", "uri scheme not allowed"),
    ("file:///models/sent", "uri scheme not allowed"),
    ("oci://registry.local/models/sent:v3", "uri not fetched"),
    ("gcs://models/sent/v3", "uri not fetched"),
    ("az://models/sent/v3", "uri not fetched"),
    ("https://acct.dfs.core.windows.net/models/sent", "uri not fetched"),
])
def test_a_model_uri_the_reconciler_cannot_fetch_is_refused_with_the_field_and_the_reason(uri, reason):
    refusal = inference_problem(isvc(modelUri=uri))
    assert refusal is not None
    assert refusal[0] == "UnsupportedModelUri"
    assert refusal[1].startswith(f"spec.modelUri: {reason}: ")


def test_the_canary_model_uri_is_checked_too():
    refusal = inference_problem(isvc(canaryTrafficPercent=10, canary={"modelUri": "ftp://models/sent/v4"}))
    assert refusal is not None and refusal[1].startswith("spec.canary.modelUri: uri scheme not allowed")


def test_the_reconciler_accepts_the_storage_rules_allowlist_less_only_what_it_cannot_fetch():
    uris = {"s3": "s3://models/m", "gs": "gs://models/m", "pvc": "pvc://claim/m", "hf": "hf://org/m",
            "oci": "oci://registry.local/m:v1", "azure": "https://acct.blob.core.windows.net/container/m"}
    assert sorted(uris) == sorted(DEFAULT_SCHEMES)  # a scheme added to the allowlist needs a row here
    accepted = {s for s, uri in uris.items() if inference_problem(isvc(modelUri=uri)) is None}
    assert accepted == set(DEFAULT_SCHEMES) - {"oci"}


def test_an_unknown_runtime_is_refused_naming_the_configured_ones():
    refusal = inference_problem(isvc(runtime="vllm"))
    assert refusal is not None
    assert refusal == ("UnknownRuntime", "spec.runtime: runtime 'vllm' is not configured; use one of: "
                                         "tensorflow-serving, torchserve, triton (or add it to the reconciler's "
                                         "--runtimes file)")
