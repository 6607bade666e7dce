import typing

import pytest
from builders import DELETE, change, decide, job, pod, pytorchjob, trainingjob
from pod_security_helpers import APPARMOR_MAIN, BASELINE, C0, POD_SC, RESTRICTED, SC, findings, load_errors, violations

from mlgate.model.results import Outcome
from mlgate.rules.pod_security_checks import CHECKS, RESTRICTED_VOLUMES, CheckID, VolumeType

# check ID, rule, field changed in pod(), value, path of the finding (None: the changed field), reason
DENY = [
    ("windowsHostProcess", BASELINE, POD_SC + "/windowsOptions/hostProcess", True, None, "hostProcess"),
    ("windowsHostProcess", BASELINE, SC + "/windowsOptions/hostProcess", True, None, "hostProcess"),
    ("hostNamespaces", BASELINE, "/spec/hostNetwork", True, None, "host namespaces"),
    ("hostNamespaces", BASELINE, "/spec/hostPID", True, None, "host namespaces"),
    ("hostNamespaces", BASELINE, "/spec/hostIPC", True, None, "host namespaces"),
    ("privileged", BASELINE, SC + "/privileged", True, None, "privileged"),
    ("capabilities_baseline", BASELINE, SC + "/capabilities/add", ["NET_RAW"], SC + "/capabilities/add/0",
     "non-default capabilities"),
    ("hostPathVolumes", BASELINE, "/spec/volumes", [{"name": "data", "hostPath": {"path": "/data"}}],
     "/spec/volumes/0/hostPath", "hostPath volumes"),
    ("hostPorts", BASELINE, C0 + "/ports", [{"containerPort": 8080, "hostPort": 8080}], C0 + "/ports/0/hostPort",
     "hostPort"),
    ("hostProbesAndHostLifecycle", BASELINE, C0 + "/livenessProbe", {"httpGet": {"host": "10.0.0.1", "port": 80}},
     C0 + "/livenessProbe/httpGet/host", "probe or lifecycle host"),
    ("hostProbesAndHostLifecycle", BASELINE, C0 + "/lifecycle", {"preStop": {"tcpSocket": {"host": "db", "port": 1}}},
     C0 + "/lifecycle/preStop/tcpSocket/host", "probe or lifecycle host"),
    ("appArmorProfile", BASELINE, SC + "/appArmorProfile", {"type": "Unconfined"}, SC + "/appArmorProfile/type",
     "forbidden AppArmor profile"),
    ("appArmorProfile", BASELINE, POD_SC + "/appArmorProfile", {"type": "Unconfined"},
     POD_SC + "/appArmorProfile/type", "forbidden AppArmor profile"),
    ("appArmorProfile", BASELINE, APPARMOR_MAIN, "unconfined", None, "forbidden AppArmor profile"),
    ("seLinuxOptions", BASELINE, SC + "/seLinuxOptions", {"type": "spc_t"}, SC + "/seLinuxOptions/type",
     "seLinuxOptions"),
    ("seLinuxOptions", BASELINE, POD_SC + "/seLinuxOptions", {"user": "root"}, POD_SC + "/seLinuxOptions/user",
     "seLinuxOptions"),
    ("seLinuxOptions", BASELINE, SC + "/seLinuxOptions", {"role": "sysadm_r"}, SC + "/seLinuxOptions/role",
     "seLinuxOptions"),
    ("procMount", BASELINE, SC + "/procMount", "Unmasked", None, "procMount"),
    ("seccompProfile_baseline", BASELINE, POD_SC + "/seccompProfile", {"type": "Unconfined"},
     POD_SC + "/seccompProfile/type", "seccompProfile"),
    ("sysctls", BASELINE, POD_SC + "/sysctls", [{"name": "kernel.msgmax", "value": "65536"}],
     POD_SC + "/sysctls/0/name", "forbidden sysctls"),
    ("restrictedVolumes", RESTRICTED, "/spec/volumes", [{"name": "data", "nfs": {"server": "nas", "path": "/"}}],
     "/spec/volumes/0/nfs", "restricted volume types"),
    ("allowPrivilegeEscalation", RESTRICTED, SC + "/allowPrivilegeEscalation", DELETE, None,
     "allowPrivilegeEscalation != false"),
    ("allowPrivilegeEscalation", RESTRICTED, SC + "/allowPrivilegeEscalation", True, None,
     "allowPrivilegeEscalation != false"),
    ("runAsNonRoot", RESTRICTED, POD_SC + "/runAsNonRoot", False, None, "runAsNonRoot != true"),
    ("runAsNonRoot", RESTRICTED, SC + "/runAsNonRoot", False, None, "runAsNonRoot != true"),
    ("runAsNonRoot", RESTRICTED, POD_SC + "/runAsNonRoot", DELETE, SC + "/runAsNonRoot", "runAsNonRoot != true"),
    ("runAsUser", RESTRICTED, POD_SC + "/runAsUser", 0, None, "runAsUser=0"),
    ("runAsUser", RESTRICTED, SC + "/runAsUser", 0, None, "runAsUser=0"),
    ("seccompProfile_restricted", RESTRICTED, POD_SC + "/seccompProfile", DELETE, SC + "/seccompProfile/type",
     "seccompProfile"),
    ("seccompProfile_restricted", RESTRICTED, SC + "/seccompProfile", {"type": "Unconfined"},
     SC + "/seccompProfile/type", "seccompProfile"),
    ("capabilities_restricted", RESTRICTED, SC + "/capabilities/drop", [], None, "unrestricted capabilities"),
    ("capabilities_restricted", RESTRICTED, SC + "/capabilities/add", ["CHOWN"], SC + "/capabilities/add/0",
     "unrestricted capabilities"),
]

