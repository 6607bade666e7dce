"""Webhook benchmark: a 2 KB PyTorchJob AdmissionReview against `mlgate serve` and a do-nothing endpoint.

    .venv/bin/python bench/webhook_bench.py [--seconds 10] [--connections 32] [--rate 1000]

Both servers run the same stack (uvicorn with httptools and uvloop, TLS from mlgate's own context) on CPU 0; the load
generator (asyncio on uvloop, raw HTTP/1.1 over kept-alive TLS connections) runs in this process on CPU 1.
Per endpoint it prints the latency at a fixed rate (open loop: latency counts from the moment a
request was due, so a stalled server is not hidden), saturation throughput (closed loop, every
connection busy), idle RSS, and for mlgate the time from process start to the first admission.
It also times the review's parsing and evaluation alone, in this process with no transport, and
prints the saturation ratio that cost would allow even if mlgate's transport cost no more than
the do-nothing endpoint's. It prints figures and checks nothing; the targets are shown next to them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_CPU, CLIENT_CPU = 0, 1
UID = "bench-0000-0000-0000-000000000000"
NOOP_BODY = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": UID, "allowed": True}}).encode()


# --- the request -----------------------------------------------------------------------------------


def pytorchjob(size: int = 2048) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch", "image": "registry.example/ml/train:2.3.1-cuda12.1",
            "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "8", "memory": "32Gi"},
                          "requests": {"nvidia.com/gpu": 1}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
        spec = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": spec}}

    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "resnet50", "namespace": "ml", "labels": {"team": "vision"}, "annotations": {}},
        "spec": {"runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "Running"},
                 "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    }
    review = admission_review(job)
    padding = size - len(json.dumps(review))
    if padding > 40:
        job["metadata"]["annotations"]["bench.mlgate.dev/padding"] = "x" * (padding - 40)
    return job


def admission_review(obj: dict[str, Any]) -> dict[str, Any]:
    kind = {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}
    resource = {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID, "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": obj["metadata"]["name"], "namespace": "ml", "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def http_request(path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


# --- servers ---------------------------------------------------------------------------------------


def noop_server(port: int, cert: str, key: str) -> None:
    """The do-nothing endpoint: read the body, answer a fixed `allowed`; same uvicorn stack as mlgate."""
    import uvicorn

    from mlgate_webhook.protocol import EVENT_LOOP, protocol_with_timeout
    from mlgate_webhook.tls import server_context

    context = server_context(cert, key)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(NOOP_BODY)).encode())]})
        await send({"type": "http.response.body", "body": NOOP_BODY})

    uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, ssl_context_factory=lambda _c, _d: context,
        http=protocol_with_timeout(10.0), loop=EVENT_LOOP, lifespan="off", access_log=False, log_config=None,
        log_level="warning", server_header=False, proxy_headers=False, timeout_keep_alive=30,
    )).run()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(command: list[str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.sched_setaffinity(process.pid, {SERVER_CPU})  # before it has finished importing anything
    return process


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def echo_floor(count: int = 2000) -> tuple[float, float]:
    """p50 and p99 (ms) of a bare TCP echo between the two CPUs: what the machine itself adds."""
    listener = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:  # the echo server, on the server CPU
        os.sched_setaffinity(0, {SERVER_CPU})
        conn, _ = listener.accept()
        while data := conn.recv(4096):
            conn.sendall(data)
        os._exit(0)
    with socket.create_connection(listener.getsockname()) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            sock.sendall(b"x" * 512)
            sock.recv(4096)
            times.append(time.perf_counter() - started)
            time.sleep(0.001)
    os.waitpid(pid, 0)
    listener.close()
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def now() -> float:
    return time.perf_counter()  # uvloop's loop.time() ticks in whole milliseconds


# --- load ------------------------------------------------------------------------------------------


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes) -> bool:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length)
        return head.startswith(b"HTTP/1.1 200") and b'"allowed":' in body


async def connect(port: int, context: ssl.SSLContext, count: int) -> list[Connection]:
    pairs = [await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
             for _ in range(count)]
    return [Connection(r, w) for r, w in pairs]


@dataclass
class Result:
    latencies: list[float]
    errors: int
    seconds: float

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds


async def fixed_rate(connections: list[Connection], request: bytes, rate: float, seconds: float) -> Result:
    """Open loop: request i is due at start + i/rate; its latency counts from then."""
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for c in connections:
        idle.put_nowait(c)
    latencies: list[float] = []
    errors = 0
    begin = now() + 0.05

    async def one(due: float) -> None:
        nonlocal errors
        connection = await idle.get()
        try:
            ok = await connection.exchange(request)
        except Exception:
            ok = False
        idle.put_nowait(connection)
        if ok:
            latencies.append(now() - due)
        else:
            errors += 1

    tasks = []
    for i in range(int(rate * seconds)):
        due = begin + i / rate
        delay = due - now()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(due)))
    await asyncio.gather(*tasks)
    return Result(latencies, errors, now() - begin)


async def saturate(connections: list[Connection], request: bytes, seconds: float) -> Result:
    """Closed loop: every connection sends its next request as soon as the last one is answered."""
    latencies: list[float] = []
    errors = 0
    end = now() + seconds

    async def worker(connection: Connection) -> None:
        nonlocal errors
        while now() < end:
            sent = now()
            try:
                ok = await connection.exchange(request)
            except Exception:
                ok = False
            if ok:
                latencies.append(now() - sent)
            else:
                errors += 1

    start_time = now()
    await asyncio.gather(*(worker(c) for c in connections))
    return Result(latencies, errors, now() - start_time)


async def measure(
    port: int, pid: int, context: ssl.SSLContext, request: bytes, args: argparse.Namespace
) -> dict[str, Any]:
    connections = await connect(port, context, args.connections)
    await saturate(connections, request, 1.0)  # warm-up
    cpu = cpu_seconds(pid)
    steady = await fixed_rate(connections, request, args.rate, args.seconds)
    steady_cpu = cpu_seconds(pid) - cpu
    cpu = cpu_seconds(pid)
    peak = await saturate(connections, request, args.seconds)
    cpu = cpu_seconds(pid) - cpu
    for c in connections:
        c.writer.close()
    return {"steady": steady, "peak": peak, "cpu_us": cpu / max(1, len(peak.latencies)) * 1e6,
            "steady_cpu_us": steady_cpu / max(1, len(steady.latencies)) * 1e6}


async def first_admission(port: int, context: ssl.SSLContext, request: bytes, started: float) -> float:
    while True:
        try:
            (connection,) = await connect(port, context, 1)
            if await connection.exchange(request):
                connection.writer.close()
                return time.perf_counter() - started
        except OSError:
            pass
        await asyncio.sleep(0.005)


def in_process_us(body: bytes, endpoint: str, policy_paths: list[str], seconds: float = 2.0) -> float:
    """CPU per review of `parse_review` + `admit` in a warm loop: the engine's share with no transport."""
    from mlgate.loading.policies import default_policy_dir, load_policy_paths
    from mlgate.model.facts import NO_FACTS
    from mlgate_webhook.review import admit, parse_review

    policies = load_policy_paths(policy_paths or [default_policy_dir()])
    count, start = 0, time.process_time()
    while (spent := time.process_time() - start) < seconds:
        for _ in range(100):
            admit(parse_review(body, "application/json"), policies, NO_FACTS, endpoint)  # type: ignore[arg-type]
        count += 100
    return spent / count * 1e6


