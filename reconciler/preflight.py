"""The pre-flight check: the same policy engine as admission, run on an owner before anything is created.

An object that slipped past admission (webhook down with failurePolicy Ignore, or created before the policy
existed) is not materialized. Unless the caller passes facts, the engine gets the owner's namespace labels (read
from the API, so namespaceSelector policies match as in the webhook) and `known=False` for everything else:
rules that need PVCs, storage classes or nodes skip, never guess.

`invalid_name(owner)`: CRDs accept any DNS-1123 subdomain as a name, but the children desired.py builds from it
need more, and a create the API refuses half-way would leave a half-built owner. Checked on the real children:
- a Service's name is a DNS-1035 label (Kubeflow's NameIsDNS1035Label check on the job name): at most 63
  lowercase letters, digits and '-', starting with a letter, ending with a letter or digit, no dots;
- a pod's spec.hostname and spec.subdomain are DNS-1123 labels (at most 63; `<job>-master-0` is the hostname);
- every other name is a DNS-1123 subdomain (at most 253).
Each pass's gate runs it before `violation()`, and before the namespace read the policies need.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.model.facts import ClusterFacts, StaticFacts
from mlgate.model.results import MESSAGES_PER_RULE

from .client import KubeClient
from .desired import desired_children
from .desired_inference import desired_inference_children

__all__ = ["MAX_MESSAGE", "invalid_name", "namespace_facts", "violation"]

MAX_MESSAGE = 4096  # the CRDs allow 32768 per condition message; this keeps `kubectl describe` readable


def namespace_facts(client: KubeClient, namespace: str) -> ClusterFacts:
    """Facts that know the namespace's labels only (known=False: fact-based rules skip)."""
    ns = client.get_namespace(namespace)
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    return StaticFacts(namespaces={namespace: dict(labels)}, known=False)


def violation(obj: dict[str, Any], policies: PolicySet, facts: ClusterFacts) -> str | None:
    """None when the engine admits the object, else its violation messages in the engine's one format."""
    decision = evaluate(obj, policies, facts=facts)
    if decision.allowed:
        return None
    lines = [line for result in decision.violations for line in result.messages(MESSAGES_PER_RULE)]
    message = "denied by policy: " + "; ".join(lines or ["a policy denied the object"])
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


MAX_LABEL, MAX_SUBDOMAIN = 63, 253
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
CHILDREN: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "TrainingJob": desired_children, "InferenceService": desired_inference_children}


def invalid_name(owner: dict[str, Any]) -> str | None:
    """None when every child's name is one the API accepts, else why not and the longest name that works."""
    build = CHILDREN.get(str(owner.get("kind")))
    if build is None:
        return None
    name = str((owner.get("metadata") or {}).get("name") or "")
    problems: dict[tuple[str, str, str], list[str]] = {}  # (kind, field, problem) -> child names, in order
    longest = MAX_LABEL
    for child in build(owner):
        for what, value, label in _names(child):
            if label:  # the owner's name is a prefix of every label-limited child name
                longest = min(longest, MAX_LABEL - (len(value) - len(name)))
            problem = _check(value, label, dns1035=what == "name" and child["kind"] == "Service")
            if problem:
                problems.setdefault((child["kind"], what, problem), []).append(child["metadata"]["name"])
    if not problems:
        return None
    lines = [f"{kind} {names[0]!r}{f' (and {len(names) - 1} more)' if len(names) > 1 else ''} {what} {problem}"
             for (kind, what, problem), names in sorted(problems.items())]
    return (f"invalid name: {owner.get('kind')} {name!r} cannot name its children: {'; '.join(lines)}; "
            f"recreate it under a name of at most {longest} characters: lowercase letters, digits and '-', "
            "starting with a letter, no dots")


def _names(child: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(what, value, must be a label) for the names the API validates on this child."""
    spec = child.get("spec") or {}
    # a Job's name becomes the value of its pods' job-name label, so it is held to a label's 63 characters too
    out = [("name", str(child["metadata"]["name"]), child["kind"] in ("Service", "Job"))]
    if child["kind"] == "Job":
        spec = (spec.get("template") or {}).get("spec") or {}
    if child["kind"] in ("Pod", "Job"):
        out += [(f"spec.{key}", str(spec[key]), True) for key in ("hostname", "subdomain") if spec.get(key)]
    return out


def _check(value: str, label: bool, *, dns1035: bool) -> str | None:
    limit = MAX_LABEL if label else MAX_SUBDOMAIN
    if len(value) > limit:
        return f"is {len(value)} characters, more than {limit}"
    pattern = DNS1035_LABEL if dns1035 else DNS1123_LABEL if label else DNS1123_SUBDOMAIN
    if pattern.fullmatch(value) is None:
        kind = "a DNS-1035 label" if dns1035 else "a DNS-1123 label" if label else "a DNS-1123 subdomain"
        return f"must be {kind} (lowercase letters, digits and '-'{', starting with a letter' if dns1035 else ''})"
    return None