# check ID, rule, field changed in pod(), an allowed value
ALLOW = [
    ("windowsHostProcess", BASELINE, SC + "/windowsOptions/hostProcess", False),
    ("hostNamespaces", BASELINE, "/spec/hostNetwork", False),
    ("privileged", BASELINE, SC + "/privileged", False),
    ("capabilities_baseline", BASELINE, SC + "/capabilities/add", ["CHOWN", "NET_BIND_SERVICE", "SYS_CHROOT"]),
    ("hostPathVolumes", BASELINE, "/spec/volumes", [{"name": "scratch", "emptyDir": {}}]),
    ("hostPorts", BASELINE, C0 + "/ports", [{"containerPort": 8080, "hostPort": 0}, {"containerPort": 23456}]),
    ("hostProbesAndHostLifecycle", BASELINE, C0 + "/readinessProbe", {"httpGet": {"host": "", "port": 80}}),
    ("appArmorProfile", BASELINE, SC + "/appArmorProfile", {"type": "RuntimeDefault"}),
    ("appArmorProfile", BASELINE, POD_SC + "/appArmorProfile", {"type": "Localhost", "localhostProfile": "ml"}),
    ("appArmorProfile", BASELINE, APPARMOR_MAIN, "localhost/ml-profile"),
    ("appArmorProfile", BASELINE, APPARMOR_MAIN, "runtime/default"),
    ("seLinuxOptions", BASELINE, SC + "/seLinuxOptions", {"type": "container_t", "level": "s0:c123,c456"}),
    ("procMount", BASELINE, SC + "/procMount", "Default"),
    ("seccompProfile_baseline", BASELINE, SC + "/seccompProfile", {"type": "Localhost", "localhostProfile": "a.json"}),
    ("sysctls", BASELINE, POD_SC + "/sysctls", [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]),
    ("restrictedVolumes", RESTRICTED, "/spec/volumes", [
        {"name": v, k: {}} for v, k in [("a", "configMap"), ("b", "csi"), ("c", "downwardAPI"), ("d", "emptyDir"),
                                        ("e", "ephemeral"), ("f", "image"), ("g", "persistentVolumeClaim"),
                                        ("h", "projected"), ("i", "secret")]
    ]),
    ("allowPrivilegeEscalation", RESTRICTED, SC + "/allowPrivilegeEscalation", False),
    ("runAsNonRoot", RESTRICTED, SC + "/runAsNonRoot", True),
    ("runAsUser", RESTRICTED, POD_SC + "/runAsUser", 1000),
    ("seccompProfile_restricted", RESTRICTED, SC + "/seccompProfile", {"type": "RuntimeDefault"}),
    ("capabilities_restricted", RESTRICTED, SC + "/capabilities/add", ["NET_BIND_SERVICE"]),
    ("procMount_restricted", RESTRICTED, SC + "/procMount", "Default"),
]