# --- main ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    import uvloop

    from mlgate_certs.throwaway import throwaway_pki

    os.sched_setaffinity(0, {CLIENT_CPU})
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # a lighter client: less of its own jitter
    pki = throwaway_pki(Path(tempfile.mkdtemp(prefix="mlgate-bench-")))
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    body = json.dumps(admission_review(pytorchjob())).encode()
    print(f"policies: {', '.join(args.policies) or 'the shipped set'}")
    print(f"request: PyTorchJob AdmissionReview, {len(body)} bytes; {args.connections} connections; "
          f"server on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU}; {args.seconds:g}s per phase")
    rows: dict[str, dict[str, Any]] = {}
    floor = echo_floor()
    print(f"machine: load average {os.getloadavg()[0]:.2f}; bare TCP echo between the CPUs: "
          f"p50 {floor[0]:.2f} ms, p99 {floor[1]:.2f} ms")

    port = free_port()
    started = time.perf_counter()
    policies = [arg for path in args.policies for arg in ("--policies", path)]
    mlgate = start([sys.executable, "-m", "mlgate_webhook", "serve", "--port", str(port), "--cert-file",
                    str(pki.server_cert), "--key-file", str(pki.server_key), *policies])
    try:
        startup = asyncio.run(first_admission(port, context, http_request("/validate", body), started))
        time.sleep(0.5)
        idle = rss_mb(mlgate.pid)
        for path in ("/validate", "/mutate"):
            rows[f"mlgate {path}"] = asyncio.run(measure(port, mlgate.pid, context, http_request(path, body), args))
        after = rss_mb(mlgate.pid)
    finally:
        mlgate.terminate()
        mlgate.wait(timeout=15)

    port = free_port()
    noop = start([sys.executable, __file__, "noop-server", str(port), str(pki.server_cert), str(pki.server_key)])
    try:
        asyncio.run(first_admission(port, context, http_request("/", body), time.perf_counter()))
        time.sleep(0.5)
        noop_idle = rss_mb(noop.pid)
        rows["do-nothing"] = asyncio.run(measure(port, noop.pid, context, http_request("/", body), args))
    finally:
        noop.terminate()
        noop.wait(timeout=15)
    engine = {name: in_process_us(body, name.rsplit("/", 1)[1], args.policies) for name in rows if name != "do-nothing"}
    report(rows, args, startup=startup, idle=idle, after=after, noop_idle=noop_idle, engine=engine)


