"""The pre-flight name check: every name the children would get must be one the API server accepts."""

from typing import Any

import pytest
from builders import change, trainingjob

from mlgate_reconciler.preflight import invalid_name


def isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "ml", "uid": "u-2"},
            "spec": {"modelUri": "s3://m/v3", "runtime": "triton", "resources": {"cpu": "2"}}}


def named(name: str) -> dict[str, Any]:
    return change(trainingjob(), "/metadata/name", name)


@pytest.mark.parametrize("name", ["llm", "a" * 54, "a1-b2"])
def test_allow_a_job_name_every_child_can_use(name: str):
    assert invalid_name(named(name)) is None


def test_deny_a_job_name_whose_master_pod_hostname_is_over_63_characters():
    message = invalid_name(named("a" * 55))
    assert message is not None
    assert f"Pod '{'a' * 55}-master-0' (and 1 more) spec.hostname is 64 characters, more than 63" in message
    assert "at most 54 characters" in message


def test_deny_a_job_name_starting_with_a_digit_because_its_service_needs_a_dns_1035_label():
    message = invalid_name(named("1digit"))
    assert message is not None
    assert message.startswith("invalid name: TrainingJob '1digit' cannot name its children: Service '1digit' name "
                              "must be a DNS-1035 label")
    assert "Pod" not in message  # a pod's hostname may start with a digit


def test_deny_a_job_name_with_a_dot_naming_the_hostnames_and_the_service():
    message = invalid_name(named("my.job"))
    assert message is not None
    assert "spec.hostname must be a DNS-1123 label" in message
    assert "Service 'my.job' name must be a DNS-1035 label" in message


def test_the_limit_follows_the_longest_child_name_an_mpi_launcher_allows_fewer_characters():
    job = change(named("a" * 53), "/spec/framework", "mpi")
    message = invalid_name(job)
    assert message is not None
    assert "spec.hostname is 64 characters" in message
    assert "at most 52 characters" in message
    assert invalid_name(change(named("a" * 52), "/spec/framework", "mpi")) is None


def test_an_inference_service_name_is_limited_by_its_service_to_63_characters():
    assert invalid_name(isvc("a" * 63)) is None
    message = invalid_name(isvc("a" * 64))
    assert message is not None
    assert f"Service '{'a' * 64}' name is 64 characters, more than 63" in message


def test_other_kinds_are_not_checked():
    assert invalid_name(change(named("1digit"), "/kind", "PyTorchJob")) is None