def test_the_builders_are_restricted_compliant():
    for obj in (pod(), job(), pytorchjob(), trainingjob()):
        assert findings(obj, RESTRICTED) == ()
        assert findings(obj, BASELINE) == ()


@pytest.mark.parametrize(("check_id", "rule", "ptr", "value", "path", "reason"), DENY, ids=[d[0] for d in DENY])
def test_deny_each_forbidden_value_at_its_own_field(check_id, rule, ptr, value, path, reason):
    obj = change(pod(), ptr, value)
    assert violations(obj, rule) == {(path or ptr, reason)}
    if rule == BASELINE:  # restricted denies it too, possibly through the check that overrides this one
        assert (path or ptr) in {p for p, _ in violations(obj, RESTRICTED)}


@pytest.mark.parametrize(("check_id", "rule", "ptr", "value"), ALLOW, ids=[a[0] for a in ALLOW])
def test_allow_each_permitted_value(check_id, rule, ptr, value):
    assert findings(change(pod(), ptr, value), rule) == ()


def test_every_psa_check_has_a_passing_and_a_failing_case():
    ids = {c.id for c in CHECKS}
    assert ids == set(typing.get_args(CheckID))
    assert {d[0] for d in DENY} | {"procMount_restricted"} == ids  # procMount_restricted: see the hostUsers tests
    assert {a[0] for a in ALLOW} == ids


def test_volume_type_exceptions_cover_every_restricted_type_but_hostpath():
    assert set(typing.get_args(VolumeType)) == set(RESTRICTED_VOLUMES) - {"hostPath"}


def test_details_follow_pod_security_admission_wording():
    obj = change(pod(), SC + "/allowPrivilegeEscalation", DELETE)
    (finding,) = findings(obj, RESTRICTED)
    assert finding.detail == 'container "main" must set securityContext.allowPrivilegeEscalation=false'
    (finding,) = findings(change(pod(), SC + "/capabilities/drop", ["NET_RAW"]), RESTRICTED)
    assert finding.detail == 'container "main" must set securityContext.capabilities.drop=["ALL"]'
    (finding,) = findings(change(pod(), POD_SC + "/runAsNonRoot", DELETE), RESTRICTED)
    assert finding.detail == 'pod or container "main" must set securityContext.runAsNonRoot=true'
    (finding,) = findings(change(pod(), C0 + "/ports", [{"containerPort": 80, "hostPort": 80}]), BASELINE)
    assert finding.detail == 'container "main" uses hostPort 80'


# --- init, ephemeral and regular containers alike ----------------------------------------------------------


def _extra(name, security_context):
    return [{"name": name, "image": "registry.example/tool:1", "securityContext": security_context}]


def test_deny_privileged_init_container():
    obj = change(pod(), "/spec/initContainers", _extra("setup", {"privileged": True}))
    (finding,) = findings(obj, BASELINE)
    assert finding.path == "/spec/initContainers/0/securityContext/privileged"
    assert finding.detail == 'init container "setup" must not set securityContext.privileged=true'


def test_deny_ephemeral_container_without_restricted_settings():
    obj = change(pod(), "/spec/ephemeralContainers", _extra("debug", {}))
    assert violations(obj, RESTRICTED) == {
        ("/spec/ephemeralContainers/0/securityContext/allowPrivilegeEscalation", "allowPrivilegeEscalation != false"),
        ("/spec/ephemeralContainers/0/securityContext/capabilities/drop", "unrestricted capabilities"),
    }


def test_allow_hardened_init_and_ephemeral_containers():
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    obj = change(pod(), "/spec/initContainers", _extra("setup", hardened))
    assert findings(change(obj, "/spec/ephemeralContainers", _extra("debug", hardened)), RESTRICTED) == ()


# --- pod level versus container level ----------------------------------------------------------------------


