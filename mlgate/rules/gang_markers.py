"""Each gang scheduler's pod markers, as data, and the view gang rules take of pod templates.

The keys, their aliases and scheduler names are documented in gang.py, which applies them. YuniKorn's task
groups (the JSON annotation gang.inject writes and gang.size reads) are worked out here too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate, Workload, as_dict
from mlgate.rules.common import NAME_PART, pod_effective, quantity

LABELS, ANNOTATIONS = "labels", "annotations"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"  # read off a pod's owner, never the pod
VOLCANO_UNREAD_GROUP = "scheduling.volcano.sh/group-name"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
YUNIKORN_APP = "yunikorn.apache.org/app-id"
YUNIKORN_TASK_GROUP = "yunikorn.apache.org/task-group-name"
YUNIKORN_TASK_GROUPS = "yunikorn.apache.org/task-groups"
KAI_QUEUE = "kai.scheduler/queue"

Key = tuple[str, str]  # (labels | annotations, key)
Aliases = tuple[Key, ...]  # the first is the one gang.inject writes
GROUP: dict[str, Aliases] = {
    # `scheduling.volcano.sh/group-name` is a constant Volcano's scheduler never reads (job_info.go getJobID): no alias
    "volcano": ((ANNOTATIONS, VOLCANO_GROUP),),
    "coscheduling": ((LABELS, "scheduling.x-k8s.io/pod-group"),),
    "kueue": ((LABELS, KUEUE_GROUP), (ANNOTATIONS, KUEUE_GROUP)),
    "yunikorn": ((LABELS, YUNIKORN_APP), (LABELS, "applicationId"), (ANNOTATIONS, YUNIKORN_APP)),
    "kai": ((ANNOTATIONS, "pod-group-name"),),
}
QUEUE: dict[str, Aliases] = {
    "volcano": ((ANNOTATIONS, "scheduling.volcano.sh/queue-name"),),
    "kueue": ((LABELS, KUEUE_QUEUE),),
    "yunikorn": ((LABELS, "yunikorn.apache.org/queue"), (LABELS, "queue"), (ANNOTATIONS, "yunikorn.apache.org/queue")),
    "kai": ((LABELS, KAI_QUEUE),),
}
OTHER: Aliases = ((ANNOTATIONS, VOLCANO_MIN_MEMBER), (ANNOTATIONS, KUEUE_TOTAL),
                  (ANNOTATIONS, YUNIKORN_TASK_GROUP), (ANNOTATIONS, YUNIKORN_TASK_GROUPS))
MARKER_GROUPS: tuple[Aliases, ...] = (*GROUP.values(), *QUEUE.values(), *((k,) for k in OTHER))  # one per marker
MARKERS: Aliases = tuple(dict.fromkeys(k for aliases in MARKER_GROUPS for k in aliases))
# What gang.inject writes on each pod template, per scheduler: (the marker, the value it takes). Values are
# worked out in gang.py (MARKER_VALUES); one that comes out None (no queue, no minMember) is not written.
# KAI writes no group: its pod grouper creates the PodGroup from the owner itself.
WRITES: dict[str, tuple[tuple[Aliases, str], ...]] = {
    "volcano": ((GROUP["volcano"], "job-name"),),
    "coscheduling": ((GROUP["coscheduling"], "job-label"),),
    "kueue": ((GROUP["kueue"], "job-label"), (((ANNOTATIONS, KUEUE_TOTAL),), "pods")),
    "yunikorn": ((GROUP["yunikorn"], "app-id"), (((ANNOTATIONS, YUNIKORN_TASK_GROUP),), "task-group"),
                 (((ANNOTATIONS, YUNIKORN_TASK_GROUPS),), "task-groups")),
    "kai": (),
}
# What gang.inject writes on the object's own metadata where the kind's `ownerGroups` names the scheduler: Volcano
# reads the minimum off the pods' owner (`getMinMemberFromUpperRes`), and without it groups them with minMember 1.
OWNER_WRITES: dict[str, tuple[tuple[Key, str], ...]] = {"volcano": (((ANNOTATIONS, VOLCANO_MIN_MEMBER), "minimum"),)}
# The PodGroup a scheduler needs where the kind's `needsPodGroup` names it, and how pods name it
POD_GROUPS: dict[str, str] = {
    "volcano": f"a scheduling.volcano.sh/v1beta1 PodGroup named by annotation {VOLCANO_GROUP}",
    "coscheduling": "a scheduling.x-k8s.io/v1alpha1 PodGroup named by label scheduling.x-k8s.io/pod-group",
    "kai": "a scheduling.run.ai/v2alpha2 PodGroup named by annotation pod-group-name",
}
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "yunikorn": "yunikorn",
                   "kai": "kai-scheduler", "kueue": None}
JOB_QUEUE_LABELS = {"kueue": KUEUE_QUEUE, "kai": KAI_QUEUE}  # read off the object where its kind says so
_LABEL_VALUE = NAME_PART  # a non-empty label value
FIXED = "gang settings are fixed once the job exists; delete and recreate the job to change them"


@dataclass
class Unit:
    """Pod templates that share one metadata block: a Kubeflow role, a Job, or all roles of a TrainingJob."""

    templates: list[PodTemplate]

    @property
    def first(self) -> PodTemplate:
        return self.templates[0]

    @property
    def replicas(self) -> int:
        return sum(t.replicas for t in self.templates)

    @property
    def roles(self) -> str:
        return " and ".join(t.role for t in self.templates)

    @property
    def task_group(self) -> str:
        return "-".join(t.role.lower() for t in self.templates)

    def get(self, key: Key) -> str | None:
        section = self.first.metadata.get(key[0])
        value = section.get(key[1]) if isinstance(section, dict) else None
        return None if value is None else str(value)

    def find(self, aliases: Aliases) -> tuple[Key, str] | None:
        metadata = self.first.metadata  # looked up once: every job is asked about every marker
        if not (_filled(metadata.get(LABELS)) or _filled(metadata.get(ANNOTATIONS))):
            return None  # most pod templates carry no labels or annotations at all
        for key in aliases:
            section = metadata.get(key[0])
            value = section.get(key[1]) if isinstance(section, dict) else None
            if value is not None:
                return key, str(value)
        return None

    def value(self, aliases: Aliases) -> str | None:
        hit = self.find(aliases)
        return hit[1] if hit else None

    def at(self, key: Key) -> str:
        return pointer.join(self.first.meta_pointer, *key)


def _filled(section: object) -> bool:
    return isinstance(section, dict) and bool(section)


def units(workload: Workload) -> list[Unit]:
    grouped: dict[str, Unit] = {}
    for template in workload.templates:
        grouped.setdefault(template.meta_pointer, Unit([])).templates.append(template)
    return list(grouped.values())


def label_value(text: str) -> str:
    """`text` if it is a valid label value, else a 63-character prefix made unique with a hash."""
    if len(text) <= 63:
        return text
    return text[:54].rstrip("-_.") + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]


# --- YuniKorn task groups: one per unit, sized by one pod's requests -------------------------------


def task_groups_json(all_units: list[Unit]) -> str:
    groups = [{"name": u.task_group, "minMember": u.replicas, "minResource": min_resource(u)}
              for u in all_units if u.replicas > 0]
    return json.dumps(groups, separators=(",", ":"))


def min_resource(unit: Unit) -> dict[str, str]:
    """One pod's effective requests (largest across the unit's templates): YuniKorn's placeholder size."""
    best: dict[str, Decimal] = {}
    for template in unit.templates:
        for resource, amount in _pod_requests(template).items():
            best[resource] = max(amount, best.get(resource, amount))
    return {resource: _text(amount) for resource, amount in sorted(best.items())}


