"""AdmissionReview `admission.k8s.io/v1` in, AdmissionReview out: parsing, checks and the response.

No HTTP here and no verdict logic: `parse_review` turns bytes into an `AdmissionRequest` or a
`ReviewError` (a 4xx with a precise message), and `admit` hands the object to the engine and
writes its decision in the wire format:

- `/mutate` runs only the policies' mutations and answers with their patch. It denies only when
  a mutation could not run under a `Fail` policy; the checks' verdict belongs to `/validate`.
- `/validate` runs the checks on the object as it will be stored (after every mutating webhook):
  `allowed`, `status` (403 and the engine's message), `warnings`, `auditAnnotations`.
- MLPolicy and ClusterMLPolicy objects go to the policy loader instead: `/validate` refuses one
  the loader would refuse, with the same file-and-field messages the CLI prints.
- DELETE, CONNECT and subresources pass untouched; `dryRun` gets the same verdict (the webhook
  has no side effects, so there is nothing to hold back).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from mlgate.engine import DeadlineExceeded, PolicySet, evaluate
from mlgate.engine.match import failure_policy_for
from mlgate.loading.exceptions import check_exception_object
from mlgate.loading.policies import check_policy_object, policy_object_warnings
from mlgate.model.exceptions import EXCEPTION_KIND, NO_EXCEPTIONS, Exceptions
from mlgate.model.facts import ClusterFacts
from mlgate.model.kinds import WORKLOAD_KIND_KINDS
from mlgate.model.namespaces import in_namespace
from mlgate.model.policy import API_VERSION as POLICY_API_VERSION
from mlgate.model.policy import POLICY_KINDS
from mlgate.model.results import Decision, FailurePolicy, Line, RuleResult

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
MAX_WARNING_CHARS = 120
MAX_LONG_WARNING_CHARS = 256  # past it the API server truncates a warning
MAX_WARNINGS = 20
POLICY_GROUP = POLICY_API_VERSION.partition("/")[0]
MAX_ANNOTATION_KEY = 63  # the name part of a qualified name; the API server prefixes "<webhook name>/"
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]")

Endpoint = Literal["validate", "mutate"]
Verdict = Literal["allowed", "patched", "denied", "skipped", "error"]
log = logging.getLogger("mlgate.webhook")


class ReviewError(Exception):
    """A request this webhook cannot answer with a verdict; `status` is the HTTP 4xx to send."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message

    def body(self) -> dict[str, Any]:
        """A metav1.Status, which is what the API server logs when a webhook call fails."""
        return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": self.status,
                "reason": self.reason, "message": self.message}


def bad_request(message: str) -> ReviewError:
    return ReviewError(400, "BadRequest", message)


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    kind: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old_obj: dict[str, Any] | None
    dry_run: bool = False
    sub_resource: str = ""
    group: str = ""
    user: str = ""  # userInfo.username: who sent the request (webhook/events.py)


@dataclass
class Admission:
    """The answer to one request, with what logs and metrics need."""

    request: AdmissionRequest
    response: dict[str, Any]
    verdict: Verdict
    results: list[RuleResult] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def review(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": KIND, "response": self.response}


def make_review(
    obj: dict[str, Any] | None, operation: str = "CREATE", *, old: dict[str, Any] | None = None,
    namespace: str | None = None, dry_run: bool = False, uid: str = "", sub_resource: str = "",
) -> dict[str, Any]:
    """An AdmissionReview request as the API server would send it for `obj` (for the CLI and tests)."""
    subject = obj or old or {}
    group, _, version = str(subject.get("apiVersion") or "").rpartition("/")
    kind = str(subject.get("kind") or "")
    meta = subject.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": kind.lower() + "s"}
    options = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(operation)
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": meta.get("name", ""), "namespace": namespace or meta.get("namespace") or "default",
        "operation": operation,
        "userInfo": {"username": "alice", "uid": "1001", "groups": ["ml-team", "system:authenticated"]},
        "object": obj, "oldObject": old, "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options} if options else None,
    }
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}


def check_content_type(content_type: str | None) -> None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ReviewError(415, "UnsupportedMediaType",
                          f"content type must be application/json, got {content_type or 'none'}")


