"""Gang scheduling: each scheduler's pod markers, injected where unset, and sizes that can work.

Markers on every pod template (group name = the workload's `metadata.name`; ml-domain reference §2):
- volcano: annotation `scheduling.k8s.io/group-name` (the only key its scheduler reads), annotation
  `scheduling.volcano.sh/queue-name` when a queue is set, and `schedulerName: volcano` (volcano-sh/apis
  scheduling/v1beta1/labels.go); where Volcano groups by owner, no group name and the minimum on the owner.
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
  examples do), `schedulerName: kai-scheduler`; KAI's pod grouper creates the PodGroup itself, a gang only for
  Kubeflow jobs (from `runPolicy.schedulingPolicy.minAvailable`).
A `minMember` for Kueue or YuniKorn is a load error: both gang a job (or a task group) whole.
What is written where is data: the markers per scheduler are gang_markers.WRITES (on pods) and OWNER_WRITES (on
the object), and what each kind supports comes from its description (`gang` in mlgate/workloads/kinds.yaml): the
schedulers gang.inject groups it for (others are a `skip` saying why), whether its controller marks the pods
itself (Volcano Job), which schedulers group its pods by their owner (Volcano for a batch Job: the scheduler name
on the pods, `scheduling.volcano.sh/group-min-member` on the Job, no group name, since a group-name annotation
without a PodGroup leaves the pods Pending for ever), which gang it only through a PodGroup someone creates
(gang.size then says so), which schedulers read a queue label off the object (Kueue's and KAI's job
integrations), and the job-level settings its operator reads (TrainingJob
`spec.scheduling.{gang,scheduler,queue,minMember}`; Kubeflow
`spec.runPolicy.schedulingPolicy.{minAvailable,queue}`, from which training-operator v1.9 builds Volcano and
coscheduling PodGroups; Volcano Job `spec.{minAvailable,queue}`).
Roles that share one pod template (a TrainingJob's) form one group whose name joins the roles. Label values
longer than 63 characters are cut to 54 plus a hash. gang.size reads every scheduler's markers; gang.immutable
compares them, and the job-level settings, between the old and the new object on UPDATE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import Field, field_validator, model_validator

from mlgate.model import pointer
from mlgate.model.kinds import Scheduler
from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import Workload, as_dict, ensure
from mlgate.rules.gang_markers import (
    _LABEL_VALUE,
    ANNOTATIONS,
    FIXED,
    JOB_QUEUE_LABELS,
    MARKER_GROUPS,
    OWNER_WRITES,
    QUEUE,
    SCHEDULER_NAMES,
    WRITES,
    Aliases,
    Unit,
    _show,
    label_value,
    task_groups_json,
    units,
)
from mlgate.rules.registry import Context, NoParams, Params, check, mutation

# --- gang.inject ------------------------------------------------------------------------------

DEFAULT_SCHEDULER = "default-scheduler"  # core/v1 DefaultSchedulerName
# Schedulers that gang a job whole, so a smaller minimum would be dropped without a word
WHOLE_GANGS = {
    "kueue": "Kueue admits a job whole; for a batch Job use partial admission "
             "(label kueue.x-k8s.io/job-min-parallelism) instead",
    "yunikorn": "YuniKorn gangs each task group whole (minMember = its pods); leave it unset",
}


class GangParams(Params):
    scheduler: Scheduler = Field(description="the gang scheduler whose markers are written")
    queue: str | None = Field(default=None, description="the scheduler's queue for the job (a label value)")
    scheduler_name: str | None = Field(default=None, min_length=1, description="override the scheduler's name")
    min_member: int | None = Field(default=None, ge=1, description="unset: every pod of the job")

    @field_validator("queue")
    @classmethod
    def _queue_is_label_value(cls, value: str | None) -> str | None:
        if value is not None and not _LABEL_VALUE.match(value):
            raise ValueError("must be a valid label value (63 characters or fewer, alphanumerics, '-', '_', '.')")
        return value

    @model_validator(mode="after")
    def _min_member_is_read(self) -> GangParams:
        if self.min_member is not None and self.scheduler in WHOLE_GANGS:
            raise ValueError(f"minMember: {WHOLE_GANGS[self.scheduler]}")
        return self


@mutation("gang.inject", "set the chosen gang scheduler's markers on every pod template", GangParams, order=50)
def inject(workload: Workload, params: GangParams, context: Context) -> Skipped | None:
    """On CREATE, and on an UPDATE of a job that already carries gang settings: an update that sends
    the manifest as written (kubectl replace, GitOps) gets back the same markers instead of being
    refused by gang.immutable. A job that had none is never regrouped while it runs. What the kind
    supports (its description's `gang`) decides where markers and settings go, or that none can."""
    gang = workload.gang
    if params.scheduler not in gang.schedulers:
        if params.scheduler in gang.noGang:
            return Skipped(f"{workload.kind} pods get no {params.scheduler} gang: {gang.noGang[params.scheduler]}")
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
    by_owner = params.scheduler in gang.ownerGroups  # the scheduler groups the pods by their owner itself
    for unit in all_units if gang.podMarkers else ():
        _set_missing(unit, _pod_markers(workload, params, unit, all_units, group=not by_owner))
        # the API server defaults a built-in kind's template to default-scheduler before mutating webhooks run
        if scheduler_name and unit.first.spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
            unit.first.pod_target()["schedulerName"] = scheduler_name
    if by_owner and all(u.first.meta_pointer != "/metadata" for u in all_units):  # a bare Pod has no owner
        _set_owner_markers(workload, params, min(params.min_member or total, total))
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
    "pods": lambda c: str(c.workload.total_replicas),
    "task-group": lambda c: c.unit.task_group,
    "task-groups": lambda c: task_groups_json(c.everyone),
}


