"""What the API server and an operator see from the running webhook, beyond the golden pairs."""

from __future__ import annotations

import json
import logging
import re

import jsonpatch
from builders import change, pytorchjob
from webhook_harness import raw_tls_socket
from webhook_load import wait_until
from webhook_reviews import decoded_patch, encode, review

from mlgate_webhook import endpoint
from mlgate_webhook.review import MAX_WARNING_CHARS

GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{}/nvidia.com~1gpu"
HEADERS = {"content-type": "application/json"}


def gpus(count: int):
    return change(change(pytorchjob(), GPU.format("limits"), count), GPU.format("requests"), count)


def post(http, path, body):
    response = http.post(path, content=encode(body), headers=HEADERS)
    assert response.status_code == 200, response.text
    return response.json()["response"]


def test_deny_names_the_policy_rule_field_and_fix(http):
    response = post(http, "/validate", review(gpus(16), uid="u-deny"))
    assert response["uid"] == "u-deny"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("[gpu/gpu.max] too many gpus per container: ")
    assert GPU.format("limits") in message
    assert 'container "pytorch" asks for 16 GPUs, the limit is 8; split the work' in message


def test_every_warning_fits_in_120_characters(http):
    response = post(http, "/validate", review(gpus(6)))
    assert response["allowed"] is True
    assert response["warnings"]
    assert all(len(w) <= MAX_WARNING_CHARS for w in response["warnings"])
    assert "gpu-audit.gpu.max" in response["auditAnnotations"]


def test_the_patch_applies_and_a_second_mutation_adds_nothing(http):
    obj = pytorchjob()
    first = post(http, "/mutate", review(obj))
    assert first["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(obj, decoded_patch(first))
    for role in ("Master", "Worker"):
        spec = patched["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in spec["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]
    second = post(http, "/mutate", review(patched))
    assert second == {"uid": second["uid"], "allowed": True}  # no patch, no patchType


def test_a_dry_run_gets_the_same_answer_as_the_real_request(http):
    for path, obj in (("/validate", gpus(16)), ("/validate", gpus(6)), ("/mutate", pytorchjob())):
        assert post(http, path, review(obj, dry_run=True)) == post(http, path, review(obj))


def test_the_namespace_comes_from_the_request_when_the_object_has_none(http):
    obj = change(gpus(16), "/metadata", {"name": "mnist"})
    response = post(http, "/validate", review(obj) | {"request": review(obj)["request"] | {"namespace": "ml"}})
    assert response["allowed"] is False
    excluded = review(obj)
    excluded["request"]["namespace"] = "kube-system"  # the gpu policy excludes kube-system
    assert post(http, "/validate", excluded)["allowed"] is True


def test_many_requests_share_one_kept_alive_connection(http):
    for index in range(20):
        assert post(http, "/validate", review(pytorchjob(), uid=f"u-{index}"))["uid"] == f"u-{index}"


def test_health_readiness_and_metrics(http):
    post(http, "/validate", review(gpus(16)))
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    detail = ready.json()
    assert detail["ready"] is True
    assert detail["policies"]["policies"] == ["defaults", "gpu", "gpu-soft", "gpu-audit", "gang-updates"]
    assert detail["tls"]["lastError"] == ""
    metrics = http.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'mlgate_admission_requests_total{endpoint="validate",kind="PyTorchJob",result="denied"}' in text
    assert 'mlgate_admission_request_duration_seconds_bucket{endpoint="validate",kind="PyTorchJob"' in text
    assert 'mlgate_rule_results_total{outcome="fail",policy="gpu",rule="gpu.max"}' in text
    assert "mlgate_policy_generation 1.0" in text
    assert "mlgate_certificate_expiry_timestamp_seconds 1." in text


def test_one_json_log_line_per_decision(http, caplog):
    def decisions():
        return [r for r in caplog.records if r.name == "mlgate.decision"]

    with caplog.at_level(logging.INFO, logger="mlgate.decision"):
        post(http, "/validate", review(gpus(16), uid="u-log", dry_run=True))
        wait_until(lambda: decisions() != [], what="the decision log line")  # logged after the answer is sent
    (record,) = decisions()
    fields = record.fields
    assert fields["uid"] == "u-log"
    assert (fields["kind"], fields["namespace"], fields["name"]) == ("PyTorchJob", "ml", "mnist")
    assert fields["verdict"] == "denied"
    assert fields["dryRun"] is True
    assert "gpu/gpu.max=fail" in fields["rules"]
    assert fields["durationMs"] > 0
    from mlgate_webhook.jsonlog import JsonFormatter

    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line)["uid"] == "u-log"


def test_unknown_paths_are_404_without_a_trace(http):
    response = http.get("/nope")
    assert response.status_code == 404
    assert "Traceback" not in response.text


def _read_until_closed(sock) -> bytes:
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    return raw


def test_head_requests_pipelining_and_close_all_get_whole_responses(webhook, tls_files):
    """The transport answers a head-only response, two pipelined requests in order, and closes when asked."""
    body = encode(review(pytorchjob(), uid="piped"))
    post_head = (f"POST /validate HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\n").encode()
    with raw_tls_socket(webhook, tls_files) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"  # a head and no body
                     + post_head + b"\r\n" + body  # two requests in one write: answered in order
                     + post_head + b"connection: close\r\n\r\n" + body)
        raw = _read_until_closed(sock)  # the server closes after the third answer
    heads = re.findall(rb"HTTP/1\.1 (\d{3}) [^\r]*\r\n((?:[^\r]+\r\n)*)\r\n", raw)
    assert [status for status, _ in heads] == [b"405", b"200", b"200"]  # /healthz is GET only
    assert b"content-length: 31" in heads[0][1] and raw.count(b'"uid":"piped"') == 2
    assert raw.index(b'"uid":"piped"') < raw.index(heads[2][1])  # in order
    assert b"connection: close" in heads[2][1]


def test_an_endless_header_gets_431_and_the_connection_closes(webhook, tls_files, http):
    """httptools would buffer the header line for ever; the protocol stops it past MAX_HEAD_BYTES."""
    with raw_tls_socket(webhook, tls_files) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nx-padding: ")
        try:
            for _ in range(16):  # 256 KiB of one header line, in reads the server sees one by one
                sock.sendall(b"a" * 16384)
        except OSError:
            pass  # closed while we were still sending: the answer is already on its way
        raw = _read_until_closed(sock)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head
    assert json.loads(body)["reason"] == "RequestHeaderFieldsTooLarge"
    assert http.get("/healthz").status_code == 200  # and the server carries on


def test_a_large_review_is_judged_on_a_thread_with_the_same_answer(http, monkeypatch):
    threaded = []

    async def to_thread(fn, *args):
        threaded.append((fn.__name__, getattr(args[0], "__name__", None)))
        return await real_to_thread(fn, *args)

    real_to_thread = endpoint.asyncio.to_thread
    monkeypatch.setattr(endpoint.asyncio, "to_thread", to_thread)
    small = gpus(16)
    large = change(small, "/metadata/annotations", {"padding": "x" * endpoint.OFF_LOOP_BYTES})
    answers = [post(http, "/validate", review(obj, uid="same")) for obj in (small, large)]
    assert threaded == [("_without_gc_pauses", "_judge")]  # judged on a thread, the garbage collector paused
    assert answers[0] == answers[1] and answers[0]["allowed"] is False
