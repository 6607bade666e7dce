"""Evaluation is linear in the size of what it judges: judging 8,000 containers (or volumes, or templates) costs
at most 20 times judging 400, with and without mutation. A quadratic step anywhere (a path worked out by
rendering the pod again for every finding, a container looked up by scanning the list for every write, every
template compared with every other) costs about 400 times, so this fails on it.

Cost is counted two ways. The work: every function call, Python's and the C built-ins' (cProfile's count), must
grow at most 20 times; that count is exact and the same on every machine. The time: CPU seconds, best of
three with the garbage collector paused, must grow at most 100 times. Linear code measures 22-27 times on an idle
machine and up to 42 times on a busy one, because 8,000 containers no longer fit the processor's caches and each
step gets slower (the call counts stay at 19.4-19.9 times); a quadratic step inside one C call, which the call
count cannot see, shows as about 400 times."""

from __future__ import annotations

import copy
import cProfile
import gc
import pstats
import time
from collections.abc import Callable
from typing import Any

import pytest

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from tests.builders import pod_spec

SHIPPED = load_policy_paths([default_policy_dir()])
SMALL, LARGE = 400, 8000


def trainingjob_overlay(n: int) -> dict[str, Any]:
    """A TrainingJob whose spec.template overlay holds n bare containers (only a name each)."""
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"framework": "pytorch", "image": "registry.example/train:1.0", "replicas": 2,
                     "resources": {"gpu": 1}, "template": {"spec": {"containers": [{"name": f"c{i}"}
                                                                                   for i in range(n)]}}}}


def pytorchjob_containers(n: int) -> dict[str, Any]:
    spec = pod_spec("main", 1)
    spec["containers"] = [{**copy.deepcopy(spec["containers"][0]), "name": f"c{i}"} for i in range(n)]
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": spec}}}}}


def pod_volumes(n: int) -> dict[str, Any]:
    spec = pod_spec("main", 1)
    spec["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"claim-{i}"}} for i in range(n)]
    spec["containers"][0]["volumeMounts"] = [{"name": f"v{i}", "mountPath": f"/data/{i}"} for i in range(n)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "ml"}, "spec": spec}


def jobset_templates(n: int) -> dict[str, Any]:
    jobs = [{"name": f"j{i}", "replicas": 1, "template": {"spec": {"template": {"spec": pod_spec("main", 1)}}}}
            for i in range(n // 20)]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"replicatedJobs": jobs}}


def unknown_kind(n: int) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Pipeline", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"stages": [{"run": {"template": {"spec": pod_spec(f"s{i}", 0)}}} for i in range(n // 20)]}}


def cpu_seconds(build: Callable[[int], dict[str, Any]], n: int, mutate: bool) -> float:
    """The best of three, with the cyclic garbage collector paused: its passes over every live object would
    make the large case look superlinear whatever the engine does."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            obj = build(n)
            start = time.process_time()
            evaluate(obj, SHIPPED, mutate=mutate)
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


def calls(build: Callable[[int], dict[str, Any]], n: int, mutate: bool) -> int:
    obj = build(n)
    profile = cProfile.Profile()
    profile.enable()
    evaluate(obj, SHIPPED, mutate=mutate)
    profile.disable()
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


BUILDS = [trainingjob_overlay, pytorchjob_containers, pod_volumes, jobset_templates, unknown_kind]


@pytest.mark.parametrize("mutate", [False, True], ids=["validate", "mutate"])
@pytest.mark.parametrize("build", BUILDS)
def test_judging_twenty_times_more_does_twenty_times_the_work_at_most(
        build: Callable[[int], dict[str, Any]], mutate: bool) -> None:
    small, large = calls(build, SMALL, mutate), calls(build, LARGE, mutate)
    assert large <= 20 * small, f"{build.__name__}: {SMALL} made {small} calls, {LARGE} made {large}"


@pytest.mark.parametrize("mutate", [False, True], ids=["validate", "mutate"])
@pytest.mark.parametrize("build", BUILDS)
def test_judging_twenty_times_more_takes_nothing_like_the_square_of_the_time(
        build: Callable[[int], dict[str, Any]], mutate: bool) -> None:
    small, large = cpu_seconds(build, SMALL, mutate), cpu_seconds(build, LARGE, mutate)
    assert large <= 100 * small, f"{build.__name__}: {SMALL} took {small:.3f} s, {LARGE} took {large:.3f} s"