def test_allow_run_as_non_root_set_only_on_every_container():
    obj = change(pod(), POD_SC, {"seccompProfile": {"type": "RuntimeDefault"}})
    assert findings(change(obj, SC + "/runAsNonRoot", True), RESTRICTED) == ()
    assert violations(obj, RESTRICTED) == {(SC + "/runAsNonRoot", "runAsNonRoot != true")}


def test_deny_container_run_as_non_root_false_even_when_the_pod_says_true():
    assert violations(change(pod(), SC + "/runAsNonRoot", False), RESTRICTED) == {
        (SC + "/runAsNonRoot", "runAsNonRoot != true")
    }


def test_allow_seccomp_set_only_on_the_container():
    obj = change(pod(), POD_SC + "/seccompProfile", DELETE)
    assert findings(change(obj, SC + "/seccompProfile", {"type": "RuntimeDefault"}), RESTRICTED) == ()


def test_baseline_allows_unset_seccomp_and_run_as_non_root():
    obj = change(pod(), POD_SC, {})
    assert findings(change(obj, SC, {}), BASELINE) == ()


def test_restricted_reports_only_the_restricted_variant_of_an_overridden_check():
    assert violations(change(pod(), SC + "/capabilities/add", ["SYS_ADMIN"]), RESTRICTED) == {
        (SC + "/capabilities/add/0", "unrestricted capabilities")
    }
    volume = [{"name": "data", "hostPath": {"path": "/data"}}]
    assert violations(change(pod(), "/spec/volumes", volume), RESTRICTED) == {
        ("/spec/volumes/0/hostPath", "restricted volume types")
    }


def _sysctl(name):
    return change(pod(), POD_SC + "/sysctls", [{"name": name, "value": "1"}])


# --- exceptions --------------------------------------------------------------------------------------------

IPC_LOCK = change(pod(), SC + "/capabilities/add", ["IPC_LOCK"])


def test_capability_exception_allows_ipc_lock_for_rdma():
    params = {"exceptions": {"capabilities": ["IPC_LOCK"]}}
    assert findings(IPC_LOCK, RESTRICTED, params) == ()
    assert findings(IPC_LOCK, BASELINE, params) == ()
    assert violations(IPC_LOCK, RESTRICTED) == {(SC + "/capabilities/add/0", "unrestricted capabilities")}


def test_capability_exception_still_requires_drop_all():
    obj = change(IPC_LOCK, SC + "/capabilities/drop", DELETE)
    assert violations(obj, RESTRICTED, {"exceptions": {"capabilities": ["IPC_LOCK"]}}) == {
        (SC + "/capabilities/drop", "unrestricted capabilities")
    }


def test_capability_exception_allows_only_the_named_capability():
    obj = change(pod(), SC + "/capabilities/add", ["IPC_LOCK", "SYS_ADMIN"])
    assert violations(obj, RESTRICTED, {"exceptions": {"capabilities": ["IPC_LOCK"]}}) == {
        (SC + "/capabilities/add/1", "unrestricted capabilities")
    }


def test_capability_exception_does_not_allow_privileged():
    obj = change(IPC_LOCK, SC + "/privileged", True)
    params = {"exceptions": {"capabilities": ["IPC_LOCK"]}}
    assert violations(obj, BASELINE, params) == {(SC + "/privileged", "privileged")}


def _host_path(path):
    return change(pod(), "/spec/volumes", [{"name": "rdma", "hostPath": {"path": path}}])


@pytest.mark.parametrize(("path", "allowed"), [
    ("/dev/infiniband", True),
    ("/dev/infiniband/uverbs0", True),
    ("/dev/infiniband/", True),
    ("/dev/infiniband2", False),
    ("/dev/infiniband/../../etc", False),
    ("/dev", False),
])
def test_host_path_prefix_exception_allows_only_paths_under_the_prefix(path, allowed):
    params = {"exceptions": {"hostPathPrefixes": ["/dev/infiniband"]}}
    for rule in (BASELINE, RESTRICTED):
        assert (findings(_host_path(path), rule, params) == ()) is allowed
        assert findings(_host_path(path), rule) != ()


def test_sysctl_exception_allows_only_the_named_sysctl():
    params = {"exceptions": {"sysctls": ["kernel.msgmax"]}}
    assert findings(_sysctl("kernel.msgmax"), BASELINE, params) == ()
    assert findings(_sysctl("kernel.msgmnb"), BASELINE, params) != ()


