"""The engine's view of a workload: pod templates with their field paths, and job context.

Rules see only this view, never the kind. `PodTemplate.path()` turns a path inside the pod
spec into the path of the field the user wrote, and the `*_target()` methods say where a
mutation must write so that it lands in the user's object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mlgate.model import pointer
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.kinds import Gang, KindSpec, Launcher, RunPolicy

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

PathFn = Callable[[tuple[str | int, ...]], str]
TargetFn = Callable[[], dict[str, Any]]
ContainerTargetFn = Callable[[str], dict[str, Any]]
T = TypeVar("T")


class Unwritable(Exception):
    """A mutation asked to write where the kind keeps no field of its own (a rendered pod, a bare PodSpec's
    metadata): the engine records the rule as skipped with this reason, and keeps nothing it half-wrote."""


@dataclass
class PodTemplate:
    role: str
    replicas: int
    rendered_spec: dict[str, Any]  # the pod spec as it will run (read-only for rules)
    rendered_metadata: dict[str, Any]
    path_fn: PathFn
    pod_target: TargetFn
    container_target: ContainerTargetFn
    meta_target: TargetFn
    meta_pointer: str
    restart_policy_pointer: str | None = None
    main_container: str | None = None
    # where the pod's DRA claims are looked up (rules/claims.py): its namespace and the cluster facts
    namespace: str = "default"
    facts: ClusterFacts = field(default_factory=lambda: NO_FACTS, compare=False, repr=False)
    # Views that are not the user's own dicts (rendered, or missing until a write creates them)
    # are rebuilt after a target was handed out, so a rule sees its own writes when it reads on.
    rerender: Callable[[], tuple[dict[str, Any], dict[str, Any]]] | None = None
    # how many targets were handed out: a one-item list the targets count in (a box, not a function, because
    # every read of the view looks at it)
    writes: list[int] | None = None
    _seen_writes: int = 0
    _container_cache: tuple[int, tuple[tuple[str, int, dict[str, Any]], ...]] | None = None
    _regular_cache: tuple[tuple[str, int, dict[str, Any]], ...] = ()
    # `derived` views: compute function -> (write count it was worked out at, value)
    _derived: dict[Callable[[PodTemplate], Any], tuple[int, Any]] = field(default_factory=dict, compare=False)

    def _refresh(self, writes: int) -> None:
        assert self.rerender is not None
        self._seen_writes = writes
        self.rendered_spec, self.rendered_metadata = self.rerender()

    @property
    def spec(self) -> dict[str, Any]:
        if self.rerender is not None and self.writes is not None and self.writes[0] != self._seen_writes:
            self._refresh(self.writes[0])
        return self.rendered_spec

    @property
    def metadata(self) -> dict[str, Any]:
        if self.rerender is not None and self.writes is not None and self.writes[0] != self._seen_writes:
            self._refresh(self.writes[0])
        return self.rendered_metadata

    def path(self, *tokens: str | int) -> str:
        """Pointer, in the user's object, of a field given relative to the pod spec."""
        return self.path_fn(tokens)

    def containers(self) -> tuple[tuple[str, int, dict[str, Any]], ...]:
        """Every container of every kind (init, regular, ephemeral), as PSA's visitor does.

        Kept until the next write: every check walks these, many times per object.
        """
        writes = self.writes[0] if self.writes is not None else 0
        cache = self._container_cache
        if cache is None or cache[0] != writes:
            spec = self.spec
            found = tuple(  # a list of another type (`containers: 5`, which the API server refuses) holds none
                (key, index, container)
                for key in CONTAINER_LISTS
                for index, container in enumerate(as_list(spec.get(key)))
                if isinstance(container, dict)
            )
            cache = self._container_cache = (writes, found)
            self._regular_cache = tuple(c for c in found if c[0] != "ephemeralContainers")
        return cache[1]

    def regular_containers(self) -> tuple[tuple[str, int, dict[str, Any]], ...]:
        """Init and regular containers, kept like `containers()`."""
        self.containers()
        return self._regular_cache

    def derived(self, compute: Callable[[PodTemplate], T]) -> T:
        """`compute(self)`, kept like `containers()` until the next write: a view of the pod that several
        rules read (e.g. every container's GPUs) is worked out once per template, not once per rule.
        `compute` is the key, so it must be a function of the template alone that lives as long as
        the process (a module-level one, or one made once per setting and kept)."""
        writes = self.writes[0] if self.writes is not None else 0
        kept = self._derived.get(compute)
        if kept is None or kept[0] != writes:
            kept = self._derived[compute] = (writes, compute(self))
        return kept[1]  # type: ignore[no-any-return]


@dataclass
class Checkpoint:
    claim_name: str | None = None
    mount_path: str | None = None
    uri: str | None = None
    pointer: str = ""


NO_GANG = Gang(schedulers=[])


@dataclass
class Workload:
    """One object as rules see it. Everything kind-specific comes from its `KindSpec` (None: a kind no
    description knows, whose pod specs were found by search and are judged one pod each)."""

    obj: dict[str, Any]
    api_version: str
    kind: str
    name: str
    namespace: str
    templates: list[PodTemplate] = field(default_factory=list)
    description: KindSpec | None = None
    run_policy: RunPolicy | None = None  # its pointer made absolute for this object
    checkpoint: Checkpoint | None = None
    model_uri: tuple[str, str] | None = None  # (pointer, uri)
    gang_pointer: str | None = None  # where the kind keeps its own gang settings
    old_obj: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)  # how the pods were worked out, where a reader must know
    pods_counted: bool = True  # false: how many pods run at once is unknown (unknown kinds, workflow steps)
    old_workload: Callable[[], Workload | None] = field(default=lambda: None, compare=False)
    # what several checks of one evaluation work out alike (the quota charges): checks never write the object
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def known_kind(self) -> bool:
        return self.description is not None

    @property
    def gang(self) -> Gang:
        return self.description.gang if self.description is not None else NO_GANG

    @property
    def launch(self) -> Launcher | None:
        return self.description.launch if self.description is not None else None

    @property
    def mutable(self) -> bool:
        return self.description is not None and self.description.mutable

    @property
    def total_replicas(self) -> int:
        return sum(t.replicas for t in self.templates)

    @property
    def labels(self) -> dict[str, str]:
        """`metadata.labels`; labels (or metadata) that are not a mapping count as none."""
        return dict(as_dict(as_dict(self.obj.get("metadata")).get("labels")))

    def at(self, ptr: str) -> Any:
        return pointer.resolve(self.obj, ptr)


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a mapping, else an empty one: manifests may hold null or the wrong type anywhere."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def ensure(parent: dict[str, Any], key: str, kind: type = dict) -> Any:
    """parent[key], created empty (dict or list) where missing or null. A value of another type is what the
    user wrote (the API server's to refuse): it is never replaced, and the mutation asking is skipped."""
    value = parent.get(key)
    if value is None:
        value = kind()
        parent[key] = value
    elif not isinstance(value, kind):
        raise Unwritable(f"{key} is {type(value).__name__}, not {'a list' if kind is list else 'a mapping'}: "
                         "not mutated")
    return value
