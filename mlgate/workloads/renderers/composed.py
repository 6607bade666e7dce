"""A pod an operator builds from several fields of the user's object, with a path back to each of them.

Rules judge the rendered pod spec; a finding at `containers/0/securityContext/privileged` must still name
the field the user wrote (a Spark driver's `securityContext`, a KServe `model`, a TrainJob's `trainer`). So a
rendered pod carries, for each top-level field and each container, the pointer it came from, and a fallback
where a missing field belongs. Its targets are unwritable: kinds rendered this way decline mutations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlgate.model import pointer
from mlgate.model.workload import CONTAINER_LISTS, PodTemplate, Unwritable


@dataclass
class Composed:
    fallback: str  # where a field the pod lacks would be written
    spec: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    field_at: dict[str, str] = field(default_factory=dict)  # top-level pod field -> its pointer
    container_at: dict[tuple[str, int], str] = field(default_factory=dict)  # (list, index) -> the container's
    # (list, index, field) -> where a container field came from: the rest of a path follows it there
    field_of_container: dict[tuple[str, int, str], str] = field(default_factory=dict)
    # (list, index, field) -> the field the operator builds it from, in another shape: paths stop there
    built_from: dict[tuple[str, int, str], str] = field(default_factory=dict)

    def set(self, name: str, value: Any, at: str) -> None:
        """A top-level pod field, written at `at`; None leaves the field as it is."""
        if value is not None:
            self.spec[name] = value
            self.field_at[name] = at

    def add_container(self, key: str, container: Any, at: str) -> None:
        if isinstance(container, dict):
            items = self.spec.setdefault(key, [])
            self.container_at[(key, len(items))] = at
            items.append(container)

    def path(self, tokens: tuple[str | int, ...]) -> str:
        if len(tokens) >= 2 and tokens[0] in CONTAINER_LISTS:
            key, index = str(tokens[0]), tokens[1]
            if len(tokens) >= 3:
                found = (key, index, str(tokens[2]))
                if found in self.built_from:
                    return self.built_from[found]  # type: ignore[index]
                if found in self.field_of_container:
                    return pointer.join(self.field_of_container[found], *tokens[3:])  # type: ignore[index]
            at = self.container_at.get((key, index))  # type: ignore[arg-type]
            if at is not None:
                return pointer.join(at, *tokens[2:])
        if tokens and str(tokens[0]) in self.field_at:
            return pointer.join(self.field_at[str(tokens[0])], *tokens[1:])
        return pointer.join(self.fallback, *tokens)

    def template(self, role: str, replicas: int, kind: str) -> PodTemplate:
        def unwritable(*_: Any) -> dict[str, Any]:
            raise Unwritable(f"{kind} pods are built by its operator from fields mlgate does not write")

        return PodTemplate(role=role, replicas=max(replicas, 0), rendered_spec=self.spec,
                           rendered_metadata=self.metadata, path_fn=self.path, pod_target=unwritable,
                           container_target=unwritable, meta_target=unwritable,
                           meta_pointer=self.fallback + "#" + role, restart_policy_pointer=None)


def merge_by_name(base: list[Any], over: list[Any]) -> list[dict[str, Any]]:
    """Containers of `over` merged into those of `base` with the same name (strategic merge's key), the rest
    appended."""
    merged = [dict(c) for c in base if isinstance(c, dict)]
    names = {c["name"]: i for i, c in enumerate(merged) if isinstance(c.get("name"), str)}
    for container in over:
        if not isinstance(container, dict):
            continue
        name = container.get("name")
        if isinstance(name, str) and name in names:
            merged[names[name]].update(container)
        else:
            merged.append(dict(container))
    return merged