def test_volume_type_exception_allows_nfs_datasets_under_restricted():
    obj = change(pod(), "/spec/volumes", [{"name": "data", "nfs": {"server": "nas", "path": "/datasets"}}])
    assert findings(obj, RESTRICTED, {"exceptions": {"volumeTypes": ["nfs"]}}) == ()
    assert findings(obj, RESTRICTED, {"exceptions": {"volumeTypes": ["cephfs"]}}) != ()


VALIDATOR = change(pod(), "/spec/initContainers", _extra("nvidia-driver-validation", {
    "privileged": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
}))


def test_container_exception_skips_only_the_named_checks_for_the_named_container():
    params = {"exceptions": {"containers": [{"name": "nvidia-driver-validation", "checks": ["privileged"]}]}}
    assert findings(VALIDATOR, RESTRICTED, params) == ()
    assert findings(VALIDATOR, RESTRICTED) != ()
    escalating = change(VALIDATOR, "/spec/initContainers/0/securityContext/allowPrivilegeEscalation", True)
    assert {f.reason for f in findings(escalating, RESTRICTED, params)} == {"allowPrivilegeEscalation != false"}
    other = change(VALIDATOR, SC + "/privileged", True)
    assert violations(other, RESTRICTED, params) == {(SC + "/privileged", "privileged")}


def test_bare_container_name_skips_container_checks_but_not_pod_checks():
    params = {"exceptions": {"containers": ["nvidia-driver-validation"]}}
    escalating = change(VALIDATOR, "/spec/initContainers/0/securityContext", {"privileged": True})
    assert findings(escalating, RESTRICTED, params) == ()
    assert violations(change(escalating, "/spec/hostNetwork", True), RESTRICTED, params) == {
        ("/spec/hostNetwork", "host namespaces")
    }


def test_container_exception_covers_that_containers_apparmor_annotation():
    obj = change(pod(), APPARMOR_MAIN, "unconfined")

    def exempt(name):
        return {"exceptions": {"containers": [{"name": name, "checks": ["appArmorProfile"]}]}}

    assert findings(obj, BASELINE, exempt("main")) == ()
    assert findings(obj, BASELINE, exempt("other")) != ()


def test_skip_checks_leaves_out_only_the_named_check():
    obj = change(pod(), C0 + "/ports", [{"containerPort": 80, "hostPort": 80}])
    assert findings(obj, BASELINE, {"skipChecks": ["hostPorts"]}) == ()
    assert findings(change(obj, SC + "/privileged", True), BASELINE, {"skipChecks": ["hostPorts"]}) != ()


def test_skipping_a_restricted_override_brings_back_the_baseline_check():
    params = {"skipChecks": ["capabilities_restricted"]}
    assert violations(change(pod(), SC + "/capabilities/add", ["SYS_ADMIN"]), RESTRICTED, params) == {
        (SC + "/capabilities/add/0", "non-default capabilities")
    }
    assert findings(change(pod(), SC + "/capabilities/add", ["CHOWN"]), RESTRICTED, params) == ()


