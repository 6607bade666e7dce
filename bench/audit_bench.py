"""The background audit against a real control plane: N batch Jobs across 50 namespaces, then `mlgate audit`.

    .venv/bin/python bench/audit_bench.py [--jobs 1000] [--namespaces 50] [--changes 20]

Starts etcd and kube-apiserver as the e2e harness does (tests/e2e/control_plane.py: `make control-plane` builds
them), stores the Jobs (one in ten asks for 12 GPUs, past gpu.max), starts the audit on the shipped policies/ and
prints:
- the time to a full report after start: from spawning the process until every namespace's PolicyReport is
  stored (and the audit's own `mlgate_audit_full_pass_seconds`, measured from its start);
- API writes per changed object: `--changes` Jobs created with a failing verdict, one per namespace (each should
  cost one report write), then as many relabelled (a changed object whose verdict is the same: no write);
- the audit's peak RSS (VmHWM of /proc/<pid>/status);
- the report sizes (serialized JSON: the largest, the mean, and the limit etcd sets, 1.5 MiB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from control_plane import ControlPlane, find_binaries  # noqa: E402
from e2e_audit import AuditProcess, reports  # noqa: E402

ETCD_LIMIT = 1536 * 1024


def job(name: str, gpus: int) -> dict[str, Any]:
    container = {"name": "train", "image": "registry.example/train:1.0",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


class Api:
    """POST and PATCH as the control plane's admin, from a pool of threads (kubectl is one process per call)."""

    def __init__(self, cluster: ControlPlane):
        self.server = cluster.server
        self.context = cluster.ssl_context()

    def send(self, method: str, path: str, body: dict[str, Any], content_type: str = "application/json") -> None:
        request = urllib.request.Request(self.server + path, data=json.dumps(body).encode(), method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            response.read()


def store(api: Api, namespaces: list[str], jobs: int) -> float:
    started = time.monotonic()
    for namespace in namespaces:
        api.send("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace}})
    work = [(namespaces[i % len(namespaces)], job(f"train-{i:05d}", 12 if i % 10 == 0 else 1)) for i in range(jobs)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda w: api.send("POST", f"/apis/batch/v1/namespaces/{w[0]}/jobs", w[1]), work))
    return time.monotonic() - started


def wait(what: str, probe: Any, timeout: float, interval: float = 0.5) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started


def settled(audit: AuditProcess, quiet: float = 3.0) -> None:
    """Until the report writes stop changing for `quiet` seconds."""
    last, since = audit.writes(), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.5)
        now = audit.writes()
        if now != last:
            last, since = now, time.monotonic()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        cluster = ControlPlane(find_binaries(), Path(tmp) / "control-plane")
        try:
            cluster.start()
            run(cluster, Path(tmp), args)
        finally:
            cluster.stop()


def run(cluster: ControlPlane, tmp: Path, args: argparse.Namespace) -> None:
    api = Api(cluster)
    namespaces = [f"team-{i:02d}" for i in range(args.namespaces)]
    stored = store(api, namespaces, args.jobs)
    print(f"stored {args.jobs} jobs in {len(namespaces)} namespaces in {stored:.1f}s")

    audit = AuditProcess(cluster, tmp / "audit", resync=3600, extra=["--write-qps", "20", "--write-burst", "50"])
    spawned = time.monotonic()
    audit.start(timeout=120)
    pid = audit.pid
    assert pid is not None
    # full: every object judged and every report written, as the audit reports it once its backlog is empty
    wait("the audit's full pass", lambda: audit.metric("mlgate_audit_full_pass_seconds") > 0, args.timeout, 0.2)
    full = time.monotonic() - spawned
    own = audit.metric("mlgate_audit_full_pass_seconds")
    reported = {r["metadata"]["namespace"] for r in reports(cluster)}
    assert reported == set(namespaces), sorted(set(namespaces) - reported)
    settled(audit)
    writes_start = audit.writes()

    changes = min(args.changes, len(namespaces))
    for i in range(changes):  # one new failing Job per namespace: its report changes
        api.send("POST", f"/apis/batch/v1/namespaces/{namespaces[i]}/jobs", job(f"late-{i:03d}", 16))
    wait("the new failures reported", lambda: sum(
        1 for r in reports(cluster) for res in r.get("results") or []
        if res["resources"][0]["name"].startswith("late-") and res["result"] == "fail") >= changes, args.timeout)
    settled(audit)
    failing_writes = audit.writes() - writes_start

    before = audit.writes()
    judged = audit.metric("mlgate_audit_objects_judged_total")
    for i in range(changes):  # a label: the object changed, its verdict did not
        api.send("PATCH", f"/apis/batch/v1/namespaces/{namespaces[i]}/jobs/train-{i:05d}",
                 {"metadata": {"labels": {"team": "vision"}}}, "application/merge-patch+json")
    wait("the relabelled jobs judged", lambda: audit.metric("mlgate_audit_objects_judged_total") >= judged + changes,
         args.timeout)
    settled(audit)
    relabel_writes = audit.writes() - before

    rss = peak_rss_mb(pid)
    held = audit.metric("mlgate_audit_objects")
    found = reports(cluster)
    sizes = [len(json.dumps(r, separators=(",", ":"))) for r in found]
    results = [len(r.get("results") or []) for r in found]
    audit.stop()
    print(f"jobs {args.jobs}, namespaces {len(namespaces)}, objects held by the audit {held:g}")
    print(f"time to a full report after start: {full:.1f}s (spawn to every object judged and every report "
          f"stored); the audit's own figure, from its start: {own:.1f}s")
    print(f"API writes per changed object: {failing_writes / changes:.2f} for a new failing job "
          f"({failing_writes:g} writes for {changes}), {relabel_writes / changes:.2f} for a relabelled job")
    print(f"peak RSS of the audit: {rss:.0f} MB")
    print(f"reports: {len(found)}, size largest {max(sizes) / 1024:.1f} KiB (etcd's limit per object: "
          f"{ETCD_LIMIT // 1024} KiB), mean {statistics.mean(sizes) / 1024:.1f} KiB, all {sum(sizes) / 1024:.0f} KiB; "
          f"results per report up to {max(results)}")


if __name__ == "__main__":
    main()
