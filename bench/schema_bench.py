"""What the CRD schema check costs `mlgate validate`, per document; prints figures, asserts nothing.

    .venv/bin/python bench/schema_bench.py [--count N]

- one-time: reading mlgate's CRDs and the upstream ones of tests/e2e_crds, and the first object
  (imports of jsonschema and cel-python, the validator, the CEL programs)
- per TrainingJob: every document different (image, replicas, checkpoint URI), and the same few documents
  repeated; the structural schema alone beside it. cel-python interprets a rule at some 300 µs, so outcomes
  are kept by what each rule reads (cel_rules.py): rules that test fields with has() are reused across jobs
- per JobSet (an 800 KB upstream CRD) and per document of kinds no CRD describes (a Pod: a dictionary look-up)

The webhook never pays any of this: the API server has checked the schema before it calls admission.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from builders import change, pod, trainingjob  # noqa: E402

from mlgate.loading import schemas  # noqa: E402
from mlgate.loading.schemas import SchemaCatalog, default_crd_dir  # noqa: E402


def timed(what: Callable[[], Any]) -> float:
    start = time.perf_counter()
    what()
    return time.perf_counter() - start


def per_document(catalog: SchemaCatalog, objects: list[dict[str, Any]]) -> float:
    """µs per document, over all of them."""
    return timed(lambda: [catalog.check(o) for o in objects]) / len(objects) * 1e6


def jobset(index: int) -> dict[str, Any]:
    container = {"name": "c", "image": f"registry.example/train:{index}"}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": f"js-{index}"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1 + index % 4, "template": {"spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}]}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    count = parser.parse_args().count

    own = timed(lambda: SchemaCatalog.from_paths([default_crd_dir()]))
    catalog = SchemaCatalog.from_paths([default_crd_dir()])
    upstream = timed(lambda: catalog.extend([ROOT / "tests" / "e2e_crds"]))
    first = timed(lambda: catalog.check(trainingjob()))
    print(f"one-time: mlgate's CRDs {own * 1e3:.1f} ms, tests/e2e_crds {upstream * 1e3:.0f} ms, "
          f"first TrainingJob (imports, validator, CEL programs) {first * 1e3:.0f} ms")

    different = [change(change(trainingjob(replicas=1 + i % 50), "/spec/image", f"registry.example/train:{i}"),
                        "/spec/checkpoint", {"uri": f"s3://ckpt/job-{i}"}) for i in range(count)]
    repeated = [trainingjob(replicas=1 + i % 4) for i in range(count)]
    print(f"TrainingJob, every one different:       {per_document(catalog, different):7.0f} µs/document")
    print(f"TrainingJob, blocks repeated:           {per_document(catalog, repeated):7.0f} µs/document")
    plain = SchemaCatalog([_without_rules(c) for c in _crds()])
    print(f"TrainingJob, structural schema alone:   {per_document(plain, different):7.0f} µs/document")
    print(f"JobSet (upstream CRD), every one different: {per_document(catalog, [jobset(i) for i in range(count)]):5.0f}"
          " µs/document")
    print(f"Pod (no CRD):                           {per_document(catalog, [pod()] * count):7.2f} µs/document")


def _crds() -> list[dict[str, Any]]:
    import yaml

    return [d for p in sorted(default_crd_dir().glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d and d.get("kind") == schemas.CRD_KIND]


def _without_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_rules(v) for v in node]
    return node


if __name__ == "__main__":
    main()
