"""Malformed shapes for fuzzing: real manifests and the shipped policies, with fields swapped for what a
hand-written or hostile manifest may hold.

Everything here draws from a `random.Random`, so one implementation serves both the hypothesis tests
(`st.randoms()` hands them a Random whose draws hypothesis controls and shrinks) and `bench/fuzz.py` (a seeded
Random per object). `mutated(seed_obj, rng)` is the one entry point that changes an object; the oracles
(`exception_names`, `engine_level_errors`, `patch_problems`) are shared too, so the bench counts exactly what
the tests assert.
"""

from __future__ import annotations

import copy
import logging
import math
import pickle
import random
import re
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import jsonpatch

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.documents import read_documents
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import NO_FACTS, ClusterFacts, StaticFacts
from mlgate.model.results import Decision, Outcome, RuleResult
from mlgate.workloads.extract import extract

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
REAL = TESTS / "fixtures" / "real"
DEEP = 300  # levels of nesting put in a free-form field: deep, yet under orjson's and pickle's limits

# --- what goes in -------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def real_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every document of tests/fixtures/real that holds a pod template, as (`file#index`, object)."""
    found = []
    for document in read_documents([str(REAL)]):
        data = document.data
        if isinstance(data, dict) and extract(data) is not None:
            found.append((f"{Path(document.source).name}#{document.index}", data))
    return tuple(found)


def minimal_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    """The unit tests' minimal valid objects: GPU-bearing, hardened, one of each builder."""
    from builders import job, pod, pytorchjob, trainingjob

    return (("builders.pod", pod(gpus=2)), ("builders.job", job(gpus=1, parallelism=2)),
            ("builders.pytorchjob", pytorchjob(workers=2, gpus=4)), ("builders.trainingjob", trainingjob()))


@lru_cache(maxsize=1)
def seed_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    return real_objects() + minimal_objects()


@lru_cache(maxsize=1)
def shipped_policies() -> PolicySet:
    return load_policy_paths([default_policy_dir()])


SCHEDULERS = ("volcano", "yunikorn", "kueue", "kai", "coscheduling")  # examples/policies/gang-<scheduler>.yaml


@cache
def gang_policies(scheduler: str = "volcano") -> PolicySet:
    """The shipped set plus examples/policies/gang-<scheduler>.yaml: gang injection too, in namespaces labelled
    for that scheduler (as `cluster_facts(scheduler)` labels them), so every rule family runs."""
    return load_policy_paths([default_policy_dir(), REPO / "examples" / "policies" / f"gang-{scheduler}.yaml"])


