"""AdmissionReview pairs through the real server: requests in, responses out, pinned as golden files.

Each case writes `<case>.request.json` (or `.request.txt`, the exact bytes sent; none for
bodies too big to keep) and `<case>.response.json` (status, content type, body and, for a
patch, the decoded RFC 6902 operations). MLGATE_UPDATE_GOLDEN=1 rewrites them all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from builders import change, pytorchjob
from golden import check_golden, orphans
from webhook_harness import raw_tls_socket
from webhook_reviews import decoded_patch, encode, review

from mlgate_webhook.service import Settings

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "admission"
GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{}/nvidia.com~1gpu"
QUEUE = "/metadata/labels/kueue.x-k8s.io~1queue-name"
LIMIT = Settings().max_body_bytes
JSON = "application/json"


def gpus(count: int) -> dict[str, Any]:
    return change(change(pytorchjob(), GPU.format("limits"), count), GPU.format("requests"), count)


def with_queue(name: str) -> dict[str, Any]:
    return change(pytorchjob(), QUEUE, name)


def ml_policy(per_container: Any, *, kind: str = "MLPolicy", name: str = "team-gpu",
              rule: str = "gpu.max") -> dict[str, Any]:
    meta = {"name": name, "namespace": "ml"} if kind == "MLPolicy" else {"name": name}
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"rules": [{"rule": rule, "action": "deny", "params": {"perContainer": per_container}},
                               {"rule": "gpu.limits", "action": "deny"}]}}


def without(value: dict[str, Any], *keys: str) -> dict[str, Any]:
    out = json.loads(json.dumps(value))
    node = out
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    return out


def oversized() -> Iterator[bytes]:
    yield b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"p":"'
    for _ in range(LIMIT // (1 << 20) + 1):
        yield b"a" * (1 << 20)
    yield b'"}}}'


@dataclass(frozen=True)
class Case:
    path: str
    body: Callable[[], Any]  # a dict (sent as JSON), bytes, or an iterator of bytes (sent chunked)
    content_type: str = JSON
    method: str = "POST"


CASES = {
    "validate-allowed": Case("/validate", lambda: review(pytorchjob())),
    "validate-denied": Case("/validate", lambda: review(gpus(16))),
    "validate-warn-and-audit": Case("/validate", lambda: review(gpus(6))),
    "validate-dry-run": Case("/validate", lambda: review(gpus(16), dry_run=True)),
    "validate-update-allowed": Case("/validate", lambda: review(with_queue("a"), "UPDATE", old=with_queue("a"))),
    "validate-update-denied": Case("/validate", lambda: review(with_queue("b"), "UPDATE", old=with_queue("a"))),
    "validate-delete": Case("/validate", lambda: review(None, "DELETE", old=gpus(16))),
    "validate-connect": Case("/validate", lambda: review(gpus(16), "CONNECT")),
    "validate-status-subresource": Case("/validate", lambda: review(gpus(16), "UPDATE", old=gpus(16),
                                                                    sub_resource="status")),
    "validate-not-ml": Case("/validate", lambda: review({"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "cm", "namespace": "ml"}})),
    "validate-policy-allowed": Case("/validate", lambda: review(ml_policy(2))),
    "validate-policy-denied": Case("/validate", lambda: review(ml_policy("many"))),
    "validate-policy-unknown-rule": Case("/validate", lambda: review(ml_policy(2, rule="gpu.maximum"))),
    "validate-policy-name-taken": Case("/validate", lambda: review(ml_policy(2, kind="ClusterMLPolicy", name="gpu"))),
    "mutate-policy-untouched": Case("/mutate", lambda: review(ml_policy("many"))),
    "mutate-patched": Case("/mutate", lambda: review(pytorchjob())),
    "mutate-leaves-checks-to-validate": Case("/mutate", lambda: review(gpus(16))),
    "mutate-dry-run": Case("/mutate", lambda: review(pytorchjob(), dry_run=True)),
    "bad-not-json": Case("/validate", lambda: b"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n"),
    "bad-not-an-object": Case("/validate", lambda: [review(pytorchjob())]),
    "bad-api-version": Case("/validate", lambda: {**review(pytorchjob()), "apiVersion": "admission.k8s.io/v1beta1"}),
    "bad-kind": Case("/validate", lambda: {**review(pytorchjob()), "kind": "AdmissionRequest"}),
    "bad-missing-request": Case("/validate", lambda: without(review(pytorchjob()), "request")),
    "bad-missing-uid": Case("/validate", lambda: without(review(pytorchjob()), "request", "uid")),
    "bad-missing-object": Case("/validate", lambda: without(review(pytorchjob()), "request", "object")),
    "bad-update-without-old-object": Case("/validate", lambda: review(pytorchjob(), "UPDATE")),
    "bad-deeply-nested": Case("/validate", lambda: b"[" * 100_000 + b"]" * 100_000),
    "bad-content-type": Case("/validate", lambda: review(pytorchjob()), content_type="application/yaml"),
    "bad-no-content-type": Case("/mutate", lambda: review(pytorchjob()), content_type=""),
    "bad-method": Case("/validate", lambda: b"", method="GET"),
    "bad-oversized": Case("/validate", lambda: b"".join(oversized())),
    "bad-oversized-chunked": Case("/validate", oversized),
}
UNKEPT = {"bad-oversized", "bad-oversized-chunked", "bad-deeply-nested"}  # request bodies too big to keep


def keep(name: str, text: str) -> None:
    check_golden(GOLDEN / name, text.replace(f"{REPO}/", ""))  # messages may name policy files: same in any clone


def request_file(name: str, body: Any) -> tuple[str, str] | None:
    if name in UNKEPT:
        return None
    if isinstance(body, bytes):
        return f"{name}.request.txt", body.decode()
    return f"{name}.request.json", encode(body).decode()


def send(http: httpx.Client, case: Case, body: Any) -> httpx.Response:
    headers = {"content-type": case.content_type} if case.content_type else {}
    content = encode(body) if isinstance(body, dict | list) else body
    request = http.build_request(case.method, case.path, content=content, headers=headers)
    if not case.content_type:
        request.headers.pop("content-type", None)
    return http.send(request)


def response_record(status: int, content_type: str, body: dict[str, Any]) -> str:
    record: dict[str, Any] = {"status": status, "contentType": content_type, "body": body}
    patch = decoded_patch(body.get("response") or {})
    if patch is not None:
        record["decodedPatch"] = patch
    return json.dumps(record, indent=2) + "\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_admission_pair_matches_golden(name, http):
    case = CASES[name]
    body = case.body()
    response = send(http, case, body)
    assert "Traceback" not in response.text
    assert response.status_code < 500
    kept = request_file(name, body)
    if kept:
        keep(kept[0], kept[1])
    keep(f"{name}.response.json",
                      response_record(response.status_code, response.headers["content-type"], response.json()))


SLOW = {
    "slow-head": [b"POST /validate HTTP/1.1\r\nHost: localhost\r\n"],
    "slow-body": [b"POST /validate HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
                  b"content-length: 1000\r\n\r\n", b'{"apiVersion": "admission.k8s.io/v1",'],
}


@pytest.mark.parametrize("name", sorted(SLOW))
def test_a_slow_client_gets_408_and_the_connection_closes(name, webhook, tls_files):
    with raw_tls_socket(webhook, tls_files) as sock:
        for part in SLOW[name]:
            sock.sendall(part)
        started = time.monotonic()
        raw = b""
        while chunk := sock.recv(65536):  # the server closes the connection after answering
            raw += chunk
        waited = time.monotonic() - started
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert 0.4 < waited < 10.0  # the server waits 0.5 s; the rest is a busy machine
    keep(f"{name}.request.json", json.dumps({"sentThenSilent": [p.decode() for p in SLOW[name]]}, indent=2) + "\n")
    keep(f"{name}.response.json", response_record(status, headers[b"content-type"].decode(), json.loads(body)))


def test_every_golden_file_belongs_to_a_case():
    names = set()
    for name, case in CASES.items():
        kept = request_file(name, case.body())
        names |= {kept[0]} if kept else set()
        names.add(f"{name}.response.json")
    for name in SLOW:
        names |= {f"{name}.request.json", f"{name}.response.json"}
    assert orphans(GOLDEN, names) == []
