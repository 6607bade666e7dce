"""What bounds a client that holds connections, or invents kinds, against the real server on loopback.

- A TCP connection that never starts TLS is closed at the handshake deadline (uvloop's default is 60 s).
- A client that never answers the TLS close (after a 408, say) is dropped at the same deadline (30 s).
- Past `max_connections`, counted from accept (in the handshake or after it), a new connection is
  closed at accept; the places come back as the others go.
- A kind the policy set does not know is counted as `other`, so /metrics does not grow with them.

Short settings (a 1 s handshake deadline) keep every test to a few seconds; every wait is bounded.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest
from builders import pytorchjob
from webhook_harness import FAST, TEST_POLICIES, TLSFiles, client, start_webhook
from webhook_load import wait_until
from webhook_reviews import encode, review

from mlgate_webhook.server import Webhook

HANDSHAKE = 1.0  # seconds: the handshake (and TLS close) deadline of the servers here
CAP = 8  # connections
SLACK = 1.5  # seconds a deadline may be late by on a busy test machine
HEADERS = {"content-type": "application/json"}
FEATURE_SYNC_KIND = """\
apiVersion: mlgate.dev/v1alpha1
kind: WorkloadKind
metadata: {name: featuresyncs.data.example.com}
spec:
  group: data.example.com
  kind: FeatureSync
  resource: featuresyncs
  templates:
    - pointer: /spec/workers/*/template
      role: "{name}"
"""


@pytest.fixture(scope="module")
def deadline(tls_files: TLSFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The test policies plus a WorkloadKind of their own; a 1 s handshake deadline, the default cap."""
    policies = tmp_path_factory.mktemp("limits") / "policies"
    shutil.copytree(TEST_POLICIES, policies)
    (policies / "featuresync-kind.yaml").write_text(FEATURE_SYNC_KIND)
    server = start_webhook(tls_files, [policies], dataclasses.replace(FAST, handshake_timeout=HANDSHAKE))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def capped(tls_files: TLSFiles) -> Iterator[Webhook]:
    """At most CAP connections; heads may take 5 s, so connections past the handshake stay while the test looks."""
    settings = dataclasses.replace(FAST, header_timeout=5.0, handshake_timeout=HANDSHAKE, max_connections=CAP)
    server = start_webhook(tls_files, [TEST_POLICIES], settings)
    yield server
    server.stop()


def _tcp(webhook: Webhook) -> socket.socket:
    return socket.create_connection(("127.0.0.1", webhook.port), timeout=5)


def _seconds_until_closed(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes `sock` (EOF or reset), reading and dropping what it sends;
    None if it is still open after `limit` seconds."""
    start = time.monotonic()
    while (left := limit - (time.monotonic() - start)) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                break
        except TimeoutError:
            return None
        except ConnectionError:
            break
    else:
        return None
    return time.monotonic() - start


def _healthz(webhook: Webhook, tls_files: TLSFiles) -> bool:
    """GET /healthz on a new connection (a new handshake); False when the connection is refused."""
    try:
        with tls_files.client_context().wrap_socket(_tcp(webhook), server_hostname="localhost") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            return tls.recv(64).startswith(b"HTTP/1.1 200 ")
    except (OSError, ssl.SSLError):
        return False


def _handshake_only(webhook: Webhook, tls_files: TLSFiles) -> socket.socket:
    """A TLS client over memory buffers that will never answer the server's close_notify; returns the TCP socket."""
    sock = _tcp(webhook)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = tls_files.client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            data = sock.recv(65536)
            assert data, "the server closed during the handshake"
            incoming.write(data)
    sock.sendall(outgoing.read())
    return sock


# --- deadlines --------------------------------------------------------------------------------------


def test_a_tcp_connection_that_never_starts_tls_is_closed_at_the_handshake_deadline(deadline: Webhook):
    with _tcp(deadline) as sock:
        closed = _seconds_until_closed(sock, HANDSHAKE + SLACK)
    assert closed is not None, f"still open after {HANDSHAKE + SLACK}s"
    assert closed >= HANDSHAKE * 0.8


def test_a_client_that_never_answers_the_tls_close_is_dropped_at_the_deadline(deadline: Webhook, tls_files: TLSFiles):
    # no request head: 408 after header_timeout, then close_notify, which this client never answers
    with _handshake_only(deadline, tls_files) as sock:
        closed = _seconds_until_closed(sock, FAST.header_timeout + HANDSHAKE + SLACK)
    assert closed is not None, "the server waited on the client's close_notify past the deadline"


def test_150_silent_connections_all_close_at_the_deadline_while_healthz_answers(deadline: Webhook,
                                                                                 tls_files: TLSFiles):
    silent = [_tcp(deadline) for _ in range(150)]
    try:
        opened = time.monotonic()
        answered = 0
        while time.monotonic() - opened < HANDSHAKE * 0.7:  # a few probes while all 150 are held
            assert _healthz(deadline, tls_files)
            answered += 1
        assert answered >= 3
        for sock in silent:
            left = HANDSHAKE + SLACK - (time.monotonic() - opened)
            assert _seconds_until_closed(sock, max(left, 0.01)) is not None, "a silent connection outlived the deadline"
    finally:
        for sock in silent:
            sock.close()
    assert _healthz(deadline, tls_files)


# --- the connection cap -----------------------------------------------------------------------------


def test_past_the_cap_a_connection_is_closed_at_accept_and_places_come_back_as_others_go(capped: Webhook,
                                                                                          tls_files: TLSFiles):
    context = tls_files.client_context()
    held: list[socket.socket] = []
    try:
        # half past the handshake (uvicorn's connections), half silent before it: both count
        held += [context.wrap_socket(_tcp(capped), server_hostname="localhost") for _ in range(CAP // 2)]
        held += [_tcp(capped) for _ in range(CAP - CAP // 2)]
        with _tcp(capped) as extra:
            closed = _seconds_until_closed(extra, HANDSHAKE)
        assert closed is not None and closed < HANDSHAKE / 2, f"connection {CAP + 1} was not closed at accept"
        assert not _healthz(capped, tls_files)  # the probe is one more connection too
    finally:
        for sock in held:
            sock.close()
    # closed past the handshake: the place is free at once; before it, at the handshake deadline at most
    wait_until(lambda: _healthz(capped, tls_files), seconds=HANDSHAKE + SLACK, what="/healthz after the others left")
    with client(capped, tls_files) as http:
        text = http.get("/metrics").text
    refused = next(line for line in text.splitlines() if line.startswith("mlgate_connections_refused_total "))
    assert float(refused.split()[1]) >= 2


# --- metric labels ----------------------------------------------------------------------------------


def _post(http: httpx.Client, obj: dict) -> None:
    response = http.post("/validate", content=encode(review(obj)), headers=HEADERS)
    assert response.status_code == 200, response.text


def test_kinds_the_policy_set_does_not_know_are_counted_as_other(deadline: Webhook, tls_files: TLSFiles):
    feature_sync = {"apiVersion": "data.example.com/v1", "kind": "FeatureSync",
                    "metadata": {"name": "daily", "namespace": "ml"}, "spec": {"workers": []}}
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "extra"},
              "spec": {"rules": [{"rule": "gpu.limits", "action": "deny"}]}}
    with client(deadline, tls_files) as http:
        for obj in (pytorchjob(), feature_sync, policy):
            _post(http, obj)
        _post(http, {"apiVersion": "attack.example/v1", "kind": "Warmup", "metadata": {"name": "x"}})
        before = len(http.get("/metrics").content)
        for index in range(300):
            _post(http, {"apiVersion": f"attack{index}.example/v1", "kind": f"Attack{index:03d}",
                         "metadata": {"name": "x", "namespace": "ml"}, "spec": {}})
        text = http.get("/metrics").text
    assert len(text) - before < 2048, f"/metrics grew from {before} to {len(text)} bytes"
    assert 'kind="Attack' not in text and 'kind="Warmup"' not in text
    assert 'mlgate_admission_requests_total{endpoint="validate",kind="other",result="' in text
    for known in ("PyTorchJob", "FeatureSync", "ClusterMLPolicy"):  # shipped, the set's own, mlgate's own
        assert f'mlgate_admission_requests_total{{endpoint="validate",kind="{known}",' in text