@pytest.mark.parametrize(("params", "rule", "where"), [
    ({"skipChecks": ["hostPort"]}, RESTRICTED, "params.skipChecks[0]: input should be"),
    ({"skipChecks": ["runAsNonRoot"]}, BASELINE, "params.skipChecks: value error, 'runAsNonRoot' is a restricted"),
    ({"exceptions": {"capabilities": ["ALL"]}}, RESTRICTED, "exceptions.capabilities[0]: value error"),
    ({"exceptions": {"capabilities": ["cap_ipc_lock"]}}, RESTRICTED, "exceptions.capabilities[0]: string should"),
    ({"exceptions": {"hostPathPrefixes": ["/"]}}, BASELINE, "exceptions.hostPathPrefixes[0]: value error"),
    ({"exceptions": {"hostPathPrefixes": ["dev/infiniband"]}}, BASELINE, "exceptions.hostPathPrefixes[0]: value"),
    ({"exceptions": {"hostPathPrefixes": ["/dev/../etc"]}}, BASELINE, "exceptions.hostPathPrefixes[0]: value"),
    ({"exceptions": {"volumeTypes": ["nfs"]}}, BASELINE, "params.exceptions: value error, volumeTypes only"),
    ({"exceptions": {"volumeTypes": ["hostPath"]}}, RESTRICTED, "exceptions.volumeTypes[0]: input should be"),
    ({"exceptions": {"containers": [{"name": "x", "checks": ["sysctls"]}]}}, BASELINE,
     "containers[0].checks: value error, 'sysctls' checks the pod"),
    ({"exceptions": {"containers": [{"name": "x", "checks": ["hostPort"]}]}}, BASELINE,
     "containers[0].checks[0]: input should be"),
    ({"exceptions": {"containers": [{"name": "x", "checks": ["runAsUser"]}]}}, BASELINE,
     "params.exceptions: value error, containers: 'runAsUser' is not part of pod-security.baseline"),
    ({"exceptions": {"containers": [{"name": "x", "checks": []}]}}, RESTRICTED, "containers[0].checks: value error"),
    ({"exceptions": {"containers": [{"name": "x", "all": True}]}}, RESTRICTED, "containers[0].all: unknown field"),
    ({"exceptions": {"namespaces": ["kube-system"]}}, RESTRICTED, "exceptions.namespaces: unknown field"),
    ({"level": "privileged"}, RESTRICTED, "params.level: unknown field"),
])
def test_bad_params_are_load_errors(params, rule, where):
    (error,) = load_errors(params, rule)
    assert where in error


def test_good_params_load():
    params = {
        "version": "v1.31",
        "skipChecks": ["hostPorts"],
        "exceptions": {
            "capabilities": ["IPC_LOCK", "SYS_RESOURCE"],
            "hostPathPrefixes": ["/dev/infiniband"],
            "sysctls": ["kernel.msgmax"],
            "volumeTypes": ["nfs"],
            "containers": ["cuda-validator", {"name": "nvidia-driver-validation", "checks": ["privileged"]}],
        },
    }
    assert load_errors(params, RESTRICTED) == []


# --- kinds ---------------------------------------------------------------------------------------------------


def test_trainingjob_findings_point_into_the_template_overlay():
    obj = change(trainingjob(), "/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation", True)
    assert violations(obj, RESTRICTED) == {
        ("/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation",
         "allowPrivilegeEscalation != false")
    }
    obj = change(trainingjob(), "/spec/template/spec/hostIPC", True)
    assert violations(obj, BASELINE) == {("/spec/template/spec/hostIPC", "host namespaces")}


def test_trainingjob_apparmor_annotation_points_at_the_template_metadata():
    key = "container.apparmor.security.beta.kubernetes.io~1pytorch"
    obj = change(trainingjob(), "/spec/template/metadata/annotations/" + key, "unconfined")
    assert violations(obj, BASELINE) == {("/spec/template/metadata/annotations/" + key, "forbidden AppArmor profile")}


def test_pytorchjob_finding_names_the_replica_that_violates():
    worker = "/spec/pytorchReplicaSpecs/Worker/template/spec"
    obj = change(pytorchjob(), worker + "/containers/0/securityContext/runAsUser", 0)
    decision = decide(obj, RESTRICTED)
    assert not decision.allowed
    assert violations(obj, RESTRICTED) == {(worker + "/containers/0/securityContext/runAsUser", "runAsUser=0")}
    assert decide(pytorchjob(), RESTRICTED).results[0].outcome is Outcome.PASS


def test_job_template_is_checked():
    obj = change(job(), "/spec/template/spec/hostNetwork", True)
    assert violations(obj, BASELINE) == {("/spec/template/spec/hostNetwork", "host namespaces")}


def test_identical_roles_are_each_reported_at_their_own_path() -> None:
    obj = pytorchjob()
    for role in ("Master", "Worker"):
        obj = change(obj, f"/spec/pytorchReplicaSpecs/{role}/template/spec/containers/0/securityContext/privileged",
                     True)
    decision = decide(obj, "pod-security.baseline")
    paths = sorted(f.path for r in decision.violations for f in r.findings)
    assert paths == [
        f"/spec/pytorchReplicaSpecs/{role}/template/spec/containers/0/securityContext/privileged"
        for role in ("Master", "Worker")
    ]
