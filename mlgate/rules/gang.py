"""Gang scheduling: each scheduler's pod markers, injected where unset, and sizes that can work.

Markers on every pod template (group name = the workload's `metadata.name`; ml-domain reference §2):
- volcano: annotation `scheduling.k8s.io/group-name` (`scheduling.volcano.sh/group-name` is read as the same),
  annotation `scheduling.volcano.sh/queue-name` when a queue is set, `schedulerName: volcano`, and annotation
  `scheduling.volcano.sh/group-min-member` when `minMember` is set (volcano-sh/apis scheduling/v1beta1/labels.go).
- coscheduling: label `scheduling.x-k8s.io/pod-group`, `schedulerName: scheduler-plugins-scheduler` (the
  secondary scheduler's name; scheduler-plugins apis/scheduling/v1alpha1).
- kueue: label `kueue.x-k8s.io/queue-name` when a queue is set (also on a Job's or Kubeflow job's own labels,
  which Kueue's job integrations read), label `kueue.x-k8s.io/pod-group-name` (also read as an annotation) and
  annotation `kueue.x-k8s.io/pod-group-total-count` = pods in the group, as a string (Kueue plain_pods.md; a
  Job's group is the pods that run at once, min(parallelism, completions), as `extract` counts them);
  the scheduler name is left alone.
- yunikorn: label `yunikorn.apache.org/app-id` = `<namespace>-<name>` (app ids are cluster-wide; `applicationId`
  and the annotation are read as the same), label `yunikorn.apache.org/queue` (or `queue`, or the annotation),
  annotation `yunikorn.apache.org/task-group-name` = the role, annotation `yunikorn.apache.org/task-groups` = JSON
  `[{"name","minMember","minResource"}]`, one group per role with minMember = its replicas and minResource = one
  pod's requests; `schedulerName: yunikorn` (yunikorn-k8shim constants.go, amprotocol.go TaskGroup).
- kai: label `kai.scheduler/queue` when a queue is set (also on Job/Kubeflow labels, as KAI's docs/batch
  examples do), `schedulerName: kai-scheduler`; KAI's pod grouper creates the PodGroup itself.
What is written where is data: the markers per scheduler are gang_markers.WRITES, and what each kind supports
comes from its description (`gang` in mlgate/workloads/kinds.yaml): the schedulers gang.inject groups it for
(others are a `skip` saying why), whether its controller marks the pods itself (Volcano Job), which schedulers
read a queue label off the object (Kueue's and KAI's job integrations), and the job-level settings its operator
reads (TrainingJob `spec.scheduling.{gang,scheduler,queue,minMember}`; Kubeflow
`spec.runPolicy.schedulingPolicy.{minAvailable,queue}`, from which training-operator v1.9 builds Volcano and
coscheduling PodGroups; Volcano Job `spec.{minAvailable,queue}`).
Roles that share one pod template (a TrainingJob's) form one group whose name joins the roles. Label values
longer than 63 characters are cut to 54 plus a hash. gang.size reads every scheduler's markers; gang.immutable
compares them, and the job-level settings, between the old and the new object on UPDATE.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import Field, field_validator

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.kinds import Scheduler
from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import Workload, as_dict, ensure
from mlgate.rules.gang_markers import (
    _LABEL_VALUE,
    ANNOTATIONS,
    FIXED,
    GROUP,
    JOB_QUEUE_LABELS,
    KUEUE_GROUP,
    KUEUE_TOTAL,
    MARKER_GROUPS,
    MARKERS,
    QUEUE,
    SCHEDULER_NAMES,
    VOLCANO_MIN_MEMBER,
    WRITES,
    YUNIKORN_TASK_GROUP,
    YUNIKORN_TASK_GROUPS,
    Aliases,
    Unit,
    _show,
    label_value,
    parse_task_groups,
    task_groups_json,
    units,
)
from mlgate.rules.registry import Context, NoParams, Params, check, mutation

# --- gang.inject ------------------------------------------------------------------------------


class GangParams(Params):
    scheduler: Scheduler
    queue: str | None = None
    scheduler_name: str | None = Field(default=None, min_length=1, description="override the scheduler's name")
    min_member: int | None = Field(default=None, ge=1, description="unset: every pod of the job")

    @field_validator("queue")
    @classmethod
    def _queue_is_label_value(cls, value: str | None) -> str | None:
        if value is not None and not _LABEL_VALUE.match(value):
            raise ValueError("must be a valid label value (63 characters or fewer, alphanumerics, '-', '_', '.')")
        return value


@mutation("gang.inject", "set the chosen gang scheduler's markers on every pod template", GangParams, order=50)
def inject(workload: Workload, params: GangParams, context: Context) -> Skipped | None:
    """On CREATE, and on an UPDATE of a job that already carries gang settings: an update that sends
    the manifest as written (kubectl replace, GitOps) gets back the same markers instead of being
    refused by gang.immutable. A job that had none is never regrouped while it runs. What the kind
    supports (its description's `gang`) decides where markers and settings go, or that none can."""
    gang = workload.gang
    if params.scheduler not in gang.schedulers:
        how = "its operator or its scheduler settings form its gangs" if workload.known_kind else "an unknown kind"
        return Skipped(f"{workload.kind} is not grouped for {params.scheduler} by pod markers: {how}")
    total = workload.total_replicas
    if not as_dict(workload.obj.get("metadata")).get("name") or total < 1:
        return None
    if context.operation == "UPDATE" and not _had_gang(workload):
        return None
    if not _opted_in(workload, params):
        return None
    all_units = units(workload)
    scheduler_name = params.scheduler_name or SCHEDULER_NAMES[params.scheduler]
    for unit in all_units if gang.podMarkers else ():
        _set_missing(unit, _pod_markers(workload, params, unit, all_units))
        if scheduler_name and not unit.first.spec.get("schedulerName"):
            unit.first.pod_target()["schedulerName"] = scheduler_name
    label = JOB_QUEUE_LABELS.get(params.scheduler)
    if label and params.queue and params.scheduler in gang.queueLabelFor and label not in workload.labels:
        metadata = ensure(workload.obj, "metadata")
        if metadata.get("labels") is None or isinstance(metadata["labels"], dict):  # never replace what was written
            ensure(metadata, "labels")[label] = params.queue
    _set_job_settings(workload, params, min(params.min_member or total, total))
    return None


def _had_gang(workload: Workload) -> bool:
    old = workload.old_workload()
    return old is not None and bool(settings(old))


def _opted_in(workload: Workload, params: GangParams) -> bool:
    """A job whose own settings say no gang (TrainingJob `gang: false`), or name another scheduler, is left alone."""
    gang = workload.gang
    current = workload.at(workload.gang_pointer) if workload.gang_pointer else None
    if not isinstance(current, dict):
        return True
    return (gang.enabled is None or current.get(gang.enabled) is not False) and \
        (gang.scheduler is None or current.get(gang.scheduler) in (None, params.scheduler))


class MarkerContext(NamedTuple):
    workload: Workload
    params: GangParams
    unit: Unit
    everyone: list[Unit]


def _app_id(c: MarkerContext) -> str:  # YuniKorn app ids are cluster-wide
    return label_value(f"{c.workload.namespace}-{c.workload.name}" if c.workload.namespace else c.workload.name)


# The value of each kind of marker in gang_markers.WRITES; None: not written
MARKER_VALUES: dict[str, Callable[[MarkerContext], str | None]] = {
    "job-name": lambda c: c.workload.name,
    "job-label": lambda c: label_value(c.workload.name),
    "app-id": _app_id,
    "min-member": lambda c: str(min(c.params.min_member, c.workload.total_replicas)) if c.params.min_member else None,
    "pods": lambda c: str(c.workload.total_replicas),
    "task-group": lambda c: c.unit.task_group,
    "task-groups": lambda c: task_groups_json(c.everyone),
}


def _pod_markers(workload: Workload, params: GangParams, unit: Unit, everyone: list[Unit]) -> list[tuple[Aliases, str]]:
    context = MarkerContext(workload, params, unit, everyone)
    wanted: list[tuple[Aliases, str]] = []
    if params.queue and params.scheduler in QUEUE:
        wanted.append((QUEUE[params.scheduler], params.queue))
    for aliases, value in WRITES[params.scheduler]:
        if (text := MARKER_VALUES[value](context)) is not None:
            wanted.append((aliases, text))
    return wanted


def _set_missing(unit: Unit, wanted: list[tuple[Aliases, str]]) -> None:
    """Write each marker none of whose aliases is set; never touch a value the user wrote."""
    missing = [(aliases[0], value) for aliases, value in wanted if unit.find(aliases) is None]
    if not missing:
        return
    meta = unit.first.meta_target()
    for (section, key), value in missing:
        ensure(meta, section)[key] = value


def _set_job_settings(workload: Workload, params: GangParams, min_member: int) -> None:
    """The kind's own gang settings, where its operator reads them for the chosen scheduler."""
    gang = workload.gang
    if params.scheduler not in gang.settingsFor or not workload.gang_pointer:
        return
    wanted: dict[str, Any] = {}
    if gang.enabled:
        wanted[gang.enabled] = True
    if gang.scheduler:
        wanted[gang.scheduler] = params.scheduler
    if gang.minMember:
        wanted[gang.minMember] = min_member
    if gang.queue and params.queue and params.scheduler in QUEUE:
        wanted[gang.queue] = params.queue
    if not wanted:
        return
    current = workload.at(workload.gang_pointer)
    missing = {k: v for k, v in wanted.items() if not isinstance(current, dict) or current.get(k) is None}
    if missing and _writable_path(workload.obj, workload.gang_pointer):
        node = workload.obj
        for token in pointer.split(workload.gang_pointer):
            node = ensure(node, token)
        node.update(missing)


def _writable_path(obj: dict[str, Any], ptr: str) -> bool:
    """Whether every field on the way to `ptr` is a mapping or unset: never replace what the user wrote (a
    runPolicy that is a string is the API server's to refuse, and defaults.run-policy leaves it too)."""
    node: Any = obj
    for token in pointer.split(ptr):
        if node is None:
            return True
        if not isinstance(node, dict):
            return False
        node = node.get(token)
    return node is None or isinstance(node, dict)


# --- gang.size --------------------------------------------------------------------------------


@check("gang.size", "gang minimums fit the job's pods; group names and counts agree", NoParams)
def size(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    if not workload.pods_counted:
        return Skipped(f"how many {workload.kind} pods run at once is not known")
    all_units = units(workload)
    name = workload.gang.minMember
    ptr = f"{workload.gang_pointer}/{name}" if workload.gang_pointer and name else None
    minimum = workload.at(ptr) if ptr else None
    if minimum is None and not any(u.find(MARKERS) for u in all_units):
        return Skipped("no gang scheduling settings")
    findings = list(_group_findings(all_units))
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


# --- gang.immutable ---------------------------------------------------------------------------


@check("gang.immutable", "gang group, count, minimum and queue do not change on update", NoParams)
def immutable(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    if context.operation != "UPDATE":
        return Skipped("not an update")
    old = workload.old_workload()
    if old is None:
        return Skipped("no old object to compare with")
    before, after = settings(old), settings(workload)
    findings = []
    for marker in sorted(set(before) | set(after)):
        was, now = before.get(marker), after.get(marker)
        if was is not None and now is not None and was.value == now.value:
            continue  # the same marker, maybe under another of its aliases
        ptr, what = (now or was or Setting("", "", None))[:2]
        if was is None:
            detail = f"{what} was added ({_show(now.value if now else None)})"
        elif now is None:
            detail = f"{what} was removed (was {_show(was.value)})"
        else:
            detail = f"{what} changed from {_show(was.value)} to {_show(now.value)}"
        findings.append(Finding(ptr, "gang setting changed", detail, FIXED))
    return findings


class Setting(NamedTuple):
    pointer: str  # where the field is written
    what: str
    value: Any  # for a pod marker: its value, or the distinct values of its aliases where they differ


def settings(workload: Workload) -> dict[str, Setting]:
    """Every gang setting the workload carries, keyed by marker: a pod marker written under any of its aliases
    (e.g. `scheduling.volcano.sh/group-name` for `scheduling.k8s.io/group-name`) is the same setting."""
    out: dict[str, Setting] = {}
    for unit in units(workload):
        for aliases in MARKER_GROUPS:
            found = [(key, value) for key in aliases if (value := unit.get(key)) is not None]
            if found:
                key, values = found[0][0], list(dict.fromkeys(value for _, value in found))
                out[unit.at(aliases[0])] = Setting(unit.at(key), f"{key[0][:-1]} {key[1]} of {unit.roles} pods",
                                                   values[0] if len(values) == 1 else values)
    for label in JOB_QUEUE_LABELS.values():
        if label in workload.labels:
            ptr = pointer.join("/metadata/labels", label)
            out.setdefault(ptr, Setting(ptr, f"label {label}", workload.labels[label]))
    gang = workload.gang
    if workload.gang_pointer:
        for name in filter(None, (gang.enabled, gang.scheduler, gang.queue, gang.minMember)):
            ptr = workload.gang_pointer + "/" + name
            if (value := workload.at(ptr)) is not None:
                out[ptr] = Setting(ptr, ptr[1:].replace("/", "."), value)
    return out