def _pod_requests(template: PodTemplate) -> dict[str, Decimal]:
    """One pod's effective requests (`common.pod_effective`); requests default to limits."""
    return pod_effective((key, container, _requests(container)) for key, _, container in template.regular_containers())


def _requests(container: dict[str, Any]) -> dict[str, Decimal]:
    resources = as_dict(container.get("resources"))
    merged = {**as_dict(resources.get("limits")), **as_dict(resources.get("requests"))}
    return {str(r): amount for r, v in merged.items() if (amount := quantity(v)) is not None}


def _text(number: Decimal) -> str:
    if number != number.to_integral_value():
        return f"{int(number * 1000)}m"
    whole = int(number)  # Python integers: Decimal's own % gives up past its precision (a fuzzed 1e40Gi)
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20)):
        if whole >= unit and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def _show(value: Any) -> str:
    return json.dumps(value)


def parse_task_groups(raw: str) -> tuple[dict[str, int], str | None]:
    """Task-group name → minMember, or the reason YuniKorn would refuse the annotation (yunikorn-k8shim
    pkg/cache/utils.go `GetTaskGroupsFromAnnotation`; it then only records a TaskGroupsError event and schedules
    the app without a gang)."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return {}, f"is not JSON ({exc})"
    if not isinstance(data, list) or not data:
        return {}, "is not a non-empty JSON array"
    groups: dict[str, int] = {}
    for index, item in enumerate(data):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            return {}, f"has item {index} without a name"
        if name in groups:
            return {}, f'defines task group "{name}" twice'
        problem = _task_group_problem(item)
        if problem:
            return {}, f'gives task group "{name}" {problem}'
        groups[name] = item["minMember"]
    return groups, None


def _task_group_problem(item: dict[str, Any]) -> str | None:
    minimum, resources = item.get("minMember"), item.get("minResource")
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
        return f"minMember {_show(minimum)}, not a whole number ≥ 1"
    if not isinstance(resources, dict):
        return "no minResource object" if resources is None else "a minResource that is not an object"
    if "pods" in resources or ("cpu" in resources and "vcore" in resources):
        return "a minResource that names pods, or both cpu and vcore, which YuniKorn counts as one"
    negative = sorted(r for r, v in resources.items() if (amount := quantity(v)) is None or amount < 0)
    return f"a minResource with {', '.join(negative)} not a non-negative quantity" if negative else None
