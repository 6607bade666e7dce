"""Pod Security versions: the check variants each policy version runs, v1.0 through latest, as
pod-security-admission's `VersionedCheck` minimum versions have them (`mlgate/rules/pod_security_checks.py`)."""

import pytest
from builders import DELETE, change, pod
from pod_security_helpers import BASELINE, C0, POD_SC, RESTRICTED, SC, findings, load_errors, violations

SECCOMP_POD = "/metadata/annotations/seccomp.security.alpha.kubernetes.io~1pod"
SECCOMP_MAIN = "/metadata/annotations/container.seccomp.security.alpha.kubernetes.io~1main"


# --- Windows pods and user namespaces ----------------------------------------------------------------------

WINDOWS = change(pod(), "/spec/os", {"name": "windows"})
USER_NS = change(pod(), "/spec/hostUsers", False)


@pytest.mark.parametrize(("ptr", "value"), [
    (SC + "/allowPrivilegeEscalation", DELETE),
    (POD_SC + "/seccompProfile", DELETE),
    (SC + "/capabilities", DELETE),
])
def test_windows_pods_are_exempt_from_linux_only_restricted_checks_from_v1_25(ptr, value):
    obj = change(WINDOWS, ptr, value)
    assert findings(obj, RESTRICTED) == ()
    assert findings(obj, RESTRICTED, {"version": "v1.25"}) == ()
    assert findings(obj, RESTRICTED, {"version": "v1.24"}) != ()


def test_windows_pods_still_need_run_as_non_root():
    assert findings(change(WINDOWS, POD_SC + "/runAsNonRoot", False), RESTRICTED) != ()


def test_linux_pods_get_no_windows_exemption():
    obj = change(pod(), "/spec/os", {"name": "linux"})
    assert findings(change(obj, SC + "/allowPrivilegeEscalation", DELETE), RESTRICTED) != ()


@pytest.mark.parametrize(("ptr", "value"), [(POD_SC + "/runAsNonRoot", False), (POD_SC + "/runAsUser", 0)])
def test_host_users_false_relaxes_run_as_non_root_and_run_as_user_from_v1_35(ptr, value):
    assert findings(change(USER_NS, ptr, value), RESTRICTED) == ()
    assert findings(change(USER_NS, ptr, value), RESTRICTED, {"version": "v1.34"}) != ()
    assert findings(change(pod(), ptr, value), RESTRICTED) != ()


def test_host_users_false_allows_any_proc_mount_in_baseline_only():
    obj = change(USER_NS, SC + "/procMount", "Unmasked")
    assert findings(obj, BASELINE) == ()
    assert violations(obj, RESTRICTED) == {(SC + "/procMount", "procMount")}
    assert violations(obj, BASELINE, {"version": "v1.34"}) == {(SC + "/procMount", "procMount")}


def test_restricted_proc_mount_check_is_the_one_that_runs_from_v1_35():
    obj = change(USER_NS, SC + "/procMount", "Unmasked")
    assert findings(obj, RESTRICTED, {"skipChecks": ["procMount_restricted"]}) == ()


# --- versions ----------------------------------------------------------------------------------------------


def _sysctl(name):
    return change(pod(), POD_SC + "/sysctls", [{"name": name, "value": "1"}])


@pytest.mark.parametrize(("name", "since"), [
    ("net.ipv4.ip_local_reserved_ports", 27),
    ("net.ipv4.tcp_keepalive_time", 29),
    ("net.ipv4.tcp_fin_timeout", 29),
    ("net.ipv4.tcp_rmem", 32),
    ("net.ipv4.tcp_wmem", 32),
    ("net.ipv4.tcp_slow_start_after_idle", 37),
    ("net.ipv4.tcp_notsent_lowat", 37),
])
def test_sysctls_become_safe_at_their_policy_version(name, since):
    assert findings(_sysctl(name), BASELINE, {"version": f"v1.{since}"}) == ()
    assert findings(_sysctl(name), BASELINE, {"version": f"v1.{since - 1}"}) != ()
    assert findings(_sysctl(name), BASELINE) == ()


def test_selinux_container_engine_t_is_allowed_from_v1_31():
    obj = change(pod(), SC + "/seLinuxOptions", {"type": "container_engine_t"})
    assert findings(obj, BASELINE, {"version": "v1.31"}) == ()
    assert findings(obj, BASELINE, {"version": "v1.30"}) != ()


def test_probe_hosts_are_checked_from_v1_34():
    obj = change(pod(), C0 + "/startupProbe", {"tcpSocket": {"host": "10.0.0.1", "port": 80}})
    assert findings(obj, BASELINE, {"version": "v1.34"}) != ()
    assert findings(obj, BASELINE, {"version": "v1.33"}) == ()


