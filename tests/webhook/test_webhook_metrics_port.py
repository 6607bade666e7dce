"""/metrics on a plain-HTTP port of its own (`mlgate serve --metrics-port`), scraped as Prometheus would: no TLS,
the standard process and Python metrics, no `_created` series, and no admission review served on that port."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from builders import change, pytorchjob
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from webhook_harness import FAST, TEST_POLICIES, TLSFiles, client
from webhook_reviews import encode, review

from mlgate_webhook.commands import serve
from mlgate_webhook.server import ServeOptions, Webhook

GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{}/nvidia.com~1gpu"


@pytest.fixture(scope="module")
def scraped(tls_files: TLSFiles) -> Iterator[Webhook]:
    options = ServeOptions(port=0, metrics_port=0, cert_file=tls_files.cert, key_file=tls_files.key,
                           policy_paths=(str(TEST_POLICIES),), settings=FAST)
    webhook = Webhook(options)
    webhook.start()
    yield webhook
    webhook.stop()


def deny_one(webhook: Webhook, tls_files: TLSFiles) -> None:
    job = change(change(pytorchjob(), GPU.format("limits"), 16), GPU.format("requests"), 16)
    with client(webhook, tls_files) as c:
        answer = c.post("/validate", content=encode(review(job)), headers={"content-type": "application/json"})
    assert answer.json()["response"]["allowed"] is False


def samples(text: str) -> dict[str, float]:
    """Every sample of a scrape, `name{labels}` to value, read with prometheus_client's own parser."""
    return {f"{s.name}{dict(sorted(s.labels.items())) if s.labels else ''}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_plain_http_scrape_of_the_metrics_port_gets_the_admission_metrics(scraped, tls_files):
    deny_one(scraped, tls_files)
    assert scraped.metrics_url is not None and scraped.metrics_url.startswith("http://127.0.0.1:")
    response = httpx.get(scraped.metrics_url, timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")  # the Prometheus text format
    got = samples(response.text)
    denied = "{'endpoint': 'validate', 'kind': 'PyTorchJob', 'result': 'denied'}"
    assert got[f"mlgate_admission_requests_total{denied}"] >= 1
    assert got["mlgate_policies"] == 5  # the five test policies
    assert got["mlgate_ready"] == 1


def test_the_scrape_has_the_standard_process_and_python_metrics(scraped):
    names = {name.split("{")[0] for name in samples(httpx.get(scraped.metrics_url, timeout=5).text)}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
            "process_start_time_seconds", "python_info", "python_gc_objects_collected_total"} <= names


def test_no_created_series_and_no_count_suffix_on_a_gauge(scraped, tls_files):
    deny_one(scraped, tls_files)
    text = httpx.get(scraped.metrics_url, timeout=5).text
    assert "_created" not in text
    assert "mlgate_policy_count" not in text
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["mlgate_policies"] == "gauge"
    assert [n for n, t in families.items() if n.endswith("_count") and t != "histogram"] == []


def test_the_metrics_port_answers_no_admission_review(scraped):
    base = scraped.metrics_url.removesuffix("/metrics")
    assert httpx.post(base + "/validate", content=b"{}", timeout=5).status_code == 501
    assert httpx.post(scraped.metrics_url, content=b"{}", timeout=5).status_code == 501


def test_the_metrics_port_speaks_no_tls_and_the_tls_port_still_answers_metrics(scraped, tls_files):
    port = int(scraped.metrics_url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
            pytest.raises(ssl.SSLError):
        tls_files.client_context().wrap_socket(sock, server_hostname="localhost")
    with client(scraped, tls_files) as c:
        assert "mlgate_admission_requests_total" in c.get("/metrics").text


def test_without_a_metrics_port_only_the_tls_port_serves_metrics(webhook):
    assert webhook.options.metrics_port is None and webhook.metrics_url is None


def test_a_taken_metrics_port_stops_serve_at_start_with_a_clear_error(tls_files: TLSFiles, tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(serve, ["--port", "0", "--metrics-port", str(port), "--cert-file",
                                            str(tls_files.cert), "--key-file", str(tls_files.key), "-p",
                                            str(TEST_POLICIES), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert f"mlgate: cannot start: --metrics-port {port}: " in result.output
    assert "Address already in use" in result.output
    assert "Traceback" not in result.output