@cache
def cluster_facts(scheduler: str = "volcano") -> StaticFacts:
    """A small cluster: namespaces labelled for a gang scheduler, mixed- and single-strategy MIG nodes and a plain
    GPU node, an RWO and an RWX claim, the real (Cluster)TrainingRuntimes (so TrainJobs render from them)."""
    runtimes = [obj for name, obj in real_objects() if obj.get("kind") in ("TrainingRuntime", "ClusterTrainingRuntime")]
    objects: list[dict[str, Any]] = [
        {"kind": "Namespace", "metadata": {"name": "ml", "labels": {"mlgate.dev/scheduler": scheduler}}},
        {"kind": "Namespace", "metadata": {"name": "default", "labels": {"mlgate.dev/scheduler": scheduler}}},
        {"kind": "Node", "metadata": {"name": "a100", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.count": "8"}},
         "status": {"allocatable": {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.5gb": "7",
                                    "nvidia.com/mig-3g.20gb": 2}}},
        {"kind": "Node", "metadata": {"name": "h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
         "status": {"allocatable": {"nvidia.com/gpu": 8}}},
        {"kind": "Node", "metadata": {"name": "a100-single", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu.count": "7"}},
         "status": {"allocatable": {"nvidia.com/gpu": "7"}}},
        {"kind": "StorageClass", "metadata": {"name": "efs", "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "efs.csi.aws.com"},
        {"kind": "StorageClass", "metadata": {"name": "ebs"}, "provisioner": "ebs.csi.aws.com"},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "checkpoints", "namespace": "ml"},
         "spec": {"accessModes": ["ReadWriteMany"]}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "ml"},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "ebs"}},
    ]
    return StaticFacts.from_objects([*objects, *runtimes])


# --- the mutations ------------------------------------------------------------------------------------------


def deep(levels: int, leaf: Any = "bottom", as_list: bool = False) -> Any:
    node = leaf
    for _ in range(levels):
        node = [node] if as_list else {"x": node}
    return node


# Field names the rules and the kind table read: a mutation that adds a key picks one of these, so it lands
# where something looks rather than in a field nothing reads.
FIELD_NAMES = (
    "containers", "initContainers", "ephemeralContainers", "name", "image", "resources", "limits", "requests",
    "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "amd.com/gpu", "securityContext",
    "capabilities", "add", "drop", "privileged", "allowPrivilegeEscalation", "runAsNonRoot", "runAsUser",
    "seccompProfile", "appArmorProfile", "type", "seLinuxOptions", "procMount", "sysctls", "windowsOptions",
    "hostProcess", "volumes", "volumeMounts", "mountPath", "persistentVolumeClaim", "claimName", "readOnly",
    "hostPath", "path", "emptyDir", "tolerations", "nodeSelector", "nvidia.com/gpu.product", "affinity",
    "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "matchExpressions",
    "key", "operator", "values", "os", "hostUsers", "hostNetwork", "hostPID", "hostIPC", "ports", "hostPort",
    "livenessProbe", "httpGet", "host", "lifecycle", "postStart", "env", "value", "restartPolicy", "replicas",
    "runPolicy", "backoffLimit", "cleanPodPolicy", "template", "spec", "metadata", "labels", "annotations",
    "namespace", "parallelism", "completions", "minReplicas", "maxReplicas", "numOfHosts", "size", "suspend",
    "schedulerName", "checkpoint", "uri", "modelUri", "storageUri", "minAvailable", "minMember", "instances",
    "workerGroupSpecs", "headGroupSpec", "replicatedJobs", "tasks", "trainer", "runtimeRef", "numNodes",
    "resourcesPerNode", "leaderWorkerTemplate", "workerTemplate", "leaderTemplate", "driver", "executor",
    "predictor", "model", "templates", "container", "script", "podSpecPatch", "deletionTimestamp",
    "generateName", "apiVersion", "kind", "framework", "gpu", "priorityClassName", "queue",
)
STRINGS = ("", " ", "x", "None", "null", "5", "-1", "1e400", "NaN", "Infinity", "0x10", "1.5", "500m", "8Gi", "²",
           "ALL", "Always", "RuntimeDefault", "Unconfined", "/", "/dev/shm", "s3://", "pvc://", "~1/~0",
           "ünïcödé", "名前", "💥🔥", "\u202e", "\x00", "a\nb", "x" * 300)
NUMBERS = (0, 1, -1, 5, 2**31, 2**63, 2**63 - 1, -(2**63) - 1, 2**64, 10**30, 0.5, -0.0, 1e-300, 1e300,
           float("inf"), float("-inf"), float("nan"))
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-7g.80gb",
                 "nvidia.com/mig-1g.5gb+me", "nvidia.com/mig-bogus", "amd.com/gpu")
GPU_COUNTS = (*NUMBERS, 1, 2, 8, 9, "1", "2", "1e400", "NaN", "-1", "2.5", "8Gi", "500m", True, None, "x")
PRODUCTS = ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
            "NVIDIA-A100-SXM4-40GB-MIG-9g.99gb", "X-MIG-", "-MIG-1g.5gbme-SHARED", "x" * 70, "")
INT_STRINGS = ("0", "7", "-3", "+5", "5\n", " 5", "²", "٣", "9" * 25, "9" * 5000, "1e3", "0x10", "")
# What a value may be swapped for; a callable makes a fresh one each time (containers are never shared).
REPLACEMENTS: tuple[Any, ...] = (
    None, True, False, *NUMBERS, *STRINGS,
    lambda: [], lambda: {}, lambda: [None], lambda: [5], lambda: ["ALL"], lambda: [[]], lambda: [{}],
    lambda: {"": None}, lambda: {"name": None}, lambda: {"name": 5}, lambda: {"x": {"y": []}},
    lambda: deep(DEEP), lambda: deep(DEEP, as_list=True),
)


def _fresh(value: Any) -> Any:
    return value() if callable(value) else value


def swap_type(value: Any, rng: random.Random) -> Any:
    """The same content in another JSON type: dict <-> list <-> str <-> int <-> None <-> bool."""
    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: bool(value), lambda: str(value)[:200],
        lambda: len(value) if isinstance(value, list | dict | str) else 5,
        lambda: list(value.values()) if isinstance(value, dict) else [value],
        lambda: {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else {"value": value},
    ]
    return rng.choice(choices)()


def locations(obj: Any, limit: int = 5000, depth: int = 40) -> list[tuple[Any, Any]]:
    """(parent, key) of every value in `obj` (breadth first, at most `limit`, at most `depth` levels down: real
    manifests are not half that deep, and a deep value is not put inside another), the root excluded."""
    found: list[tuple[Any, Any]] = []
    queue: deque[tuple[Any, int]] = deque([(obj, 0)])
    while queue and len(found) < limit:
        node, level = queue.popleft()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            found.append((node, key))
            if isinstance(value, dict | list) and level < depth:
                queue.append((value, level + 1))
    return found


