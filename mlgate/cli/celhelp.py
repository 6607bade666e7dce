"""`mlgate cel`: the variables and functions MLPolicy expressions may use, read from the tables the CEL environment
is built from, so the listing cannot drift from what compiles.

The Kubernetes functions come from `library.declarations`, called here with a recorder in place of cel-expr-python
(it has no way to list an environment's functions); the variables from `env.ROOTS`; what mlgate refuses from
`env.UNSUPPORTED`; the mutation syntax from `structs.TYPE_NAMES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlgate.rules.cel import env, library, structs

VARIABLES = {
    "object": "the object as written",
    "oldObject": "the stored object on UPDATE; null on CREATE",
    "request": "{operation, name, namespace, kind, userInfo, dryRun}",
    "namespaceObject": "the namespace from the cluster facts: {metadata: {name, labels}}; null where unknown",
    "variables": "the policy's spec.variables, each evaluated at most once",
    "params": "the policy's own spec.params",
    "workload": "{kind, apiVersion, name, namespace, pods, roles, gpus}: mlgate's view of the workload",
    "template": "forEach template or container: {role, replicas, metadata, spec}",
    "container": "forEach container: the container as in the pod spec",
}
STANDARD = ("the standard library and macros (all, exists, exists_one, map, filter, has, matches, size, ...)",
            "optional types (obj.?field, map[?key], orValue, hasValue, optional.of, optional.none)",
            "the strings extension (charAt, indexOf, lastIndexOf, lowerAscii, upperAscii, replace, split, "
            "substring, trim, join, format, strings.quote; not reverse, which the API server lacks)")


@dataclass(frozen=True)
class Function:
    name: str
    signatures: tuple[str, ...]


class _Type:
    def __init__(self, text: str) -> None:
        self.text = text

    def name(self) -> str:
        return self.text


class _Types:
    """Stands in for `cel.Type`: every constant and constructor gives a type that knows its name."""

    def __getattr__(self, name: str) -> _Type:
        return _Type(name.lower())

    @staticmethod
    def Map(key: _Type, value: _Type) -> _Type:  # cel-expr-python's names
        return _Type(f"map<{key.name()}, {value.name()}>")

    @staticmethod
    def List(item: _Type) -> _Type:
        return _Type(f"list<{item.name()}>")


class _Recorder:
    """Stands in for the `cel` module that `library.declarations` builds its FunctionDecls with."""

    Type = _Types()

    @staticmethod
    def Overload(oid: str, ret: _Type, params: list[_Type], *, is_member: bool,
                 impl: Callable[..., Any]) -> str:
        del oid, impl
        args = [p.name() for p in params]
        call = f"{args[0]}.{{}}({', '.join(args[1:])})" if is_member else f"{{}}({', '.join(args)})"
        return f"{call} -> {ret.name()}"

    @staticmethod
    def FunctionDecl(name: str, overloads: list[str]) -> Function:
        return Function(name, tuple(o.replace("{}", name) for o in overloads))


def functions() -> list[Function]:
    """Every function mlgate adds to cel-cpp, with each overload's signature."""
    return sorted(library.declarations(_Recorder()), key=lambda f: f.name)


def listing() -> dict[str, Any]:
    missing = [root for root in env.ROOTS if root not in VARIABLES]
    assert not missing, f"variables without a description: {missing}"
    return {
        "variables": [{"name": root, "description": VARIABLES[root]} for root in env.ROOTS],
        "standard": list(STANDARD),
        "functions": [{"name": f.name, "signatures": list(f.signatures)} for f in functions()],
        "mutations": [f"{name}{{...}}" for name in structs.TYPE_NAMES] + ["jsonpatch.escapeKey(string) -> string"],
        "unsupported": sorted(set(env.UNSUPPORTED.values())),
    }


def render_text(data: dict[str, Any]) -> str:
    lines = ["Variables:"]
    lines += [f"  {v['name']:<16} {v['description']}" for v in data["variables"]]
    lines += ["", "From cel-cpp:"] + [f"  {s}" for s in data["standard"]]
    lines += ["", "Kubernetes functions (k8s.io/apiserver/pkg/cel/library), added by mlgate; a map<string, string> "
              "here is a Quantity, URL, IP or CIDR:"]
    lines += [f"  {sig}" for f in data["functions"] for sig in f["signatures"]]
    lines += ["", "In mutations:"] + [f"  {m}" for m in data["mutations"]]
    lines += ["", "Refused at load time: " + ", ".join(data["unsupported"])]
    return "\n".join(lines)
