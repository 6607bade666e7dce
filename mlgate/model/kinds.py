"""What a workload kind is to mlgate: where its pod templates live, how many pods each runs, and its job context.

The shipped kinds (`mlgate/workloads/kinds.yaml`) and a platform team's own CRDs (a `WorkloadKind` document in
the policy set, or a `ClusterWorkloadKind` object in the cluster) are written in this one schema:

    apiVersion: mlgate.dev/v1alpha1
    kind: WorkloadKind
    metadata: {name: featuresyncs.data.example.com}
    spec:
      group: data.example.com          # "" for the core group
      versions: [v1]                   # empty: every version
      kind: FeatureSync
      resource: featuresyncs           # the plural the API server serves it under
      templates:
        - pointer: /spec/workers/*/template   # `*` is any list item or map value
          shape: PodTemplateSpec       # PodTemplateSpec (spec + metadata) | PodSpec (a bare pod spec)
          role: "{name}"               # a fixed name, "{key}" (what `*` matched), or "{field}" of the matched item
          replicas: {product: [replicas, template/spec/parallelism]}
      runPolicy: {pointer: /spec/runPolicy, fields: [backoffLimit]}
      gang: {pointer: /spec/scheduling, minMember: minAvailable}

Counts (`replicas`) are read relative to the item the last `*` matched, or to the object itself when the
pointer has none: a whole number, a field (`replicas`, or `{at: replicas, default: 1}`), or `product`, `min`
and `max` of counts.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from mlgate.model.policy import Metadata, Strict

WORKLOAD_KIND_KINDS = ("WorkloadKind", "ClusterWorkloadKind")
Scheduler = Literal["volcano", "coscheduling", "kueue", "yunikorn", "kai"]
RestartPolicy = Literal["OnFailure", "Never", "ExitCode", "Always"]
SCHEDULERS: tuple[Scheduler, ...] = get_args(Scheduler)
RESTART_POLICIES: tuple[RestartPolicy, ...] = get_args(RestartPolicy)
_POINTER = re.compile(r"^(/([^/~]|~[01])*)*$")
_RELATIVE = re.compile(r"^([^/~]|~[01])+(/([^/~]|~[01])+)*$")


class Count(Strict):
    """How many pods a template runs: exactly one of the fields."""

    value: int | None = Field(default=None, ge=0)
    at: str | None = None  # a field relative to the matched item (slash-separated)
    default: int = Field(default=1, ge=0)  # when `at` is unset or not a whole number
    product: list[Count] | None = Field(default=None, min_length=1)
    min: list[Count] | None = Field(default=None, min_length=1)
    max: list[Count] | None = Field(default=None, min_length=1)
    ifSet: str | None = None  # a field relative to the matched item: `then` where it is set, else `otherwise`
    then: Count | None = None
    otherwise: Count | None = None
    offset: int = 0  # added to the result (never below 0): LWS workers are `size` less the leader

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value  # refused below: a count is not a yes/no
        if isinstance(value, int):
            return {"value": value}
        if isinstance(value, str):
            return {"at": value}
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Count:
        chosen = [n for n in ("value", "at", "product", "min", "max", "ifSet") if getattr(self, n) is not None]
        if len(chosen) != 1:
            raise ValueError("a count is exactly one of: a whole number, a field, product, min, max or ifSet")
        if (self.ifSet is None) != (self.then is None) or (self.ifSet is None) != (self.otherwise is None):
            raise ValueError("ifSet needs both then and otherwise, and they need ifSet")
        for field in (self.at, self.ifSet):
            if field is not None and not _RELATIVE.match(field):
                raise ValueError(f"{field!r} is not a relative field path such as 'replicas' or 'spec/parallelism'")
        return self


class TemplateSource(Strict):
    pointer: str
    shape: Literal["PodTemplateSpec", "PodSpec"] = "PodTemplateSpec"
    role: str = Field(min_length=1)
    replicas: Count = Field(default_factory=lambda: Count(value=1))
    suspended: str | None = None  # a field relative to the matched item; true runs no pods
    restartPolicy: str | None = None  # where the role keeps its restartPolicy, relative; unset: the pod spec's

    @field_validator("pointer")
    @classmethod
    def _pointer(cls, value: str) -> str:
        if not _POINTER.match(value):
            raise ValueError(f"{value!r} is not a JSON pointer such as /spec/template or /spec/tasks/*/template")
        return value


class RunPolicy(Strict):
    pointer: str
    fields: list[Literal["backoffLimit", "cleanPodPolicy"]] = Field(default_factory=list)
    restartPolicies: list[RestartPolicy] = Field(default_factory=lambda: list(RESTART_POLICIES))


class Gang(Strict):
    """The kind's own gang settings, and which schedulers gang.inject may group it for."""

    pointer: str | None = None  # where the kind keeps its gang settings
    minMember: str | None = None  # the field there that holds the minimum
    queue: str | None = None  # the field there that holds the queue
    enabled: str | None = None  # a yes/no field there (false: leave the job alone)
    scheduler: str | None = None  # a field there naming the scheduler (another name: leave the job alone)
    settingsFor: list[Scheduler] = Field(default_factory=list)  # schedulers that read the fields above
    queueLabelFor: list[Scheduler] = Field(default_factory=list)  # schedulers that read a queue label off the object
    podMarkers: bool = True  # false: the kind's controller marks the pods itself
    # schedulers that group this kind's pods by their owner themselves (Volcano's podgroup controller for a batch
    # Job): the pods get the scheduler's name and queue but no group marker, the object its minimum
    ownerGroups: list[Scheduler] = Field(default_factory=list)
    # schedulers that gang this kind's pods only through a PodGroup someone creates (no operator does it): the
    # markers are written, and gang.size says which PodGroup must exist
    needsPodGroup: list[Scheduler] = Field(default_factory=list)
    # true: one object is one member of a group of separate objects (a Kueue plain-pod group of Pods), so the
    # group's size is not this object's pod count
    groupSpansObjects: bool = False
    schedulers: list[Scheduler] = Field(default_factory=lambda: list(SCHEDULERS))  # gang.inject works for these
    # schedulers that cannot gang this kind's pods at all, and why: gang.inject skips them with that reason, and
    # gang.size refuses a job whose own settings ask one of them for a gang
    noGang: dict[Scheduler, str] = Field(default_factory=dict)