def containers_in(obj: Any) -> list[dict[str, Any]]:
    """Every mapping found in a `containers`/`initContainers`/`ephemeralContainers` list anywhere in `obj`."""
    found = []
    for parent, key in locations(obj):
        if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(parent[key], list):
            found.extend(c for c in parent[key] if isinstance(c, dict))
    return found


def pod_specs_in(obj: Any) -> list[dict[str, Any]]:
    return [parent for parent, key in locations(obj) if key == "containers" and isinstance(parent, dict)]


def _one_mutation(obj: dict[str, Any], rng: random.Random) -> str:
    """Change one thing in `obj` (in place); say what, for the failure report."""
    places = locations(obj)
    if not places:
        obj["spec"] = _fresh(rng.choice(REPLACEMENTS))
        return "spec replaced"
    # half the time, aim at what a pod spec holds (that is where the rules look)
    specs = pod_specs_in(obj)
    focus = rng.random() < 0.5 and specs
    if focus:
        spec = rng.choice(specs)
        places = locations(spec) or [(spec, "containers")]
    parent, key = rng.choice(places)
    kind = rng.randrange(100)
    if kind < 30:
        parent[key] = _fresh(rng.choice(REPLACEMENTS))
        return f"{key!r} replaced"
    if kind < 45:
        parent[key] = swap_type(parent[key], rng)
        return f"{key!r} type swapped"
    if kind < 57:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return f"{key!r} removed"
    if kind < 72:  # a field something reads, with a value it does not expect, in some mapping nearby
        target = parent if isinstance(parent, dict) else parent[key] if isinstance(parent[key], dict) else None
        if target is None:
            dicts = [p for p, _ in places if isinstance(p, dict)] or [obj]
            target = rng.choice(dicts)
        name = rng.choice(FIELD_NAMES)
        target[name] = _fresh(rng.choice(REPLACEMENTS))
        return f"{name!r} added"
    if kind < 80:  # container names: None, a number, a duplicate
        named = containers_in(obj)
        if named:
            container = rng.choice(named)
            container["name"] = rng.choice((None, 5, "", rng.choice(named).get("name"), "名前", "x" * 300))
            return "container name changed"
        return "no container to rename"
    if kind < 86:  # the whole container list (or a pod spec) of one odd type
        if specs:
            spec = rng.choice(specs)
            spec[rng.choice(("containers", "initContainers", "ephemeralContainers", "volumes"))] = _fresh(
                rng.choice((5, None, "x", True, lambda: {}, lambda: [5], lambda: [None], lambda: [[]])))
            return "container list replaced"
        return "no pod spec"
    if kind < 92:  # an empty container
        value = parent[key]
        parent[key] = type(value)() if isinstance(value, dict | list | str) else value
        return f"{key!r} emptied"
    if kind < 95:  # deep nesting in a free-form field
        target = obj.setdefault("metadata", {}) if isinstance(obj.get("metadata"), dict) else obj
        field = rng.choice(("annotations", "labels", "x-free-form"))
        target[field] = {"deep": deep(DEEP, as_list=rng.random() < 0.5)}
        return f"{field} nested {DEEP} deep"
    if kind < 98:  # a GPU or MIG count, whole or not
        named = containers_in(obj)
        if named:
            container = rng.choice(named)
            section = rng.choice(("limits", "requests"))
            resources = container.setdefault("resources", {})
            if isinstance(resources, dict):
                entries = resources.setdefault(section, {})
                if isinstance(entries, dict):
                    entries[rng.choice(GPU_RESOURCES)] = rng.choice(GPU_COUNTS)
                    return f"gpu {section} set"
        return "no container for a gpu count"
    # node selection the MIG rules read: a product label, or a required node affinity expression
    if not specs:
        return "no pod spec to select nodes"
    spec = rng.choice(specs)
    if rng.random() < 0.4:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": rng.choice(PRODUCTS)}
        return "nodeSelector set"
    expression = {"key": rng.choice(("nvidia.com/gpu.product", "nvidia.com/gpu.count", "x")),
                  "operator": rng.choice(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus", None)),
                  "values": rng.choice((lambda: [rng.choice(PRODUCTS)], lambda: [rng.choice(INT_STRINGS)],
                                        lambda: _fresh(rng.choice(REPLACEMENTS))))()}
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}
    return f"node affinity {expression['operator']}"
    return "nothing changed"


def grown(obj: dict[str, Any], rng: random.Random) -> str:
    """One list in a pod spec (containers, volumes, env, tolerations...) repeated up to 4,000 times: large
    objects, for the time an evaluation takes (the API server takes up to 3 MiB)."""
    lists = [(p, k) for p, k in locations(obj) if isinstance(p[k], list) and p[k]]
    if not lists:
        return "nothing to grow"
    parent, key = rng.choice(lists)
    times = rng.choice((10, 100, 1000, 4000)) // len(parent[key]) + 1
    parent[key] = [copy.deepcopy(item) for _ in range(times) for item in parent[key]]
    return f"{key!r} grown to {len(parent[key])} items"


