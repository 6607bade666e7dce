"""gang.size: gang minimums fit the job's pods, group names and counts agree, and gangs can form.

Fields: the pod markers of gang_markers (each scheduler's group, queue and count keys on every pod template), the
kind's own gang settings (`gang` in kinds.yaml: e.g. Kubeflow `runPolicy.schedulingPolicy.minAvailable`), and the
object's own `scheduling.volcano.sh/group-min-member`, which Volcano reads off a pod's owner.
Allowed values: minimums whole and between 1 and the pods that run at once; one group name across a job's roles;
Kueue's total count equal to the job's pods (a plain Pod is one member of a group it cannot see alone: see
`_kueue_member_findings`); YuniKorn task groups as yunikorn-k8shim `GetTaskGroupsFromAnnotation` accepts them
(pkg/cache/utils.go: a name, minMember ≥ 1, a minResource object of non-negative quantities, no `pods` key, not
both `cpu` and `vcore`). Where the kind's `needsPodGroup` names the scheduler the pods are marked for, the gang
forms only through a PodGroup mlgate cannot see: a skip that names it. Where the job's own settings ask a gang of a
scheduler the kind's `noGang` names (KAI for a TrainingJob), it is refused with that reason.
`scheduling.volcano.sh/group-name` alone is refused: Volcano's scheduler reads only `scheduling.k8s.io/group-name`
(ml-domain reference §2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import Workload, as_dict
from mlgate.rules.gang_markers import (
    ANNOTATIONS,
    GROUP,
    KUEUE_GROUP,
    KUEUE_TOTAL,
    MARKERS,
    POD_GROUPS,
    SCHEDULER_NAMES,
    VOLCANO_GROUP,
    VOLCANO_MIN_MEMBER,
    VOLCANO_UNREAD_GROUP,
    YUNIKORN_TASK_GROUP,
    YUNIKORN_TASK_GROUPS,
    Unit,
    _show,
    parse_task_groups,
    units,
)
from mlgate.rules.registry import Context, NoParams, check


@check("gang.size", "gang minimums fit the job's pods; group names and counts agree", NoParams)
def size(workload: Workload, params: NoParams, context: Context) -> list[Finding | Unchecked] | Skipped:
    if not workload.pods_counted:
        return Skipped(f"how many {workload.kind} pods run at once is not known")
    all_units = units(workload)
    name = workload.gang.minMember
    ptr = f"{workload.gang_pointer}/{name}" if workload.gang_pointer and name else None
    minimum = workload.at(ptr) if ptr else None
    owner_minimum = as_dict(as_dict(workload.obj.get("metadata")).get(ANNOTATIONS)).get(VOLCANO_MIN_MEMBER)
    marked = any(u.find(MARKERS) or u.get((ANNOTATIONS, VOLCANO_UNREAD_GROUP)) for u in all_units)
    unformed = list(_needed_pod_groups(workload, all_units))
    refused = list(_no_gang(workload))
    if minimum is None and owner_minimum is None and not marked and not unformed and not refused:
        return Skipped("no gang scheduling settings")
    findings: list[Finding | Unchecked] = [*refused, *_group_findings(all_units), *unformed, *_unread_keys(all_units)]
    if owner_minimum is not None and all(u.first.meta_pointer != "/metadata" for u in all_units):
        findings += _minimum(pointer.join("/metadata/annotations", VOLCANO_MIN_MEMBER), VOLCANO_MIN_MEMBER,
                             owner_minimum, workload.total_replicas, _who(all_units))
    if ptr and name and minimum is not None:
        findings += _minimum(ptr, name, minimum, workload.total_replicas, _who(all_units))
    for unit in all_units:
        if (value := unit.get((ANNOTATIONS, VOLCANO_MIN_MEMBER))) is not None:
            members = [u for u in all_units if u.value(GROUP["volcano"]) == unit.value(GROUP["volcano"])]
            findings += _minimum(unit.at((ANNOTATIONS, VOLCANO_MIN_MEMBER)), f"{VOLCANO_MIN_MEMBER} on {unit.roles} "
                                 "pods", value, sum(u.replicas for u in members), _who(members))
    if workload.gang.groupSpansObjects:
        findings += _kueue_member_findings(all_units, workload.namespace, context.facts)
    else:
        findings += _kueue_findings(all_units)
    findings += _yunikorn_findings(all_units)
    return findings


def _minimum(ptr: str, what: str, value: Any, pods: int, who: str) -> list[Finding]:
    number = _whole(value)
    if number is None or number < 1:
        return [Finding(ptr, "gang minimum not a positive integer", f"{what} is {_show(value)}",
                        "use a whole number ≥ 1")]
    if number > pods:
        return [Finding(ptr, "gang minimum exceeds pods", f"{what} is {number} but the group has {pods} pods ({who})",
                        f"lower it to at most {pods}, or add replicas")]
    return []


def _group_findings(all_units: list[Unit]) -> Iterator[Finding]:
    live = [u for u in all_units if u.replicas > 0]
    for scheduler, aliases in GROUP.items():
        found = [(u, u.find(aliases)) for u in live]
        first = next(((u, f) for u, f in found if f is not None), None)
        if first is None:
            continue
        ref_unit, (ref_key, ref) = first
        for unit, hit in found:
            if hit is None:
                yield Finding(unit.at(ref_key), "gang group differs",
                              f'{unit.roles} pods have no {ref_key[1]} but {ref_unit.roles} pods are in {scheduler} '
                              f'group "{ref}"', f'set {ref_key[1]}: "{ref}" on every role')
            elif hit[1] != ref:
                yield Finding(unit.at(hit[0]), "gang group differs",
                              f'{unit.roles} pods are in {scheduler} group "{hit[1]}" but {ref_unit.roles} pods in '
                              f'"{ref}"', f'use one group name ("{ref}") for every role of the job')


def _kueue_findings(all_units: list[Unit]) -> Iterator[Finding]:
    for unit in all_units:
        hit = unit.find(GROUP["kueue"])
        if hit is None:
            continue
        members = [u for u in all_units if u.value(GROUP["kueue"]) == hit[1]]
        pods = sum(u.replicas for u in members)
        count = unit.get((ANNOTATIONS, KUEUE_TOTAL))
        if count is None:
            yield Finding(unit.at(hit[0]), "kueue total count missing",
                          f'{unit.roles} pods are in Kueue pod group "{hit[1]}" without annotation {KUEUE_TOTAL}',
                          f'add annotation {KUEUE_TOTAL}: "{pods}"')
        elif _whole(count) != pods:
            yield Finding(unit.at((ANNOTATIONS, KUEUE_TOTAL)), "kueue total count differs",
                          f'{KUEUE_TOTAL} is "{count}" but pod group "{hit[1]}" has {pods} pods ({_who(members)})',
                          f'set it to "{pods}"')


def _kueue_member_findings(all_units: list[Unit], namespace: str, facts: ClusterFacts) -> Iterator[Finding]:
    """An object that is one member of a Kueue plain-pod group (its kind's `groupSpansObjects`): the group's
    size is the number of such objects, which this one cannot see. What one member can get wrong is checked:
    the group name and the total count come as a pair, and the count is a positive integer. Where the other
    members are known (`ClusterFacts.pod_group`: the CLI's input), they are judged together."""
    for unit in all_units:
        hit, count = unit.find(GROUP["kueue"]), unit.get((ANNOTATIONS, KUEUE_TOTAL))
        if hit is None and count is None:
            continue
        if hit is None:
            yield Finding(unit.at((ANNOTATIONS, KUEUE_TOTAL)), "kueue group name missing",
                          f"{KUEUE_TOTAL} is set but label {KUEUE_GROUP} is not, so Kueue admits the pod alone",
                          f"add label {KUEUE_GROUP} naming the group, or remove the annotation")
            continue
        total = _whole(count)
        if count is None:
            yield Finding(unit.at(hit[0]), "kueue total count missing",
                          f'the pod is in Kueue pod group "{hit[1]}" without annotation {KUEUE_TOTAL}',
                          f"add annotation {KUEUE_TOTAL} with the number of pods in the group, as a string")
            continue
        if total is None or total < 1:
            yield Finding(unit.at((ANNOTATIONS, KUEUE_TOTAL)), "kueue total count not a positive integer",
                          f"{KUEUE_TOTAL} is {_show(count)}", "use the number of pods in the group, e.g. \"4\"")
            continue
        members = facts.pod_group(namespace, hit[1])
        if members is not None:
            yield from _group_peers(unit.at((ANNOTATIONS, KUEUE_TOTAL)), hit[1], total, members)


def _group_peers(ptr: str, group: str, total: int, members: Sequence[Mapping[str, Any]]) -> Iterator[Finding]:
    counts = sorted({str(_annotations(m).get(KUEUE_TOTAL)) for m in members})
    if len(counts) > 1:
        yield Finding(ptr, "kueue total counts differ", f'the pods of group "{group}" give {KUEUE_TOTAL} as '
                      f'{" and ".join(repr(c) for c in counts)}', 'give every pod of the group the same count')
    elif len(members) > total:
        yield Finding(ptr, "kueue group larger than its count", f'{len(members)} pods are in group "{group}" but '
                      f"{KUEUE_TOTAL} is {total}", f'set it to "{len(members)}" on every pod of the group')


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _yunikorn_findings(all_units: list[Unit]) -> Iterator[Finding]:
    definition: tuple[Unit, dict[str, int]] | None = None
    key, invalid = (ANNOTATIONS, YUNIKORN_TASK_GROUPS), False
    for unit in all_units:
        raw = unit.get(key)
        if raw is None:
            continue
        groups, problem = parse_task_groups(raw)
        if problem:
            invalid = True
            yield Finding(unit.at(key), "task groups invalid", f"{YUNIKORN_TASK_GROUPS} on {unit.roles} pods {problem}",
                          'write a JSON array of {"name": ..., "minMember": ..., "minResource": {...}} objects')
        elif definition is None:
            definition = (unit, groups)
        elif groups != definition[1]:
            yield Finding(unit.at(key), "task groups differ", f"{unit.roles} pods define other task groups than "
                          f"{definition[0].roles} pods", "put the same task-groups annotation on every role")
    members: dict[str, list[Unit]] = {}
    for unit in all_units:
        if (name := unit.get((ANNOTATIONS, YUNIKORN_TASK_GROUP))) is not None:
            members.setdefault(name, []).append(unit)
            if not invalid and (definition is None or name not in definition[1]):
                yield Finding(unit.at((ANNOTATIONS, YUNIKORN_TASK_GROUP)), "task group not defined",
                              f'{unit.roles} pods name task group "{name}", which no {YUNIKORN_TASK_GROUPS} defines',
                              f"define it in {YUNIKORN_TASK_GROUPS}")
    if definition is not None:
        for name, minimum in definition[1].items():
            pods = sum(u.replicas for u in members.get(name, []))
            if minimum > pods:
                yield Finding(definition[0].at(key), "gang minimum exceeds pods",
                              f'task group "{name}" needs minMember {minimum} but {pods} pods carry '
                              f'{YUNIKORN_TASK_GROUP}: "{name}"', f"lower minMember to at most {pods}, or add replicas")


_DIGITS = re.compile(r"[0-9]+")


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    return int(value) if isinstance(value, str) and _DIGITS.fullmatch(value.strip()) else None


def _who(members: list[Unit]) -> str:
    return ", ".join(f"{u.roles} ×{u.replicas}" for u in members)


def _no_gang(workload: Workload) -> Iterator[Finding]:
    """The job's own settings ask for a gang from a scheduler that cannot gang this kind (`noGang`)."""
    gang = workload.gang
    settings = as_dict(workload.at(workload.gang_pointer)) if workload.gang_pointer else {}
    scheduler = settings.get(gang.scheduler) if gang.scheduler else None
    asked = bool(gang.enabled and settings.get(gang.enabled))
    if not (asked and isinstance(scheduler, str) and scheduler in gang.noGang):
        return
    yield Finding(pointer.join(workload.gang_pointer or "", gang.scheduler or ""), "no gang from this scheduler",
                  f"{workload.kind} pods get no {scheduler} gang: {gang.noGang[scheduler]}",
                  f"use a scheduler that gangs {workload.kind} pods ({', '.join(gang.schedulers) or 'none'}), "
                  f"or set {gang.enabled}: false")


def _needed_pod_groups(workload: Workload, all_units: list[Unit]) -> Iterator[Unchecked]:
    """Pods marked for a scheduler that gangs this kind only through a PodGroup nobody here creates."""
    for scheduler in workload.gang.needsPodGroup:
        group = GROUP.get(scheduler, ())
        named = {value for u in all_units if (value := u.value(group)) is not None}
        by_name = any(u.first.spec.get("schedulerName") == SCHEDULER_NAMES[scheduler] for u in all_units)
        if not (named or by_name):
            continue
        which = f'"{sorted(named)[0]}"' if named else "the pods name"
        yield Unchecked(f"{scheduler} gangs {workload.kind} pods only through {POD_GROUPS[scheduler]}; PodGroup "
                        f"{which} with minMember {workload.total_replicas} must exist, which mlgate cannot see; "
                        "without it the pods are scheduled one by one")


def _unread_keys(all_units: list[Unit]) -> Iterator[Finding]:
    for unit in all_units:
        if unit.get((ANNOTATIONS, VOLCANO_UNREAD_GROUP)) is not None and unit.get((ANNOTATIONS, VOLCANO_GROUP)) is None:
            yield Finding(unit.at((ANNOTATIONS, VOLCANO_UNREAD_GROUP)), "volcano group key not read",
                          f"{unit.roles} pods name their group with {VOLCANO_UNREAD_GROUP}, which Volcano's scheduler "
                          "does not read, so each pod is grouped alone",
                          f"use annotation {VOLCANO_GROUP} instead")
