"""/healthz and /readyz on the metrics port are answered on its own threads: an admission stuck in the engine, which
holds the serving loop, delays neither, and /healthz fails only once the loop has not run for `loop_stall`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from builders import pytorchjob
from webhook_harness import FAST, TEST_POLICIES, TLSFiles, client
from webhook_reviews import encode, review

from mlgate_webhook import endpoint
from mlgate_webhook.server import ServeOptions, Webhook

STUCK_FOR = 30.0  # longer than any test waits: the admission is released by the test, never by this


def serve(tls_files: TLSFiles, **settings: Any) -> Webhook:
    options = ServeOptions(port=0, metrics_port=0, cert_file=tls_files.cert, key_file=tls_files.key,
                           policy_paths=(str(TEST_POLICIES),), settings=replace(FAST, **settings))
    webhook = Webhook(options)
    webhook.start()
    return webhook


class StuckEngine:
    """`admit` replaced by one that holds the caller (the serving loop, for a small review) until released."""

    def __init__(self, admit: Callable[..., Any]):
        self.admit = admit
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        self.release.wait(STUCK_FOR)
        return self.admit(*args, **kwargs)


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> Iterator[StuckEngine]:
    engine = StuckEngine(endpoint.admit)
    monkeypatch.setattr(endpoint, "admit", engine)
    yield engine
    engine.release.set()


def admit_in_background(webhook: Webhook, tls_files: TLSFiles, answers: list[int]) -> threading.Thread:
    def send() -> None:
        with client(webhook, tls_files) as c:
            answers.append(c.post("/validate", content=encode(review(pytorchjob())),
                                  headers={"content-type": "application/json"}, timeout=STUCK_FOR).status_code)

    sender = threading.Thread(target=send)
    sender.start()
    return sender


def test_probes_on_the_metrics_port_answer_while_an_admission_is_stuck_in_the_engine(tls_files, stuck):
    webhook = serve(tls_files)
    answers: list[int] = []
    try:
        sender = admit_in_background(webhook, tls_files, answers)
        assert stuck.entered.wait(10), "the review never reached the engine"
        assert webhook.probe_url is not None
        health = httpx.get(webhook.probe_url + "/healthz", timeout=2)
        ready = httpx.get(webhook.probe_url + "/readyz", timeout=2)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert ready.status_code == 200 and ready.json()["ready"] is True
        with client(webhook, tls_files) as c, pytest.raises(httpx.TimeoutException):
            c.get("/healthz", timeout=1)  # the TLS port's probe waits behind the stuck admission
        stuck.release.set()
        sender.join(timeout=10)
        assert answers == [200]
    finally:
        stuck.release.set()
        webhook.stop()


def test_healthz_on_the_metrics_port_fails_once_the_serving_loop_is_stalled_and_recovers_after(tls_files, stuck):
    webhook = serve(tls_files, loop_stall=0.5)
    answers: list[int] = []
    try:
        assert webhook.probe_url is not None
        assert httpx.get(webhook.probe_url + "/healthz", timeout=2).status_code == 200
        sender = admit_in_background(webhook, tls_files, answers)
        assert stuck.entered.wait(10), "the review never reached the engine"
        time.sleep(0.8)
        stalled = httpx.get(webhook.probe_url + "/healthz", timeout=2)
        assert stalled.status_code == 503
        assert stalled.json()["status"] == "stalled" and stalled.json()["loopSeconds"] >= 0.5
        assert "the serving loop has not run for" in stalled.json()["detail"]
        stuck.release.set()
        sender.join(timeout=10)
        deadline = time.monotonic() + 5
        while httpx.get(webhook.probe_url + "/healthz", timeout=2).status_code != 200:
            assert time.monotonic() < deadline, "/healthz did not recover once the loop ran again"
            time.sleep(0.05)
        assert answers == [200]
    finally:
        stuck.release.set()
        webhook.stop()


def test_readyz_on_the_metrics_port_says_what_readyz_on_the_tls_port_says(tls_files):
    webhook = serve(tls_files)
    try:
        assert webhook.probe_url is not None
        off_loop = httpx.get(webhook.probe_url + "/readyz", timeout=2)
        with client(webhook, tls_files) as c:
            on_loop = c.get("/readyz")
        assert off_loop.status_code == on_loop.status_code == 200
        assert off_loop.headers["content-type"] == "application/json"
        assert off_loop.json() == on_loop.json()
        assert "mlgate_ready 1.0" in httpx.get(webhook.probe_url + "/metrics", timeout=2).text
    finally:
        webhook.stop()
