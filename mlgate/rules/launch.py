"""Launchers: torchrun's process and node counts, the env an operator sets, MPI slots, required checkpoints.

Fields: every init and regular container's `command`, `args` and `env`; the kind's `launch` description
(kinds.yaml): the env its operator sets (`reservedEnv`, `reservedPrefixes`), the fields of hyperparameters that
become env (`envFrom`: TrainingJob `spec.hyperparameters` and `spec.modelConfig.hyperparameters`), Trainer v2's
`trainer.numProcPerNode` (`procsPerNode`), MPI's `slotsPerWorker` and its worker and launcher roles; the run
policy's `activeDeadlineSeconds`; the checkpoint (TrainingJob `spec.checkpoint`, or a read-write claim every pod
mounts).
Allowed values: torchrun (`torchrun`, `python -m torch.distributed.run|launch`) starts `--nproc-per-node`
(`--nproc_per_node`, or `PET_NPROC_PER_NODE`) processes per pod: a number equal to the container's GPUs (MIG
instances count one each), or `auto`/`gpu` (torch/distributed/run.py; torchrun's own default is 1, so a pod
with 8 GPUs uses one). `--nnodes` (`PET_NNODES`) is the number of pods that run torchrun, or `MIN:MAX` around
it. An operator's env is not set by hand (training-operator v1.9 `envvar.go`, mpi-operator v2beta1, Trainer
v2 `constants.go`; ml-domain reference §3). MPI: `slotsPerWorker` equals the GPUs of a worker pod, and
`mpirun -np` (`-n`, `--np`) equals slots times workers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import Field

from mlgate.model import pointer
from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.rules.claims import uncounted_claims
from mlgate.rules.common import container_label, pod_gpu_count, template_gpus
from mlgate.rules.registry import Context, NoParams, Params, check
from mlgate.rules.storage import claim_uses

_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_NPROC = ("--nproc-per-node", "--nproc_per_node")
_NNODES = ("--nnodes",)
_NP = ("-np", "-n", "--np")
_WHOLE = re.compile(r"^[0-9]+$")
_RANGE = re.compile(r"^([0-9]+):([0-9]+)$")


def tokens(container: dict[str, Any]) -> list[str]:
    """`command` + `args`, with any shell script among them (`bash -c "..."`) split as a shell would."""
    out: list[str] = []
    for part in (*as_list(container.get("command")), *as_list(container.get("args"))):
        if not isinstance(part, str):
            continue
        if any(c.isspace() for c in part):
            try:
                out.extend(shlex.split(part))
            except ValueError:  # an unbalanced quote: the words are still worth reading
                out.extend(part.split())
        else:
            out.append(part)
    return out


def launcher_flags(words: Sequence[str], starts: Sequence[str]) -> dict[str, str] | None:
    """The flags given to the launcher `starts` names (torchrun, mpirun), up to its program; None if it is
    not run. Flags are `--name=value` or `--name value`."""
    for index, word in enumerate(words):
        name = word.rsplit("/", 1)[-1]
        module = words[index + 2] if index + 2 < len(words) and words[index + 1] == "-m" else ""
        if name in starts or (_PYTHON.search(word) and module in starts):
            return _flags(words[index + (3 if module else 1):])
    return None


def _flags(words: Sequence[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    index = 0
    while index < len(words) and words[index].startswith("-"):
        name, eq, value = words[index].partition("=")
        if not eq and index + 1 < len(words) and not words[index + 1].startswith("-"):
            value, index = words[index + 1], index + 1
        flags[name] = value
        index += 1
    return flags


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {str(e["name"]): str(e.get("value", "")) for e in as_list(container.get("env"))
            if isinstance(e, dict) and isinstance(e.get("name"), str)}


def _first(flags: dict[str, str], names: Sequence[str]) -> str | None:
    return next((flags[n] for n in names if n in flags), None)


# --- launch.torchrun ----------------------------------------------------------------------------------------


@check("launch.torchrun", "torchrun starts one process per GPU, on as many nodes as the job has pods", NoParams)
def torchrun(workload: Workload, params: NoParams, context: Context) -> list[Finding | Unchecked] | Skipped:
    runs = [(t, key, index, c, flags) for t in workload.templates for key, index, c in t.regular_containers()
            if (flags := launcher_flags(tokens(c), ("torchrun", *_TORCH_MODULES))) is not None]
    procs = _procs_per_node(workload, context)
    if not runs and procs is None:
        return Skipped("no container runs torchrun")
    findings: list[Finding | Unchecked] = [f for run in runs for f in _nproc_findings(run, context)]
    if workload.pods_counted and runs:
        findings += _nnodes_findings(workload, runs)
    return findings + (procs or []) + list(uncounted_claims(workload, context.gpus))


Run = tuple[PodTemplate, str, int, dict[str, Any], dict[str, str]]  # template, list key, index, container, flags


def _nproc_findings(run: Run, context: Context) -> Iterator[Finding]:
    template, key, index, container, flags = run
    value = _first(flags, _NPROC) or _env(container).get("PET_NPROC_PER_NODE")
    gpus = next((g.total for g in template_gpus(template, context.gpus) if (g.key, g.position) == (key, index)), 0)
    if value is None or not _WHOLE.match(value) or gpus == 0 or int(value) == gpus:
        return  # auto, gpu, a CPU job, or the right number
    name = container_label(key, container)
    yield Finding(template.path(key, index, "command" if "command" in container else "args"),
                  "torchrun processes differ from gpus",
                  f"{name} runs torchrun with {value} process(es) per pod but asks for {gpus} GPU(s)",
                  f"set --nproc-per-node={gpus} (or auto), or ask for {value} GPU(s)")


def _nnodes_findings(workload: Workload, runs: list[Run]) -> Iterator[Finding]:
    pods = sum({id(t): t.replicas for t, *_ in runs}.values())
    for template, key, index, container, flags in runs:
        value = _first(flags, _NNODES) or _env(container).get("PET_NNODES")
        if value is None:
            continue
        whole, span = _WHOLE.match(value), _RANGE.match(value)
        fits = (int(value) == pods) if whole else (int(span.group(1)) <= pods <= int(span.group(2))) if span else True
        if not fits:
            yield Finding(template.path(key, index, "command" if "command" in container else "args"),
                          "torchrun nodes differ from pods",
                          f"{container_label(key, container)} runs torchrun with --nnodes={value} but the job runs "
                          f"it in {pods} pod(s)", f"set --nnodes={pods}, or change the replicas")


def _procs_per_node(workload: Workload, context: Context) -> list[Finding] | None:
    """The kind's own processes-per-pod field (Trainer v2 `trainer.numProcPerNode`) against its pods' GPUs; None
    where the kind has no such field or it is unset."""
    launch = workload.launch
    value = workload.at(launch.procsPerNode) if launch is not None and launch.procsPerNode else None
    if launch is None or launch.procsPerNode is None or value is None:
        return None
    text = str(value)
    gpus = {pod_gpu_count(t, context.gpus) for t in workload.templates} - {0}
    if not _WHOLE.match(text) or not gpus or int(text) in gpus:
        return []
    return [Finding(launch.procsPerNode, "torchrun processes differ from gpus",
                    f"{launch.procsPerNode[1:].replace('/', '.')} is {text} but the pods ask for "
                    f"{' or '.join(map(str, sorted(gpus)))} GPU(s)", f"set it to {max(gpus)}, or auto")]


# --- launch.reserved-env ------------------------------------------------------------------------------------


@check("launch.reserved-env", "no hand-set env the operator sets itself", NoParams)
def reserved_env(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    launch = workload.launch
    if launch is None or not (launch.reservedEnv or launch.reservedPrefixes or launch.envFrom):
        return Skipped(f"no operator sets env in {workload.kind or 'these'} pods")
    names, prefixes = set(launch.reservedEnv), tuple(launch.reservedPrefixes)
    findings = []
    for template in workload.templates:
        for key, index, container in template.regular_containers():
            for position, entry in enumerate(as_list(container.get("env"))):
                name = as_dict(entry).get("name")
                if isinstance(name, str) and (name in names or name.startswith(prefixes)):
                    findings.append(Finding(template.path(key, index, "env", position, "name"), "env set by operator",
                                            f"{container_label(key, container)} sets {name}, which {launch.by} sets "
                                            f"in every {workload.kind} pod", f"remove {name}; {launch.by} sets it"))
    drops = names | set(launch.envFromReserved)
    for field in launch.env_from:  # every field of hyperparameters (TrainingJob: top level and modelConfig)
        for key in as_dict(workload.at(field)):
            if key in drops or str(key).startswith(prefixes):
                findings.append(Finding(pointer.join(field, key), "env set by operator",
                                        f"{field[1:].replace('/', '.')} names {key}, which {launch.by} sets "
                                        "itself, so this value would never reach the pods",
                                        f"rename the key; {launch.by} sets {key}"))
    return findings


# --- launch.mpi-slots ---------------------------------------------------------------------------------------


@check("launch.mpi-slots", "MPI slots match each worker's GPUs, and mpirun -np the slots of all workers", NoParams)
def mpi_slots(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    launch = workload.launch
    if launch is None or launch.slotsPerWorker is None or launch.workers is None:
        return Skipped(f"{workload.kind or 'this kind'} has no MPI slots")
    workers = [t for t in workload.templates if t.role == launch.workers]
    raw = workload.at(launch.slotsPerWorker)
    slots = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 1  # mpi-operator's default
    findings = []
    gpus = {pod_gpu_count(t, context.gpus) for t in workers} - {0}
    if gpus and slots not in gpus:
        findings.append(Finding(launch.slotsPerWorker, "mpi slots differ from gpus",
                                f"slotsPerWorker is {slots} but each {launch.workers} pod asks for "
                                f"{' or '.join(map(str, sorted(gpus)))} GPU(s)", f"set slotsPerWorker: {max(gpus)}"))
    total = slots * sum(t.replicas for t in workers)
    for template in workload.templates if launch.launcher else ():
        if template.role != launch.launcher:
            continue
        for key, index, container in template.regular_containers():
            flags = launcher_flags(tokens(container), ("mpirun", "mpiexec"))
            count = _first(flags, _NP) if flags is not None else None
            if count is not None and _WHOLE.match(count) and int(count) != total:
                findings.append(Finding(template.path(key, index, "command" if "command" in container else "args"),
                                        "mpirun processes differ from slots",
                                        f"{container_label(key, container)} runs mpirun -np {count} but the job has "
                                        f"{total} slot(s) ({slots} per worker)", f"use -np {total}"))
    return findings


# --- launch.checkpoint-required -----------------------------------------------------------------------------


class CheckpointParams(Params):
    min_pods: int | None = Field(default=None, ge=1, description="jobs of at least this many pods")
    min_deadline_seconds: int | None = Field(default=None, ge=1, description="or running this long")


@check("launch.checkpoint-required", "large or long jobs write a checkpoint", CheckpointParams)
def checkpoint_required(workload: Workload, params: CheckpointParams, context: Context) -> list[Finding] | Skipped:
    deadline = workload.at(workload.run_policy.pointer + "/activeDeadlineSeconds") if workload.run_policy else None
    large = params.min_pods is not None and workload.pods_counted and workload.total_replicas >= params.min_pods
    long = params.min_deadline_seconds is not None and isinstance(deadline, int) and \
        deadline >= params.min_deadline_seconds
    if not (large or long):
        return Skipped("neither large nor long enough to need a checkpoint")
    if _checkpointed(workload):
        return []
    why = f"{workload.total_replicas} pods" if large else f"activeDeadlineSeconds {deadline}"
    return [Finding("/spec", "checkpoint missing", f"{workload.kind} {workload.name!r} ({why}) writes no checkpoint",
                    "set spec.checkpoint (TrainingJob), or mount a read-write claim for checkpoints in every pod")]


def _checkpointed(workload: Workload) -> bool:
    checkpoint = workload.checkpoint
    if checkpoint is not None and (checkpoint.claim_name or checkpoint.uri):
        return True
    return any(use.writable and set(use.replicas) >= {t.role for t in workload.templates}
               for use in claim_uses(workload).values())
