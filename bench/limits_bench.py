"""What hostile reviews cost `mlgate serve`: prints figures, asserts nothing (part of `make bench-webhook`).

    .venv/bin/python bench/limits_bench.py

Against the real server (a subprocess on loopback, TLS, the shipped policies):
- peak RSS of the server while 4 clients each send a 2.8 MiB review at once (a TrainingJob whose overlay holds
  about 145,000 bare containers; target: under the Deployment's 256 Mi limit);
- the time to judge a TrainingJob with 8,000 bare containers, in process and over HTTP (it took 22 s before
  evaluation was made linear);
- probe latency (a new request every 50 ms on a kept-alive connection, one prober per path) while the large reviews
  are judged, and while 32 connections keep the server saturated with the bench PyTorchJob (either load is sent from
  a process of its own): /healthz on the TLS port, on the serving loop behind the admissions, beside /healthz and
  /readyz on the metrics port, which the shipped probes use (webhook/probes.py; target p99 < 100 ms, the kubelet's
  default timeoutSeconds is 1 s).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import ssl
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
from webhook_bench import admission_review, connect, free_port, http_request, pytorchjob, rss_mb, saturate  # noqa: E402

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


class Probers:
    """One thread per probe URL, each a GET every 50 ms on its own kept-alive connection, until stopped."""

    PATHS = (("TLS port /healthz", "tls", "/healthz"), ("metrics port /healthz", "plain", "/healthz"),
             ("metrics port /readyz", "plain", "/readyz"))

    def __init__(self, url: str, probe_url: str, ca: Path):
        self.stop = threading.Event()
        self.latencies: dict[str, list[float]] = {name: [] for name, _, _ in self.PATHS}
        self.failed: dict[str, int] = dict.fromkeys(self.latencies, 0)
        self.threads = [threading.Thread(target=self._probe, args=(name, url if port == "tls" else probe_url, path, ca))
                        for name, port, path in self.PATHS]

    def _probe(self, name: str, base: str, path: str, ca: Path) -> None:
        with httpx.Client(base_url=base, verify=str(ca), timeout=30) as http:
            while not self.stop.is_set():
                began = time.perf_counter()
                try:
                    ok = http.get(path).status_code == 200
                except httpx.TransportError:
                    ok = False
                self.latencies[name].append((time.perf_counter() - began) * 1000)
                self.failed[name] += not ok
                time.sleep(0.05)

    def __enter__(self) -> Probers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def report(self) -> None:
        for name, latencies in self.latencies.items():
            if not latencies:
                continue
            ordered = sorted(latencies)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            print(f"  {name:<22} {len(ordered):>4} probes, p50 {statistics.median(ordered):7.1f} ms, "
                  f"p99 {p99:7.1f} ms, max {ordered[-1]:7.1f} ms, {self.failed[name]} not 200"
                  + ("" if name.startswith("TLS") else f" (target p99 < 100 ms: {'ok' if p99 < 100 else 'MISSED'})"))


def _send_large(url: str, ca: str, count: int, out: Any) -> None:
    """`count` large reviews at once, from a process of its own (the probers' threads share no GIL with it)."""
    big = sized(int(2.8 * MIB))
    results: list[tuple[int, float, bool]] = []

    def send() -> None:
        with httpx.Client(base_url=url, verify=ca, timeout=60) as client:
            began = time.perf_counter()
            response = client.post("/validate", content=big, headers={"Content-Type": "application/json"})
            abandoned = response.status_code == 200 and "in time" in response.text
            results.append((response.status_code, time.perf_counter() - began, abandoned))

    senders = [threading.Thread(target=send) for _ in range(count)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    out.put((len(big), results))


def four_large(url: str, probe_url: str, ca: Path, pid: int, idle: float) -> None:
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    load = spawn.Process(target=_send_large, args=(url, str(ca), 4, out))
    with Probers(url, probe_url, ca) as probers:
        load.start()
        size, results = out.get()
        load.join()
    peak = peak_rss_mb(pid)
    print(f"4 concurrent {size / MIB:.2f} MiB reviews: answers "
          + ", ".join(f"{code}{' (abandoned at the deadline)' if gone else ''} in {sec:.1f} s"
                      for code, sec, gone in sorted(results, key=lambda r: r[1])))
    print(f"  server RSS: idle {idle:.0f} MB, peak {peak:.0f} MiB (target < 256 MiB, the Deployment's limit: "
          f"{'ok' if peak < 256 else 'MISSED'})")
    print("  probes meanwhile:")
    probers.report()


def _saturate(port: int, ca: str, seconds: float, connections: int, answered: Any) -> None:
    """In a process of its own, so the load generator's work does not slow the probers' threads down."""
    context = ssl.create_default_context(cafile=ca)
    request = http_request("/validate", json.dumps(admission_review(pytorchjob())).encode())

    async def run() -> int:
        result = await saturate(await connect(port, context, connections), request, seconds)
        return len(result.latencies)

    answered.value = asyncio.run(run())


def at_saturation(port: int, url: str, probe_url: str, ca: Path, seconds: float = 10.0) -> None:
    answered = multiprocessing.get_context("spawn").Value("l", 0)
    load = multiprocessing.get_context("spawn").Process(target=_saturate, args=(port, str(ca), seconds, 32, answered))
    with Probers(url, probe_url, ca) as probers:
        load.start()
        load.join()
    print(f"at saturation (32 connections, closed loop, {seconds:g} s): {answered.value / seconds:.0f} reviews/s "
          "answered; probes meanwhile:")
    probers.report()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mlgate-limits-") as tmp:
        pki = throwaway_pki(Path(tmp))
        port, metrics_port = free_port(), free_port()
        server = subprocess.Popen([sys.executable, "-m", "mlgate_webhook", "serve", "--port", str(port),
                                   "--metrics-port", str(metrics_port),
                                   "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url, probe_url = f"https://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
        try:
            wait_ready(url, pki.ca_cert)
            idle = rss_mb(server.pid)
            eight_thousand(url, pki.ca_cert)
            four_large(url, probe_url, pki.ca_cert, server.pid, idle)
            at_saturation(port, url, probe_url, pki.ca_cert)
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
