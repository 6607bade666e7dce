"""Each gang scheduler's pod markers, as data, and the view gang rules take of pod templates.

The keys, their aliases and scheduler names are documented in gang.py, which applies them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.common import NAME_PART

LABELS, ANNOTATIONS = "labels", "annotations"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
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
    "volcano": ((ANNOTATIONS, VOLCANO_GROUP), (ANNOTATIONS, "scheduling.volcano.sh/group-name")),
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