def _pod_markers(workload: Workload, params: GangParams, unit: Unit, everyone: list[Unit], *,
                 group: bool) -> list[tuple[Aliases, str]]:
    context = MarkerContext(workload, params, unit, everyone)
    wanted: list[tuple[Aliases, str]] = []
    if params.queue and params.scheduler in QUEUE:
        wanted.append((QUEUE[params.scheduler], params.queue))
    for aliases, value in WRITES[params.scheduler] if group else ():
        if (text := MARKER_VALUES[value](context)) is not None:
            wanted.append((aliases, text))
    return wanted


def _set_owner_markers(workload: Workload, params: GangParams, minimum: int) -> None:
    """The object's own annotations the scheduler reads off the pods' owner (gang_markers.OWNER_WRITES)."""
    values = {"minimum": str(minimum)}
    meta = as_dict(workload.obj.get("metadata"))
    missing = [(key, values[value]) for key, value in OWNER_WRITES.get(params.scheduler, ())
               if not isinstance(meta.get(key[0]), dict) or meta[key[0]].get(key[1]) is None]
    if missing and _writable_path(workload.obj, "/metadata/annotations"):
        target = ensure(workload.obj, "metadata")
        for (section, key), value in missing:
            ensure(target, section)[key] = value


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
    annotations = as_dict(as_dict(workload.obj.get("metadata")).get(ANNOTATIONS))
    for scheduler in workload.gang.ownerGroups:  # what a scheduler reads off the object itself
        for (_section, name), _value in OWNER_WRITES.get(scheduler, ()):
            if (value := annotations.get(name)) is not None:
                ptr = pointer.join("/metadata/annotations", name)
                out.setdefault(ptr, Setting(ptr, f"annotation {name}", value))
    gang = workload.gang
    if workload.gang_pointer:
        for name in filter(None, (gang.enabled, gang.scheduler, gang.queue, gang.minMember)):
            ptr = workload.gang_pointer + "/" + name
            if (value := workload.at(ptr)) is not None:
                out[ptr] = Setting(ptr, ptr[1:].replace("/", "."), value)
    return out