def test_run_as_user_zero_is_checked_from_v1_23():
    obj = change(pod(), POD_SC + "/runAsUser", 0)
    assert findings(obj, RESTRICTED, {"version": "v1.23"}) != ()
    assert findings(obj, RESTRICTED, {"version": "v1.22"}) == ()


def test_versions_newer_than_the_newest_check_behave_as_latest():
    obj = _sysctl("net.ipv4.tcp_notsent_lowat")
    assert findings(obj, BASELINE, {"version": "v1.40"}) == ()
    assert findings(change(pod(), SC + "/privileged", True), BASELINE, {"version": "v1.40"}) != ()


@pytest.mark.parametrize("version", ["1.30", "v1.030", "v1.-1", "latest2", "v2.0", "v1.x", "v1"])
def test_bad_versions_are_load_errors(version):
    (error,) = load_errors({"version": version})
    assert "params.version: value error" in error


@pytest.mark.parametrize("version", ["v1.0", "v1.8", "v1.18", "v1.21", "v1.22", "latest"])
def test_every_version_pod_security_admission_accepts_loads(version):
    assert load_errors({"version": version}) == []
    assert load_errors({"version": version}, RESTRICTED) == []


# --- before v1.19: seccomp by annotation ---------------------------------------------------------------------


@pytest.mark.parametrize("ptr", [SECCOMP_POD, SECCOMP_MAIN])
def test_seccomp_annotations_are_judged_before_v1_19_and_ignored_after(ptr):
    obj = change(pod(), ptr, "unconfined")
    assert violations(obj, BASELINE, {"version": "v1.18"}) == {(ptr, "seccompProfile")}
    assert violations(obj, RESTRICTED, {"version": "v1.18"}) == {(ptr, "seccompProfile")}
    assert findings(obj, BASELINE, {"version": "v1.19"}) == ()


@pytest.mark.parametrize("value", ["runtime/default", "docker/default", "localhost/profiles/train.json"])
def test_allow_each_permitted_seccomp_annotation_before_v1_19(value):
    assert findings(change(pod(), SECCOMP_MAIN, value), BASELINE, {"version": "v1.0"}) == ()


def test_deny_an_empty_seccomp_annotation_before_v1_19():
    obj = change(pod(), SECCOMP_POD, "")
    assert violations(obj, BASELINE, {"version": "v1.0"}) == {(SECCOMP_POD, "seccompProfile")}


def test_seccomp_annotation_of_a_container_the_pod_lacks_is_not_read():
    obj = change(pod(), "/metadata/annotations/container.seccomp.security.alpha.kubernetes.io~1ghost", "unconfined")
    assert findings(obj, BASELINE, {"version": "v1.18"}) == ()


def test_seccomp_field_is_not_read_before_v1_19():
    obj = change(pod(), POD_SC + "/seccompProfile", {"type": "Unconfined"})
    assert findings(obj, BASELINE, {"version": "v1.18"}) == ()
    assert findings(obj, RESTRICTED, {"version": "v1.18"}) == ()
    assert findings(obj, BASELINE, {"version": "v1.19"}) != ()


# --- restricted checks that start later ----------------------------------------------------------------------


def test_restricted_requires_a_seccomp_profile_from_v1_19():
    obj = change(pod(), POD_SC + "/seccompProfile", DELETE)
    assert findings(obj, RESTRICTED, {"version": "v1.18"}) == ()
    assert violations(obj, RESTRICTED, {"version": "v1.19"}) == {(SC + "/seccompProfile/type", "seccompProfile")}


def test_restricted_requires_allow_privilege_escalation_false_from_v1_8():
    obj = change(pod(), SC + "/allowPrivilegeEscalation", DELETE)
    assert findings(obj, RESTRICTED, {"version": "v1.7"}) == ()
    assert findings(obj, RESTRICTED, {"version": "v1.8"}) != ()


def test_restricted_requires_drop_all_from_v1_22():
    obj = change(pod(), SC + "/capabilities/drop", DELETE)
    assert findings(obj, RESTRICTED, {"version": "v1.21"}) == ()
    assert violations(obj, RESTRICTED, {"version": "v1.22"}) == {
        (SC + "/capabilities/drop", "unrestricted capabilities")
    }


def test_restricted_judges_added_capabilities_as_baseline_does_before_v1_22():
    assert findings(change(pod(), SC + "/capabilities/add", ["CHOWN"]), RESTRICTED, {"version": "v1.21"}) == ()
    assert violations(change(pod(), SC + "/capabilities/add", ["NET_RAW"]), RESTRICTED, {"version": "v1.21"}) == {
        (SC + "/capabilities/add/0", "non-default capabilities")
    }