def mutated(seed: dict[str, Any], rng: random.Random, count: int | None = None,
            grow: float = 0.0) -> tuple[dict[str, Any], list[str]]:
    """A deep copy of `seed` with `count` (default 1 to 4) malformed changes, and what they were; with
    probability `grow`, one list grown large first."""
    obj = copy.deepcopy(seed)
    done = [grown(obj, rng)] if grow and rng.random() < grow else []
    done += [_one_mutation(obj, rng) for _ in range(count if count is not None else rng.randint(1, 4))]
    return obj, done


# --- what must hold -----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def exception_names() -> frozenset[str]:
    """Every exception class name this process knows (builtins, decimal's, pydantic's, ...)."""
    names: set[str] = set()
    stack: list[type] = [BaseException]
    while stack:
        cls = stack.pop()
        names.add(cls.__name__)
        stack.extend(cls.__subclasses__())
    return frozenset(names)


_LEADING_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?::|$)")


def looks_like_exception(note: str) -> bool:
    """A note that is `<ExceptionType>: ...` (the engine's wording for a rule that raised), not a reason."""
    match = _LEADING_NAME.match(note)
    return bool(match) and match.group(1).rsplit(".", 1)[-1] in exception_names()


UNSETTLED = "mutations did not settle"


def engine_level_errors(decision: Decision) -> list[RuleResult]:
    """Results that say a rule raised (or the mutations oscillated): a rule bug, never a verdict."""
    return [r for r in decision.results
            if r.outcome is Outcome.ERROR and (looks_like_exception(r.note) or r.note == UNSETTLED)]


def patch_problems(obj: dict[str, Any], decision: Decision, policies: PolicySet, facts: ClusterFacts,
                   operation: str = "CREATE", old_obj: dict[str, Any] | None = None) -> list[str]:
    """The mutation patch applies to `obj` and gives `decision.mutated`, and mutating that adds nothing."""
    if not decision.patch:
        return []
    problems = []
    try:  # on a copy pickle makes: jsonpatch's own deepcopy recurses past the limit on 300-level nesting
        patched = jsonpatch.apply_patch(pickle.loads(pickle.dumps(obj)), decision.patch, in_place=True)
    except Exception as exc:
        return [f"patch does not apply: {type(exc).__name__}: {exc}"]
    if not same(patched, decision.mutated):
        problems.append("patch applied to the input is not the mutated object")
    again = evaluate(patched, policies, facts=facts, operation=operation, old_obj=old_obj)  # type: ignore[arg-type]
    if again.patch:
        problems.append(f"mutating the mutated object patches again: {again.patch[:3]}")
    return problems


def same(a: Any, b: Any) -> bool:
    """Equality in which NaN equals NaN (YAML's .nan must not make an object differ from its copy), walked
    without recursion (fuzzed objects nest hundreds of levels deep)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((v, y[k]) for k, v in x.items())
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif not (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))):
            return False
    return True


def raised_at(exc: BaseException) -> tuple[str, str]:
    """(file relative to the repo, function) of the innermost frame of mlgate's own code that `exc` passed."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.startswith(str(REPO)) and "/.venv/" not in f.filename and "/tests/" not in f.filename]
    if not frames:
        return ("?", "?")
    return str(Path(frames[-1].filename).relative_to(REPO)), frames[-1].name


class Failures(logging.Handler):
    """Exceptions the engine and the webhook caught and logged (a rule that raised, an engine failure)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.caught: list[BaseException] = []
        self.messages: list[str] = []  # beside each: what was logged ("check gpu/gpu.limits failed")

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.caught.append(record.exc_info[1])
            self.messages.append(record.getMessage())

    def __enter__(self) -> Failures:
        logger = logging.getLogger("mlgate")
        logger.addHandler(self)
        self._level = logger.level
        logger.setLevel(min(logger.getEffectiveLevel(), logging.ERROR))
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("mlgate")
        logger.removeHandler(self)
        logger.setLevel(self._level)


def judge_all(obj: dict[str, Any], policies: PolicySet, facts: ClusterFacts = NO_FACTS,
              old_obj: dict[str, Any] | None = None) -> Iterator[tuple[str, Decision]]:
    """evaluate() as admission runs it: CREATE with mutation, CREATE validate-only, UPDATE against `old_obj`."""
    yield "CREATE", evaluate(obj, policies, facts=facts)
    yield "CREATE validate", evaluate(obj, policies, facts=facts, mutate=False)
    if old_obj is not None:
        yield "UPDATE", evaluate(obj, policies, facts=facts, operation="UPDATE", old_obj=old_obj)
