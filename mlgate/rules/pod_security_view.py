"""What a Pod Security check sees: one pod template, the policy version, the policy's exceptions.

The checks (`pod_security_baseline.py`, `pod_security_restricted.py`) only read. Every container check visits
initContainers, containers and ephemeralContainers, as pod-security-admission's `policy/visitor.go` does.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlgate.model.workload import PodTemplate, as_dict
from mlgate.rules.common import container_label


@dataclass(frozen=True)
class Allow:
    """The policy's named exceptions, each read by its own check only."""

    capabilities: frozenset[str] = frozenset()
    host_path_prefixes: tuple[str, ...] = ()
    sysctls: frozenset[str] = frozenset()
    volume_types: frozenset[str] = frozenset()
    containers: Mapping[str, frozenset[str] | None] = field(default_factory=dict)  # None: every container check

    def exempts(self, container: str, check: str) -> bool:
        checks = self.containers.get(container, frozenset())
        return checks is None or check in checks

    def host_path(self, path: Any) -> bool:
        if not isinstance(path, str) or not path.startswith("/"):
            return False
        path = posixpath.normpath(path)
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.host_path_prefixes)


NO_EXCEPTIONS = Allow()


class Container:
    """One container as the checks see it; built once per pod template and shared by every check."""

    __slots__ = ("index", "key", "name", "sc", "spec", "template")

    def __init__(self, template: PodTemplate, key: str, index: int, spec: dict[str, Any]):
        self.template, self.key, self.index, self.spec = template, key, index, spec
        self.sc: dict[str, Any] = as_dict(spec.get("securityContext"))
        self.name = str(spec.get("name"))

    @property
    def label(self) -> str:
        return container_label(self.key, self.spec)

    def path(self, *tokens: str | int) -> str:
        return self.template.path(self.key, self.index, *tokens)


class Pod:
    """What one check sees: a pod template, the policy version, the exceptions, its own check ID.

    Checks only read, so the spec, the pod's securityContext and the containers are looked up
    once per template (`for_check` shares them, or the caller sets `check` between checks)
    instead of once per check.
    """

    __slots__ = ("_containers", "_sc_fields", "allow", "check", "sc", "spec", "template", "version")

    def __init__(self, template: PodTemplate, version: int, check: str, allow: Allow | None = None):
        self.template, self.version, self.check = template, version, check
        self.allow = allow if allow is not None else NO_EXCEPTIONS
        self.spec: dict[str, Any] = template.spec
        self.sc: dict[str, Any] = as_dict(self.spec.get("securityContext"))
        self._containers = tuple(Container(template, key, index, spec) for key, index, spec in template.containers())
        # securityContext fields the pod or any container sets: most checks look for one that none sets
        self._sc_fields = frozenset(self.sc).union(*(c.sc for c in self._containers))

    def for_check(self, check: str) -> Pod:
        pod = Pod.__new__(Pod)
        pod.template, pod.version, pod.check, pod.allow = self.template, self.version, check, self.allow
        pod.spec, pod.sc, pod._containers, pod._sc_fields = self.spec, self.sc, self._containers, self._sc_fields
        return pod

    @property
    def windows(self) -> bool:
        return as_dict(self.spec.get("os")).get("name") == "windows"

    @property
    def user_namespace(self) -> bool:
        """`hostUsers: false` (the checks' v1.35 variants relax runAsNonRoot, runAsUser and baseline procMount)."""
        return self.spec.get("hostUsers") is False

    @property
    def annotations(self) -> dict[str, Any]:
        return as_dict(self.template.metadata.get("annotations"))

    def path(self, *tokens: str | int) -> str:
        return self.template.path(*tokens)

    def containers(self) -> Iterable[Container]:
        """Init, regular and ephemeral containers, minus those the exceptions name for this check."""
        if not self.allow.containers:
            return self._containers
        return [c for c in self._containers if not self.allow.exempts(c.name, self.check)]

    def setters(
        self, *tokens: str, pod_level: bool = True, bad: Callable[[Any], bool] | None = None
    ) -> list[tuple[str, str, Any]]:
        """(pointer, who, value) for securityContext.<tokens> wherever the pod or a container sets it;
        with `bad`, only where bad(value) holds (the pointer is then built for offenders only)."""
        if tokens[0] not in self._sc_fields:
            return []
        found = []
        value = get(self.sc, *tokens)
        if pod_level and value is not None and (bad is None or bad(value)):
            found.append((self.path("securityContext", *tokens), "pod", value))
        for c in self.containers():
            value = get(c.sc, *tokens)
            if value is not None and (bad is None or bad(value)):
                found.append((c.path("securityContext", *tokens), c.label, value))
        return found


def get(node: Any, *tokens: str) -> Any:
    for token in tokens:
        node = node.get(token) if isinstance(node, dict) else None
    return node


def is_true(value: Any) -> bool:
    return value is True


def since(table: Mapping[int, frozenset[str]], version: int) -> frozenset[str]:
    """The union of a table's rows (policy minor version → names added then) up to `version`."""
    return frozenset().union(*(names for added, names in table.items() if added <= version))
