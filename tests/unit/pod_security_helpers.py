"""What the pod-security unit tests share: the two rules, the paths of builders.pod(), and how a test asks."""

from builders import decide

from mlgate.loading.policies import compile_policy

BASELINE = "pod-security.baseline"
RESTRICTED = "pod-security.restricted"
C0 = "/spec/containers/0"
SC = C0 + "/securityContext"
POD_SC = "/spec/securityContext"
APPARMOR_MAIN = "/metadata/annotations/container.apparmor.security.beta.kubernetes.io~1main"


def findings(obj, rule, params=None):
    (result,) = [r for r in decide(obj, rule, params).results if r.rule == rule]
    return result.findings


def violations(obj, rule, params=None):
    return {(f.path, f.reason) for f in findings(obj, rule, params)}


def load_errors(params, rule=BASELINE):
    document = {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "ClusterMLPolicy",
        "metadata": {"name": "psa"},
        "spec": {"rules": [{"rule": rule, "params": params}]},
    }
    _, errors = compile_policy(document, "<test>")
    return [str(e) for e in errors]