def report(rows: dict[str, dict[str, Any]], args: argparse.Namespace, *, startup: float, idle: float,
           after: float, noop_idle: float, engine: dict[str, float]) -> None:
    print(f"\n{'endpoint':<18}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'max ms':>9}{'errors':>8}"
          f"   at {args.rate:g} req/s, server CPU per request  |  saturation req/s, CPU per request")
    for name, row in rows.items():
        steady, peak = row["steady"], row["peak"]
        print(f"{name:<18}{steady.quantile(0.5):>9.2f}{steady.quantile(0.99):>9.2f}{steady.quantile(0.999):>10.2f}"
              f"{max(steady.latencies, default=0) * 1000:>9.2f}{steady.errors + peak.errors:>8}"
              f"   (achieved {steady.throughput:,.0f}/s, CPU {row['steady_cpu_us']:.0f} us)"
              f"   |  {peak.throughput:>8,.0f}"
              f"  (p50 {statistics.median(peak.latencies) * 1000:.2f} ms, CPU {row['cpu_us']:.0f} us)")
    noop = rows["do-nothing"]
    noop_p99 = noop["steady"].quantile(0.99)
    print("\ntargets:")
    for name in ("mlgate /validate", "mlgate /mutate"):
        p99 = rows[name]["steady"].quantile(0.99)
        ratio = rows[name]["peak"].throughput / noop["peak"].throughput
        print(f"  {name}: p99 {p99:.2f} ms (target <= 5 ms and <= 2x do-nothing = {2 * noop_p99:.2f} ms); "
              f"saturation {ratio:.2f}x do-nothing (target >= 0.5x)")
    print(f"  idle RSS: mlgate {idle:.1f} MB after start, {after:.1f} MB after the load (target <= 80 MB); "
          f"do-nothing {noop_idle:.1f} MB")
    print(f"  start to first admission: {startup:.2f} s (target <= 1.5 s)")
    print(f"  (load average at the end: {os.getloadavg()[0]:.2f})")
    noop_cpu = noop["cpu_us"]
    print(f"\nceiling: parse_review + admit alone (warm loop, no transport) against the do-nothing's "
          f"{noop_cpu:.0f} us of CPU per request at saturation:")
    for name, cost in engine.items():
        print(f"  {name}: {cost:.0f} us per review; saturation could reach at most "
              f"{noop_cpu / (noop_cpu + cost):.2f}x do-nothing even if the rest cost what the do-nothing does")


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "noop-server":
        noop_server(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured phase")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, default=1000.0, help="requests per second in the fixed-rate phase")
    parser.add_argument("--policies", action="append", default=[],
                        help="policy file or directory for mlgate (repeatable); default: the shipped set. "
                             "An empty directory measures the transport alone.")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("webhook_bench: needs 2 CPUs (one for the server, one for the load generator)")
    compile_sources()
    run(args)


def compile_sources() -> None:
    """Bytecode for mlgate's own modules, as the container image ships it (Dockerfile: compileall).

    Without it, a machine with PYTHONDONTWRITEBYTECODE set compiles every module at every start,
    and the start-up figure would measure the compiler, not the server.
    """
    repo = Path(__file__).resolve().parents[1]
    folders = [str(repo / name) for name in ("mlgate", "webhook", "certs")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True)


if __name__ == "__main__":
    main()