def parse_review(body: bytes, content_type: str | None) -> AdmissionRequest:
    check_content_type(content_type)
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if exc.msg == "depth limit exceeded":
            raise bad_request("request body is nested too deeply to be an AdmissionReview") from None
        raise bad_request(f"request body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise bad_request(f"request body must be a JSON object (an AdmissionReview), not {_json_type(review)}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise bad_request(f"expected apiVersion {API_VERSION} and kind {KIND}, got "
                          f"{review.get('apiVersion') or 'none'}/{review.get('kind') or 'none'}; "
                          "set admissionReviewVersions: [v1] in the webhook configuration")
    request = review.get("request")
    if not isinstance(request, dict):
        raise bad_request("request is missing: an AdmissionReview sent to a webhook carries `request`")
    return _request(request)


def _request(request: dict[str, Any]) -> AdmissionRequest:
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise bad_request("request.uid is missing: it must be a non-empty string to echo in the response")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise bad_request(f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    obj, old_obj = request.get("object"), request.get("oldObject")
    if operation in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise bad_request(f"request.object must be an object for {operation}, not {_json_type(obj)}")
    if operation == "UPDATE" and not isinstance(old_obj, dict):
        raise bad_request(f"request.oldObject must be an object for UPDATE, not {_json_type(old_obj)}")
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool | None):
        raise bad_request(f"request.dryRun must be a boolean, not {_json_type(dry_run)}")
    kind = request.get("kind")
    kind_name = kind.get("kind") if isinstance(kind, dict) else None
    group = kind.get("group") if isinstance(kind, dict) else None
    subject = obj or old_obj or {}
    if not isinstance(kind_name, str) or not kind_name:
        kind_name = str(subject.get("kind") or "")
    if not isinstance(group, str):
        group = str(subject.get("apiVersion") or "").rpartition("/")[0]
    return AdmissionRequest(
        uid=uid, operation=operation, kind=kind_name, namespace=_text(request.get("namespace")),
        name=_text(request.get("name")), obj=obj if isinstance(obj, dict) else None,
        old_obj=old_obj if isinstance(old_obj, dict) else None, dry_run=bool(dry_run),
        sub_resource=_text(request.get("subResource")), group=group,
        user=_text(user_info.get("username")) if isinstance(user_info := request.get("userInfo"), dict) else "",
    )


# refused when the loader would refuse them (an exception: also when the policy in force does not allow it)
CHECKED_ON_ADMISSION = (*POLICY_KINDS, *WORKLOAD_KIND_KINDS, EXCEPTION_KIND)
# `kubectl debug` adds a container to a running Pod through pods/ephemeralcontainers: the request carries the whole
# Pod, judged as an UPDATE, so only what the new container brings can deny (Pod Security covers ephemeral
# containers). Validated only: a running Pod's spec takes no defaults.
JUDGED_SUBRESOURCES = ("ephemeralcontainers",)


def admit(request: AdmissionRequest, policies: PolicySet, facts: ClusterFacts, endpoint: Endpoint,
          deadline: float | None = None, *, exceptions: Exceptions = NO_EXCEPTIONS) -> Admission:
    """The engine's verdict on one request, as the `response` of an AdmissionReview. Past `deadline` (a
    time.monotonic() value) the engine stops and the policies' failure mode answers, as for an engine failure."""
    judged_subresource = request.sub_resource in JUDGED_SUBRESOURCES and endpoint == "validate"
    if request.operation not in ("CREATE", "UPDATE") or request.obj is None or (
            request.sub_resource and not judged_subresource):
        return Admission(request, {"uid": request.uid, "allowed": True}, "skipped")
    if request.kind in CHECKED_ON_ADMISSION and request.group == POLICY_GROUP:
        return _admit_policy(request, request.obj, policies, endpoint)
    operation: Literal["CREATE", "UPDATE"] = "UPDATE" if request.operation == "UPDATE" else "CREATE"
    if endpoint == "mutate":
        policies = mutations_only(policies)
    try:
        decision = evaluate(
            in_namespace(request.obj, request.namespace), policies, facts=facts, operation=operation,
            old_obj=in_namespace(request.old_obj, request.namespace) if request.old_obj else None,
            mutate=endpoint == "mutate", deadline=deadline, exceptions=exceptions,
        )
    except DeadlineExceeded as exc:
        log.warning("judging %s %s/%s (uid %s) passed its deadline and was abandoned", request.kind,
                    request.namespace, request.name, request.uid)
        return _engine_failure(request, policies, facts, exc)
    except Exception as exc:  # an engine bug: the policies' failure mode decides, the process stays up
        log.exception("engine failed on %s %s/%s (uid %s)", request.kind, request.namespace, request.name,
                      request.uid)
        return _engine_failure(request, policies, facts, exc)
    if decision.note:
        return Admission(request, {"uid": request.uid, "allowed": True}, "skipped")
    return _answer(request, decision)


def _admit_policy(request: AdmissionRequest, obj: dict[str, Any], policies: PolicySet,
                  endpoint: Endpoint) -> Admission:
    """An MLPolicy, ClusterMLPolicy or ClusterWorkloadKind: refused when the loader would refuse it.

    Stored anyway (it got past a webhook outage), it would be left out of the policy set, or its last
    good version kept, and the error would show only after the fact (/readyz, the log, a metric, the
    object's status.loadError; see policy_store.py).
    """
    if endpoint == "mutate":
        return Admission(request, {"uid": request.uid, "allowed": True}, "skipped")
    checked = check_exception_object(obj, policies.policies) if request.kind == EXCEPTION_KIND \
        else check_policy_object(obj, policies.policies)
    errors = [str(e) for e in checked]
    if not errors:
        response: dict[str, Any] = {"uid": request.uid, "allowed": True}
        warnings = [f"mlgate: {w.detail}" for w in policy_object_warnings(obj, policies.kinds)]
        if warnings:
            response["warnings"] = [w[:MAX_LONG_WARNING_CHARS] for w in warnings[:MAX_WARNINGS]]
        return Admission(request, response, "allowed", messages=warnings)
    message = "\n".join(errors)
    response = {"uid": request.uid, "allowed": False, "status": {"code": 403, "reason": "Invalid", "message": message}}
    return Admission(request, response, "denied", messages=errors)


def _answer(request: AdmissionRequest, decision: Decision) -> Admission:
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    denial = decision.deny_message()
    engine_warnings = decision.warning_lines + decision.unchecked_lines
    messages = denial.splitlines() + [line.render() for line in engine_warnings]
    verdict: Verdict = "allowed"
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": denial}
        verdict = "denied"
    elif decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode()
        verdict = "patched"
    warnings = [f"mlgate: {note}" for note in decision.notes] + short_warnings(engine_warnings)
    if warnings:
        response["warnings"] = warnings
    annotations = {_annotation_key(k): v for k, v in decision.audit_annotations.items()}
    if annotations:
        response["auditAnnotations"] = annotations
    return Admission(request, response, verdict, decision.results, messages)


_views: tuple[PolicySet, PolicySet] | None = None


def mutations_only(policies: PolicySet) -> PolicySet:
    """The set as /mutate runs it: only the mutation bindings, so the checks are not run twice.

    Kept for the set last asked about (one set is in force at a time); swapped as one tuple.
    """
    global _views  # noqa: PLW0603 - a one-entry cache, replaced atomically
    cached = _views
    if cached is not None and cached[0] is policies:
        return cached[1]
    view = PolicySet(tuple(
        replace(p, bindings=tuple(b for b in p.bindings if b.rule.is_mutation))
        for p in policies.policies if any(b.rule.is_mutation for b in p.bindings)
    ), policies.generation, policies.kinds)
    _views = (policies, view)
    return view


def _engine_failure(request: AdmissionRequest, policies: PolicySet, facts: ClusterFacts,
                    exc: Exception) -> Admission:
    """The failure mode of the policies that match the object decides; none matching, it passes."""
    message = ("mlgate could not judge this object in time; the work was abandoned" if isinstance(exc, DeadlineExceeded)
               else f"mlgate could not evaluate this object ({type(exc).__name__}); the webhook log has the details")
    try:
        mode = failure_policy_for(in_namespace(request.obj or {}, request.namespace), policies.policies, facts)
    except Exception:  # matching failed too: the strictest mode in the set
        mode = max((p.failure_policy for p in policies.policies), key=lambda m: m is FailurePolicy.FAIL,
                   default=None)
    if mode is None:
        return Admission(request, {"uid": request.uid, "allowed": True}, "skipped", messages=[message])
    if mode is FailurePolicy.FAIL:
        response = {"uid": request.uid, "allowed": False, "status": {"code": 500, "reason": "InternalError",
                                                                     "message": message}}
    else:
        response = {"uid": request.uid, "allowed": True, "warnings": [message]}
    return Admission(request, response, "error", messages=[message])


def short_warnings(lines: Sequence[Line]) -> list[str]:
    """Warnings as kubectl shows them: each at most 120 characters, at most 20 of them, built from the lines'
    fields (`Line.shortened`).

    Lines that read the same once shortened (one finding in both the Master and the Worker
    template, say) are said once, with the number of places that have it.
    """
    groups: dict[str, list[Line]] = {}
    for line in lines:
        groups.setdefault(line.shortened(MAX_WARNING_CHARS - len(" (999 places)")), []).append(line)
    out = [group[0].shortened(MAX_WARNING_CHARS) if len(group) == 1 else f"{short} ({len(group)} places)"
           for short, group in groups.items()]
    if len(out) > MAX_WARNINGS:
        out[MAX_WARNINGS - 1:] = [f"... and {len(out) - MAX_WARNINGS + 1} more warnings; see the webhook log"]
    return out


def _annotation_key(key: str) -> str:
    """`<policy key>.<rule>` as the name part of a qualified name, which the API server requires
    after it prefixes the webhook's name: 63 characters at most, alphanumeric at both ends.

    A namespaced policy's `/` becomes `_`, which no policy or rule name contains, so keys stay
    distinct; a key cut to length ends in a hash of the whole key for the same reason.
    """
    name = _NOT_IN_NAME.sub("-", key.replace("/", "_")).strip("-_.")
    if len(name) <= MAX_ANNOTATION_KEY:
        return name
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{name[:MAX_ANNOTATION_KEY - len(digest) - 1].rstrip('-_.')}-{digest}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
