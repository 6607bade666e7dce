"""Benchmark the reconciler against a local control plane (etcd + kube-apiserver); prints figures, asserts nothing.

    make bench-reconciler     # or: .venv/bin/python bench/reconcile_bench.py [--jobs 100] [--memory-jobs 1000]

1. Throughput: the controller runs in this process (informers, work queue, `--workers` workers, `--qps` token
   bucket); `--jobs` TrainingJobs of 4 replicas are created at once. Figures: wall time from the first create to
   every pod and Service existing, and to every status saying Created; API writes per job by verb and kind,
   against the minimum (4 pods + 1 Service + 1 status update = 6; the target is within 20% of it; the finalizer
   patch and the phase Event are listed apart); the reconcile pass latency p50/p99/max over every pass; the API
   requests the passes sent, per pass by verb (the informers' LIST and WATCH are apart and not counted). Then a
   steady-state round: every job is queued once more, and the requests of those passes alone are counted
   (target: no reads beyond the informer caches, no writes).
2. Memory: `python -m mlgate_reconciler` as its own process while it materializes and then keeps `--memory-jobs`
   jobs (4,000 pods with the default) in its informers; its peak RSS (VmHWM) is the figure (target <= 100 MB).
The control plane needs `make control-plane` (built binaries are cached).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from control_plane import ControlPlane, find_binaries, free_port  # noqa: E402
from e2e_objects import in_namespace, trainingjob  # noqa: E402

from mlgate.kube.watch import api_get  # noqa: E402
from mlgate.loading.policies import load_policy_paths  # noqa: E402
from mlgate_reconciler.client import (  # noqa: E402
    PATHS,
    KubeClient,
    Transport,
    collection_path,
    kube_transport,
    rate_limited,
)
from mlgate_reconciler.controller import Controller  # noqa: E402
from mlgate_reconciler.metrics import ReconcilerMetrics  # noqa: E402

REPLICAS = 4
MINIMUM_WRITES = REPLICAS + 1 + 1  # pods + the headless Service + one status update


def counted(transport: Transport, namespace: str, seen: Counter[str]) -> Transport:
    """The transport, counting every request in `seen` by verb and kind ("LIST Pod", "GET TrainingJob")."""
    kinds = {collection_path(api_version, kind, namespace): kind for api_version, kind in PATHS}

    def send(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        collection = path.rpartition("/")[0]
        if method == "GET" and path in kinds:
            what = f"LIST {kinds[path]}"
        elif path.endswith("/status"):
            what = f"{method} {kinds.get(collection.rpartition('/')[0], path)} status"
        else:
            what = f"{method} {kinds.get(path, kinds.get(collection, path))}"
        seen[what] += 1
        return transport(method, path, query, body, content_type)

    return send


def per_pass(title: str, seen: Counter[str], passes: int) -> None:
    total = sum(seen.values())
    print(f"{title}: {passes} passes, {total} requests, {total / max(passes, 1):.2f} per pass")
    for what, n in sorted(seen.items()):
        print(f"  requests/pass {what:<30} {n / max(passes, 1):6.2f}")


def make_namespace(admin: KubeClient, name: str) -> None:
    admin.transport("POST", "/api/v1/namespaces", {}, {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": name}}, "application/json")


def create_jobs(admin: KubeClient, namespace: str, count: int) -> None:
    for i in range(count):
        admin.create(in_namespace(trainingjob(f"job-{i:04d}", replicas=REPLICAS), namespace))


def count(admin: KubeClient, kind: str, namespace: str) -> int:
    return len(admin.list("v1", kind, namespace, "mlgate.dev/job-name"))


def created_statuses(admin: KubeClient, namespace: str) -> int:
    jobs = admin.list("mlgate.dev/v1alpha1", "TrainingJob", namespace)
    return sum(1 for job in jobs if (job.get("status") or {}).get("phase") == "Created")


def wait(what: str, probe: Any, timeout: float) -> float:
    start = time.perf_counter()
    while not probe():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)
    return time.perf_counter()


def throughput(cluster: ControlPlane, jobs: int, workers: int, qps: float) -> None:
    admin = KubeClient(kube_transport(str(cluster.kubeconfig)))
    make_namespace(admin, "bench")
    requests: Counter[str] = Counter()
    client = KubeClient(rate_limited(counted(kube_transport(str(cluster.kubeconfig)), "bench", requests), qps,
                                     int(qps)))
    policies = load_policy_paths([REPO / "policies"])
    controller = Controller(client, api_get(str(cluster.kubeconfig), False), policies, ReconcilerMetrics(),
                            namespace="bench", workers=workers, resync=3600)
    durations: list[float] = []
    run_pass = controller.process

    def timed(key: tuple[str, str, str]) -> None:
        started = time.perf_counter()
        run_pass(key)
        durations.append(time.perf_counter() - started)

    controller.process = timed  # type: ignore[method-assign]
    stop = threading.Event()
    threading.Thread(target=controller.serve, args=(stop,), daemon=True).start()
    wait("the informers", controller.synced, 60)
    start = time.perf_counter()
    create_jobs(admin, "bench", jobs)
    created = time.perf_counter()
    children = wait("every pod and service", lambda: count(admin, "Pod", "bench") == jobs * REPLICAS
                    and count(admin, "Service", "bench") == jobs, 600)
    statuses = wait("every status", lambda: created_statuses(admin, "bench") == jobs, 600)
    time.sleep(3)  # let late watch events run their (write-free) passes
    materialized, first_passes = Counter(requests), len(durations)
    steady_writes = Counter(client.writes)
    for i in range(jobs):  # a steady-state round, as a resync queues every owner
        controller.queue.add(("TrainingJob", "bench", f"job-{i:04d}"))
    steady_start = time.perf_counter()
    wait("the steady-state round", lambda: len(durations) >= first_passes + jobs and not len(controller.queue), 300)
    steady_end = time.perf_counter()
    time.sleep(1)
    stop.set()
    steady = Counter(requests)
    steady.subtract(materialized)
    steady_written = Counter(client.writes)
    steady_written.subtract(steady_writes)
    logging.getLogger("mlgate").setLevel(logging.CRITICAL)  # the watches end noisily when the API server stops
    writes = steady_writes
    object_writes = sum(n for k, n in writes.items() if k not in ("patch TrainingJob", "create Event"))
    print(f"\n== {jobs} TrainingJobs x {REPLICAS} replicas, {workers} workers, {qps:g} qps ==")
    print(f"creating the jobs (admin client)        {created - start:7.2f} s")
    print(f"first create -> all children created    {children - start:7.2f} s")
    print(f"first create -> all statuses Created    {statuses - start:7.2f} s")
    for what, n in sorted(writes.items()):
        print(f"  writes/job {what:<28} {n / jobs:6.2f}")
    print(f"writes/job (pods, services, status)     {object_writes / jobs:7.2f}   minimum {MINIMUM_WRITES}, "
          f"ratio {object_writes / jobs / MINIMUM_WRITES:.2f} (target <= 1.20)")
    print(f"writes/job, all (finalizer, events too) {sum(writes.values()) / jobs:7.2f}")
    ordered = sorted(durations[:first_passes])
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"passes {len(ordered)}: p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {ordered[-1] * 1000:.1f} ms")
    per_pass("requests while materializing", materialized, first_passes)
    per_pass(f"steady-state round ({steady_end - steady_start:.2f} s)", +steady, len(durations) - first_passes)
    print(f"  writes in the steady-state round         {sum((+steady_written).values())}")


def memory(cluster: ControlPlane, jobs: int, workers: int, qps: float, directory: Path) -> None:
    admin = KubeClient(kube_transport(str(cluster.kubeconfig)))
    make_namespace(admin, "memory")
    port = free_port()
    log = (directory / "reconciler.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(cluster.kubeconfig),
                                "--namespace", "memory", "--workers", str(workers), "--qps", str(qps),
                                "--burst", str(int(qps)), "--metrics-address", f"127.0.0.1:{port}",
                                "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
    try:
        start = time.perf_counter()
        create_jobs(admin, "memory", jobs)
        done = wait("every pod", lambda: count(admin, "Pod", "memory") == jobs * REPLICAS, 1800)
        wait("every status", lambda: created_statuses(admin, "memory") == jobs, 600)
        time.sleep(3)
        status = Path(f"/proc/{process.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        print(f"\n== memory: {jobs} TrainingJobs x {REPLICAS} replicas cached ({jobs * REPLICAS} pods) ==")
        print(f"all pods created after                  {done - start:7.1f} s")
        print(f"reconciler peak RSS (VmHWM)             {int(fields['VmHWM'].split()[0]) / 1024:7.1f} MB "
              f"(target <= 100 MB)")
        print(f"reconciler RSS now (VmRSS)              {int(fields['VmRSS'].split()[0]) / 1024:7.1f} MB")
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--memory-jobs", type=int, default=1000, help="0 skips the memory run")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--qps", type=float, default=100.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlgate-reconcile-bench-") as tmp:
        cluster = ControlPlane(find_binaries(), Path(tmp) / "control-plane")
        print(f"starting etcd + kube-apiserver (cpus: {os.cpu_count()})", flush=True)
        cluster.start()
        try:
            throughput(cluster, args.jobs, args.workers, args.qps)
            if args.memory_jobs:
                memory(cluster, args.memory_jobs, args.workers, args.qps, Path(tmp))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
