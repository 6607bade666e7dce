"""What hostile reviews cost `mlgate serve`: prints figures, asserts nothing (part of `make bench-webhook`).

    .venv/bin/python bench/limits_bench.py

Against the real server (a subprocess on loopback, TLS, the shipped policies):
- peak RSS of the server while 4 clients each send a 2.8 MiB review at once (a TrainingJob whose overlay holds
  about 145,000 bare containers; target: under the Deployment's 256 Mi limit);
- the time to judge a TrainingJob with 8,000 bare containers, in process and over HTTP (it took 22 s before
  evaluation was made linear);
- /healthz latency (new request every 50 ms on a kept-alive connection) while the large reviews are judged.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from webhook_bench import free_port, rss_mb  # noqa: E402

from mlgate.engine import evaluate  # noqa: E402
from mlgate.loading.policies import default_policy_dir, load_policy_paths  # noqa: E402
from mlgate_certs.throwaway import throwaway_pki  # noqa: E402
from mlgate_webhook.review import make_review  # noqa: E402

MIB = 1024 * 1024


def trainingjob(containers: int) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "huge", "namespace": "ml"},
            "spec": {"framework": "pytorch", "image": "registry.example/train:1.0", "replicas": 2,
                     "resources": {"gpu": 1}, "template": {"spec": {"containers": [{"name": f"c{i}"}
                                                                                   for i in range(containers)]}}}}


def review_body(obj: dict[str, Any]) -> bytes:
    return json.dumps(make_review(obj, "CREATE", uid="bench")).encode()


def sized(target: int) -> bytes:
    """A review of about `target` bytes."""
    containers = target // 20
    while True:
        body = review_body(trainingjob(containers))
        if len(body) >= target:
            return body
        containers += containers // 10


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_ready(url: str, ca: Path) -> None:
    with httpx.Client(base_url=url, verify=str(ca), timeout=30) as http:
        for _ in range(100):
            try:
                if http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)


def eight_thousand(url: str, ca: Path) -> None:
    body = review_body(trainingjob(8000))
    shipped = load_policy_paths([default_policy_dir()])
    start = time.perf_counter()
    evaluate(trainingjob(8000), shipped)
    in_process = time.perf_counter() - start
    with httpx.Client(base_url=url, verify=str(ca), timeout=30) as http:
        start = time.perf_counter()
        answer = http.post("/mutate", content=body, headers={"Content-Type": "application/json"})
        over_http = time.perf_counter() - start
    print(f"TrainingJob with 8,000 bare containers ({len(body) / MIB:.2f} MiB review): {in_process:.2f} s in process "
          f"(validate and mutate), {over_http:.2f} s over HTTP /mutate (status {answer.status_code}); it took 22 s "
          "before evaluation was made linear")


def four_large(url: str, ca: Path, pid: int, idle: float) -> None:
    big = sized(int(2.8 * MIB))
    results: list[tuple[int, float, bool]] = []
    probes: list[float] = []

    def send() -> None:
        with httpx.Client(base_url=url, verify=str(ca), timeout=60) as client:
            began = time.perf_counter()
            response = client.post("/validate", content=big, headers={"Content-Type": "application/json"})
            abandoned = response.status_code == 200 and "in time" in response.text
            results.append((response.status_code, time.perf_counter() - began, abandoned))

    senders = [threading.Thread(target=send) for _ in range(4)]
    for sender in senders:
        sender.start()
    with httpx.Client(base_url=url, verify=str(ca), timeout=30) as http:
        while any(s.is_alive() for s in senders):
            began = time.perf_counter()
            http.get("/healthz")
            probes.append((time.perf_counter() - began) * 1000)
            time.sleep(0.05)
    for sender in senders:
        sender.join()
    peak = peak_rss_mb(pid)
    print(f"4 concurrent {len(big) / MIB:.2f} MiB reviews: answers "
          + ", ".join(f"{code}{' (abandoned at the deadline)' if gone else ''} in {sec:.1f} s"
                      for code, sec, gone in sorted(results, key=lambda r: r[1])))
    print(f"  server RSS: idle {idle:.0f} MB, peak {peak:.0f} MiB (target < 256 MiB, the Deployment's limit: "
          f"{'ok' if peak < 256 else 'MISSED'})")
    if probes:
        ordered = sorted(probes)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(f"  /healthz meanwhile: {len(probes)} probes, median {statistics.median(probes):.1f} ms, "
              f"p99 {p99:.1f} ms, max {ordered[-1]:.1f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mlgate-limits-") as tmp:
        pki = throwaway_pki(Path(tmp))
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "mlgate_webhook", "serve", "--port", str(port),
                                   "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"https://127.0.0.1:{port}"
        try:
            wait_ready(url, pki.ca_cert)
            idle = rss_mb(server.pid)
            eight_thousand(url, pki.ca_cert)
            four_large(url, pki.ca_cert, server.pid, idle)
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