class Launcher(Strict):
    """Who starts the kind's processes and what it sets (the launch rules read it): env a user must not set,
    and where the kind keeps its own launch settings."""

    by: str = Field(min_length=1)  # named in messages, e.g. "Kubeflow training-operator"
    reservedEnv: list[str] = Field(default_factory=list)  # names the operator sets in every pod
    reservedPrefixes: list[str] = Field(default_factory=list)  # e.g. PET_ (torchrun's)
    # a field of name → value pairs the operator turns into env (hyperparameters), or a list of such fields
    envFrom: str | list[str] | None = None
    envFromReserved: list[str] = Field(default_factory=list)  # names reserved in envFrom only (set by a mutation)
    procsPerNode: str | None = None  # a field giving processes per pod (Trainer v2 trainer.numProcPerNode)
    slotsPerWorker: str | None = None  # MPI: slots per worker pod
    workers: str | None = None  # MPI: the role whose pods are the workers
    launcher: str | None = None  # MPI: the role that runs mpirun

    @property
    def env_from(self) -> tuple[str, ...]:
        """The fields `envFrom` names, one or many."""
        return (self.envFrom,) if isinstance(self.envFrom, str) else tuple(self.envFrom or ())


class KindSpec(Strict):
    group: str = ""
    versions: list[str] = Field(default_factory=list)
    kind: str = Field(min_length=1)
    resource: str = Field(min_length=1)
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    templates: list[TemplateSource] = Field(default_factory=list)
    render: str | None = None  # a renderer for pods that are not a plain template (renderers.RENDERERS)
    embedded: list[str] = Field(default_factory=list)  # pointers to whole objects judged as themselves
    runPolicy: RunPolicy | None = None
    gang: Gang = Field(default_factory=Gang)
    launch: Launcher | None = None
    # fields holding a storage location the pods read or write (data, output): storage.checkpoint-uri checks a
    # URI there as it checks a checkpoint's; an absolute path names a place in the pod's own volumes
    storageUris: list[str] = Field(default_factory=list)
    renderAt: str = "/spec"  # where the renderer reads the kind's spec
    mutable: bool = True  # false: an operator builds the pods from fields mlgate does not write; mutations decline

    @field_validator("storageUris")
    @classmethod
    def _uri_pointers(cls, value: list[str]) -> list[str]:
        bad = [ptr for ptr in value if not ptr or not _POINTER.match(ptr)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} is not a JSON pointer such as /spec/modelConfig/dataPath")
        return value

    @model_validator(mode="after")
    def _has_pods(self) -> KindSpec:
        if not (self.templates or self.render or self.embedded):
            raise ValueError("a kind needs templates, a renderer or embedded objects")
        return self


class WorkloadKindDocument(Strict):
    apiVersion: Literal["mlgate.dev/v1alpha1"]
    kind: Literal["WorkloadKind", "ClusterWorkloadKind"]
    metadata: Metadata
    spec: KindSpec
    status: dict[str, Any] | None = None
