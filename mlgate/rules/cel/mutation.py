"""MLPolicy `mutations` as mutation rules the engine runs like the built-in ones (docs/authoring.md).

Shaped after MutatingAdmissionPolicy (kubernetes.io/docs/reference/access-authn-authz/mutating-admission-policy,
k8s.io/apiserver pkg/admission/plugin/policy/mutating/patch):
- `JSONPatch`: the expression gives a list of `JSONPatch{op, path, value}`, applied in order as RFC 6902 says. As
  json_patch.go does, a patch whose `test` op fails is not applied, and is no error; any other op that fails is
  an error, which failurePolicy decides.
- `ApplyConfiguration`: the expression gives an `Object{...}`, merged as server-side apply merges (smd.go):
  mappings field by field, lists that Kubernetes declares `listType=map` (LIST_MAP_KEYS) item by item on their
  keys, every other list replaced whole (`listType=atomic`, the default). A null value removes the field.
- `forEach: template`: the expression runs once per pod template, with `template` set, and its paths are
  relative to `{metadata, spec}` of that template: what changes lands in the user's own template through the
  template's `pod_target`/`meta_target`, as the built-in defaults write, for every kind mlgate knows.

The engine re-applies every mutation until nothing changes, so a mutation must be idempotent: one that is not (an
`add` to `/-` with no guard) never settles, and the engine says so as an error.
"""

from __future__ import annotations

import copy
import marshal
import time
from dataclasses import dataclass
from typing import Any, Literal

import jsonpatch

from mlgate.model.results import Skipped, Unevaluable
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.cel import env
from mlgate.rules.cel.validation import CelProgram, Expression, fresh_state
from mlgate.rules.cel.view import template_view
from mlgate.rules.registry import Context, MutationFailed, NoParams

PatchType = Literal["JSONPatch", "ApplyConfiguration"]
ORDER = 1000  # after every built-in mutation (10-60): a policy's own word on a field is the last
# Lists merged item by item on their keys: `+listType=map` with `+listMapKey` in k8s.io/api core/v1 types.go
# (PodSpec, Container). Every other list is atomic, as a schema with no list type is to server-side apply.
LIST_MAP_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "volumes": ("name",), "env": ("name",), "imagePullSecrets": ("name",), "resourceClaims": ("name",),
    "volumeMounts": ("mountPath",), "ports": ("containerPort", "protocol"),
}


@dataclass(frozen=True)
class CelMutation:
    id: str
    program: CelProgram
    expression: Expression
    patch_type: PatchType
    for_each: Literal["object", "template"] = "object"

    def mutate(self, workload: Workload, params: NoParams, context: Context) -> bool | Skipped:
        """Whether it changed the object (so the engine needs no copy around it to tell), or why it skipped."""
        if not env.available():
            return Skipped(f"CEL mutations cannot be applied: {env.INSTALL_HINT}", looked=False)
        # a state of its own, not the validations' shared one: the object changes between mutations
        state = fresh_state(self.program, workload, context)
        if (refusal := state.applies()) is not None:
            if isinstance(refusal, Unevaluable):
                raise MutationFailed(refusal.reason)
            return refusal
        if self.for_each == "object":
            value, error = state.evaluate(self.expression)
            if error is not None:
                raise MutationFailed(error)
            after = self._applied(workload.obj, value, "")
            if after is workload.obj:
                return False
            workload.obj.clear()
            workload.obj.update(after)
            return True
        changed = False
        for template in workload.templates:
            if context.deadline is not None and time.monotonic() > context.deadline:
                raise MutationFailed("the evaluation passed its deadline")
            value, error = state.evaluate(self.expression, id(template), {"template": template_view(template)})
            if error is not None:
                raise MutationFailed(f"{template.role} pods: {error}")
            before = {"metadata": template.metadata, "spec": template.spec}
            changed |= _land(template, before, self._applied(before, value, f"{template.role} pods: "))
        return changed

    def _applied(self, document: dict[str, Any], value: Any, where: str) -> dict[str, Any]:
        """`document` as the patch leaves it: a new mapping, or `document` itself where nothing changes."""
        if self.patch_type == "JSONPatch":
            return _json_patched(document, value, where)
        if not isinstance(value, dict):
            raise MutationFailed(f"{where}the expression gave {type(value).__name__}, not an Object{{...}}")
        merged = merge(document, value)
        return merged if merged != document else document


def _json_patched(document: dict[str, Any], value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, list) or not all(isinstance(op, dict) for op in value):
        raise MutationFailed(f"{where}the expression gave {type(value).__name__}, not a list of JSONPatch{{...}}")
    if not value:
        return document
    try:
        patched: dict[str, Any] = jsonpatch.JsonPatch(value).apply(_copy(document), in_place=True)
    except jsonpatch.JsonPatchTestFailed:
        return document  # as json_patch.go: a failed test means the patch is not applied
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise MutationFailed(f"{where}JSONPatch: {exc}") from None
    if not isinstance(patched, dict):
        raise MutationFailed(f"{where}JSONPatch replaced the whole document with a {type(patched).__name__}")
    return patched if patched != document else document


def _copy(document: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, through marshal where the document holds only JSON's types: several times faster than
    copy.deepcopy on a whole workload (bench/cel_bench.py --mutations)."""
    try:
        return marshal.loads(marshal.dumps(document))  # type: ignore[no-any-return]
    except ValueError:  # a value marshal cannot hold (a YAML timestamp)
        return copy.deepcopy(document)


def merge(current: Any, applied: Any, field: str = "") -> Any:
    """`applied` merged into `current` as server-side apply merges an apply configuration (see the docstring)."""
    if isinstance(applied, dict) and isinstance(current, dict):
        merged = dict(current)
        for key, value in applied.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = merge(current.get(key), value, key)
        return merged
    keys = LIST_MAP_KEYS.get(field)
    if keys and isinstance(applied, list) and isinstance(current, list) \
            and all(isinstance(item, dict) for item in (*current, *applied)):
        result = list(current)
        for item in applied:
            key = tuple(item.get(k) for k in keys)
            at = next((i for i, old in enumerate(result) if tuple(old.get(k) for k in keys) == key), None)
            if at is None:
                result.append(copy.deepcopy(item))
            else:
                result[at] = merge(result[at], item)
        return result
    return copy.deepcopy(applied)


def _land(template: PodTemplate, before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Write what a template patch changed into the user's template, one top-level field at a time."""
    if after is before:
        return False
    extra = sorted(set(after) - {"metadata", "spec"})
    if extra or not isinstance(after.get("metadata"), dict) or not isinstance(after.get("spec"), dict):
        raise MutationFailed(f"{template.role} pods: a template patch may change metadata and spec, "
                             f"not {', '.join(extra) or 'their type'}")
    for section, target in (("spec", template.pod_target), ("metadata", template.meta_target)):
        old, new = before[section], after[section]
        changed = [k for k in {*old, *new} if old.get(k, _GONE) != new.get(k, _GONE)]
        if not changed:
            continue
        written = target()  # raises Unwritable where the kind keeps no such field: the engine skips the rule
        for key in sorted(changed):
            if key in new:
                written[key] = copy.deepcopy(new[key])
            else:
                written.pop(key, None)
    return True  # `after` is `before` itself wherever the patch changed nothing


_GONE = object()
