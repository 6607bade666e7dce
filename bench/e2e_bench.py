"""The webhook end to end, through a real kube-apiserver: prints figures, asserts nothing (`make bench-e2e`).

    .venv/bin/python bench/e2e_bench.py [--jobs 1000]

A control plane of the test harness (etcd and kube-apiserver on loopback, tests/e2e/control_plane.py) with the
Kubeflow CRDs. `--jobs` PyTorchJobs are created (stored, not dry-run) one after another over one kept-alive HTTPS
connection, first in a namespace with no webhook registered, then, with `mlgate serve` registered by the shipped
configurations (manifests/webhooks.yaml: the jobs mutating webhook, failurePolicy Ignore, and the ML jobs validating
webhook, Fail), in another. It prints the creates' round trip in both runs, and the API server's own
`apiserver_admission_webhook_admission_duration_seconds` for each of mlgate's webhooks over the second run: the
difference of two scrapes of the API server's /metrics, with p50 and p99 interpolated within its buckets as
Prometheus' histogram_quantile does (the metric is defined in k8s.io/apiserver pkg/admission/metrics/metrics.go;
its buckets are coarse, so the mean, from _sum and _count, is printed too).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the harness is a test helper, not an installed package
from control_plane import ControlPlane, find_binaries  # noqa: E402
from e2e_objects import pytorchjob  # noqa: E402
from e2e_webhook import WebhookProcess  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

METRIC = "apiserver_admission_webhook_admission_duration_seconds"
MLGATE_SUFFIX = ".mlgate.dev"  # the names of the shipped webhooks end so
Buckets = dict[tuple[str, str], dict[float, float]]  # (webhook name, type) -> le -> cumulative count


def create_all(plane: ControlPlane, namespace: str, count: int, prefix: str = "job") -> tuple[list[float], int]:
    """`count` PyTorchJobs created in `namespace`: the round trip of each (ms), and how many were not 201."""
    assert plane.pki is not None
    connection = http.client.HTTPSConnection("127.0.0.1", plane.api_port, context=plane.ssl_context(), timeout=30)
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    latencies, failed = [], 0
    for i in range(count):
        body = json.dumps(pytorchjob(f"{prefix}-{i}", {"nvidia.com/gpu": 1})).encode()
        began = time.perf_counter()
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        answer = response.read()
        latencies.append((time.perf_counter() - began) * 1000)
        if response.status != 201:
            failed += 1
            if failed == 1:
                print(f"  first failure: {response.status} {answer[:300]!r}")
    connection.close()
    return latencies, failed


def scrape(plane: ControlPlane) -> tuple[Buckets, dict[tuple[str, str], tuple[float, float]]]:
    """mlgate's webhooks in the API server's admission webhook histogram: buckets, and (sum, count)."""
    status, text = plane.get("/metrics")
    assert status == 200, text[:300]
    buckets: Buckets = {}
    totals: dict[tuple[str, str], list[float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            name = sample.labels.get("name", "")
            if not name.endswith(MLGATE_SUFFIX) or sample.labels.get("operation") != "CREATE":
                continue
            key = (name, sample.labels.get("type", ""))  # summed over `rejected`
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                buckets.setdefault(key, {})[le] = buckets.get(key, {}).get(le, 0.0) + sample.value
            elif sample.name.endswith("_sum"):
                totals.setdefault(key, [0.0, 0.0])[0] += sample.value
            elif sample.name.endswith("_count"):
                totals.setdefault(key, [0.0, 0.0])[1] += sample.value
    return buckets, {k: (v[0], v[1]) for k, v in totals.items()}


def quantile(q: float, cumulative: dict[float, float]) -> float:
    """histogram_quantile: linear interpolation within the bucket the q-th observation falls in (seconds)."""
    bounds = sorted(cumulative)
    total = cumulative[math.inf]
    if total == 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for le in bounds:
        if cumulative[le] >= rank:
            if le == math.inf:
                return lower  # in the open bucket: its lower bound, as Prometheus answers
            return lower + (le - lower) * (rank - below) / max(cumulative[le] - below, 1e-12)
        lower, below = le, cumulative[le]
    return lower


def summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"p50 {statistics.median(ordered):6.1f} ms, p99 {p99:6.1f} ms, mean {statistics.fmean(ordered):6.1f} ms "
            f"({len(ordered)} creates, {sum(ordered) / 1000:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="mlgate-e2e-bench-") as tmp:
        plane = ControlPlane(find_binaries(), Path(tmp) / "plane")
        webhook = WebhookProcess(plane, Path(tmp) / "webhook")
        try:
            plane.start()
            for namespace in ("plain", "guarded"):
                plane.kubectl("create", "namespace", namespace).check()
            create_all(plane, "plain", 20, "warm-up")  # warm-up: the CRD's handlers, the connection
            without, failed_without = create_all(plane, "plain", args.jobs)
            webhook.start()
            webhook.register("guarded")
            create_all(plane, "guarded", 20, "warm-up")
            before, before_totals = scrape(plane)
            with_webhook, failed_with = create_all(plane, "guarded", args.jobs)
            after, after_totals = scrape(plane)
        finally:
            webhook.stop()
            plane.stop()
    print(f"{args.jobs} PyTorchJobs created through kube-apiserver, one at a time over one connection:")
    print(f"  without a webhook:          {summary(without)}, {failed_without} not created")
    print(f"  with mlgate's webhooks:     {summary(with_webhook)}, {failed_with} not created")
    print(f"  {METRIC}, over the {args.jobs} creates with the webhook (API server's own figures):")
    for key in sorted(after):
        cumulative = {le: count - before.get(key, {}).get(le, 0.0) for le, count in after[key].items()}
        total_sum, count = (a - b for a, b in zip(after_totals[key], before_totals.get(key, (0.0, 0.0)),
                                                  strict=True))
        if count == 0:
            continue
        name, kind = key
        print(f"    {name} ({kind}): {count:.0f} calls, p50 {quantile(0.5, cumulative) * 1000:.1f} ms, "
              f"p99 {quantile(0.99, cumulative) * 1000:.1f} ms, mean {total_sum / count * 1000:.1f} ms")
    print(f"  bucket bounds (s): {', '.join(f'{le:g}' for le in sorted(next(iter(after.values()), {})))}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")


if __name__ == "__main__":
    main()
