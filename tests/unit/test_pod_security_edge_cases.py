"""Pod Security cases that are easy to get wrong, each from one minimal valid pod with one change, judged as
pod-security-admission judges them; and the API server's defaults that change a verdict."""

import pytest
from builders import DELETE, change, pod
from pod_security_helpers import BASELINE, C0, POD_SC, RESTRICTED, SC, findings, violations

# allowed pods that set a profile on the container too, so that the pod-level one is the only change
CONTAINER_SECCOMP = change(pod(), SC + "/seccompProfile", {"type": "RuntimeDefault"})
CONTAINER_APPARMOR = change(pod(), SC + "/appArmorProfile", {"type": "RuntimeDefault"})
USER_NAMESPACE = change(pod(), "/spec/hostUsers", False)
PORTED = change(pod(), C0 + "/ports", [{"containerPort": 29500}])
NO_HOST_NAMESPACES = {"skipChecks": ["hostNamespaces"]}


def test_the_bases_are_allowed():
    for obj in (CONTAINER_SECCOMP, CONTAINER_APPARMOR, USER_NAMESPACE, PORTED):
        assert findings(obj, RESTRICTED) == ()


def test_deny_a_host_port_on_the_second_port():
    obj = change(PORTED, C0 + "/ports/-", {"containerPort": 8080, "hostPort": 8080})
    assert violations(obj, BASELINE) == {(C0 + "/ports/1/hostPort", "hostPort")}


@pytest.mark.parametrize("rule", [BASELINE, RESTRICTED])
def test_deny_a_pod_level_unconfined_seccomp_that_the_container_overrides(rule):
    obj = change(CONTAINER_SECCOMP, POD_SC + "/seccompProfile", {"type": "Unconfined"})
    assert violations(obj, rule) == {(POD_SC + "/seccompProfile/type", "seccompProfile")}


def test_deny_a_pod_level_unconfined_apparmor_that_the_container_overrides():
    obj = change(CONTAINER_APPARMOR, POD_SC + "/appArmorProfile", {"type": "Unconfined"})
    assert violations(obj, BASELINE) == {(POD_SC + "/appArmorProfile/type", "forbidden AppArmor profile")}


def test_deny_a_non_zero_run_as_user_without_run_as_non_root():
    obj = change(pod(), POD_SC + "/runAsNonRoot", DELETE)
    assert obj["spec"]["securityContext"]["runAsUser"] == 1000
    assert violations(obj, RESTRICTED) == {(SC + "/runAsNonRoot", "runAsNonRoot != true")}


def test_deny_a_lower_case_drop_all():
    obj = change(pod(), SC + "/capabilities/drop", ["all"])
    assert violations(obj, RESTRICTED) == {(SC + "/capabilities/drop", "unrestricted capabilities")}


@pytest.mark.parametrize(("ptr", "value"), [
    (SC + "/appArmorProfile", {"type": "Localhost", "localhostProfile": "k8s-train"}),
    ("/metadata/annotations/container.apparmor.security.beta.kubernetes.io~1main", "localhost/k8s-train"),
])
def test_allow_a_localhost_apparmor_profile(ptr, value):
    assert findings(change(pod(), ptr, value), RESTRICTED) == ()


def test_allow_a_selinux_level_set_on_its_own():
    obj = change(pod(), SC + "/seLinuxOptions", {"level": "s0:c123,c456"})
    assert findings(obj, RESTRICTED) == ()


def test_allow_an_unmasked_proc_mount_in_a_user_namespace_under_baseline_only():
    obj = change(USER_NAMESPACE, SC + "/procMount", "Unmasked")
    assert findings(obj, BASELINE) == ()
    assert violations(obj, RESTRICTED) == {(SC + "/procMount", "procMount")}


# --- what the API server stores -----------------------------------------------------------------------------


@pytest.mark.parametrize("volume", [{"name": "scratch"}, {"name": "scratch", "emptyDir": None}])
def test_a_volume_without_a_source_is_an_empty_dir(volume):
    obj = change(pod(), "/spec/volumes", [volume])
    assert findings(obj, RESTRICTED) == ()


def test_a_volume_source_no_table_knows_is_still_refused():
    obj = change(pod(), "/spec/volumes", [{"name": "scratch", "fancyDisk": {"id": "1"}}])
    assert violations(obj, RESTRICTED) == {("/spec/volumes/0", "restricted volume types")}
    (finding,) = findings(obj, RESTRICTED)
    assert finding.detail == 'volume "scratch" uses restricted volume type "unknown"'


def test_host_network_makes_each_container_port_a_host_port():
    obj = change(PORTED, "/spec/hostNetwork", True)
    assert violations(obj, BASELINE, NO_HOST_NAMESPACES) == {(C0 + "/ports/0/hostPort", "hostPort")}
    (finding,) = findings(obj, BASELINE, NO_HOST_NAMESPACES)
    assert finding.detail == 'container "main" uses hostPort 29500'
    assert violations(obj, BASELINE) == {
        (C0 + "/ports/0/hostPort", "hostPort"), ("/spec/hostNetwork", "host namespaces")
    }


def test_host_network_gives_ephemeral_containers_no_host_port():
    debug = {"name": "debug", "image": "registry.example/tool:1", "ports": [{"containerPort": 29500}]}
    obj = change(change(pod(), "/spec/ephemeralContainers", [debug]), "/spec/hostNetwork", True)
    assert findings(obj, BASELINE, NO_HOST_NAMESPACES) == ()
