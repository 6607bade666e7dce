"""Defaults that admission fills in, only where the user left a field unset.

Fields and values written:
- `resources.requests.<gpu>` := `resources.limits.<gpu>` when the request is unset. A request
  that differs is left alone for `gpu.limits` to reject (extended resources cannot be
  overcommitted: https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/).
- `spec.tolerations` += `{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}` on pods
  that ask for GPUs (the taint GPU node pools carry; GKE/AKS/EKS GPU docs).
- `securityContext` hardening from the Pod Security Standards restricted profile
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/): container
  `allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`, pod
  `seccompProfile.type: RuntimeDefault`; `runAsNonRoot: true` only when asked, since it stops
  images that run as root. Privileged containers and Windows pods are left alone.
- Run policy: Kubeflow replica `restartPolicy`, `runPolicy.backoffLimit`,
  `runPolicy.cleanPodPolicy` (training-operator v1 `RunPolicy`); Job `backoffLimit` and pod
  `restartPolicy` (batch/v1 requires Never or OnFailure).
- `/dev/shm` as a memory-backed emptyDir for multi-GPU pods and distributed GPU jobs (NCCL
  uses shared memory; the container runtime's 64 MiB default is too small).
- The checkpoint directory as an env var in the main container.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Literal

from pydantic import Field

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate, Workload, ensure
from mlgate.rules.common import pod_gpu_count, quantity, regular_gpus
from mlgate.rules.registry import Context, NoParams, Params, mutation

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"


@mutation("defaults.gpu-requests", "GPU requests set equal to limits where unset", NoParams, order=10,
          reports_changes=True)
def gpu_requests(workload: Workload, params: NoParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        for _, _, container, limits, requests, _ in regular_gpus(template):
            # only a count the API server would accept is copied: a bad limit is gpu.limits' to report
            missing = {k: v for k, v in limits.items() if k not in requests and _whole_count(v)}
            if missing:
                target = template.container_target(str(container.get("name")))
                ensure(ensure(target, "resources"), "requests").update(missing)
                changed = True
    return changed


def _whole_count(value: Any) -> bool:
    number = quantity(value) if not isinstance(value, bool) else None
    return number is not None and number >= 0 and number == number.to_integral_value()


class TolerationParams(Params):
    key: str = "nvidia.com/gpu"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


@mutation("defaults.gpu-toleration", "GPU pods tolerate the GPU node taint", TolerationParams, order=20,
          reports_changes=True)
def gpu_toleration(workload: Workload, params: TolerationParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        if pod_gpu_count(template) == 0:
            continue
        if any(_tolerates(t, params.key, params.effect) for t in template.spec.get("tolerations") or []):
            continue
        toleration = {"key": params.key, "operator": "Exists", "effect": params.effect}
        ensure(template.pod_target(), "tolerations", list).append(toleration)
        changed = True
    return changed


def _tolerates(toleration: Any, key: str, effect: str) -> bool:
    if not isinstance(toleration, dict):
        return False
    key_ok = toleration.get("key") == key or (not toleration.get("key") and toleration.get("operator") == "Exists")
    return key_ok and toleration.get("effect") in (None, "", effect)


class SecurityParams(Params):
    disallow_privilege_escalation: bool = True
    drop_all_capabilities: bool = True
    seccomp_runtime_default: bool = True
    run_as_non_root: bool = False


@mutation("defaults.security-context", "hardened securityContext where unset", SecurityParams, order=30,
          reports_changes=True)
def security_context(workload: Workload, params: SecurityParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        if (template.spec.get("os") or {}).get("name") == "windows":
            continue
        pod_sc = template.spec.get("securityContext") or {}
        if params.seccomp_runtime_default and not pod_sc.get("seccompProfile"):
            ensure(ensure(template.pod_target(), "securityContext"), "seccompProfile")["type"] = "RuntimeDefault"
            changed = True
        if params.run_as_non_root and pod_sc.get("runAsNonRoot") is None:
            ensure(template.pod_target(), "securityContext")["runAsNonRoot"] = True
            changed = True
        for _, _, container in template.regular_containers():
            changed |= _harden_container(template, container, params)
    return changed


def _harden_container(template: PodTemplate, container: dict[str, Any], params: SecurityParams) -> bool:
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return False  # the API server refuses allowPrivilegeEscalation=false with privileged=true
    wanted: dict[str, Any] = {}
    if params.disallow_privilege_escalation and sc.get("allowPrivilegeEscalation") is None:
        wanted["allowPrivilegeEscalation"] = False
    if params.drop_all_capabilities and (sc.get("capabilities") or {}).get("drop") is None:
        wanted["drop"] = ["ALL"]
    if not wanted:
        return False
    target = ensure(template.container_target(str(container.get("name"))), "securityContext")
    if "drop" in wanted:
        ensure(target, "capabilities")["drop"] = wanted.pop("drop")
    target.update(wanted)
    return True


class RunPolicyParams(Params):
    restart_policy: Literal["OnFailure", "Never", "ExitCode", "Always"] = "OnFailure"
    backoff_limit: int | None = Field(default=3, ge=0)
    clean_pod_policy: Literal["All", "Running", "None"] | None = "Running"


@mutation("defaults.run-policy", "restartPolicy, backoffLimit and cleanPodPolicy", RunPolicyParams, order=40,
          reports_changes=True)
def run_policy(workload: Workload, params: RunPolicyParams, context: Context) -> bool:
    """Only the fields the kind has (its description's `runPolicy`), and a restartPolicy its pods accept."""
    policy = workload.run_policy
    if policy is None:
        return False
    obj = workload.obj
    changed = False
    allowed = policy.restartPolicies
    value = params.restart_policy if params.restart_policy in allowed else (allowed[0] if allowed else None)
    for template in workload.templates:
        if template.restart_policy_pointer is not None and value is not None:
            changed |= _set_default(obj, template.restart_policy_pointer, value)
    if params.backoff_limit is not None and "backoffLimit" in policy.fields:
        changed |= _set_default(obj, policy.pointer + "/backoffLimit", params.backoff_limit)
    if params.clean_pod_policy is not None and "cleanPodPolicy" in policy.fields:
        changed |= _set_default(obj, policy.pointer + "/cleanPodPolicy", params.clean_pod_policy)
    return changed


class ShmParams(Params):
    size_limit: str | None = "8Gi"
    min_gpus_per_pod: int = Field(default=2, ge=1)


@mutation("defaults.shm", "memory-backed /dev/shm for multi-GPU NCCL jobs", ShmParams, order=50,
          reports_changes=True)
def shared_memory(workload: Workload, params: ShmParams, context: Context) -> bool:
    distributed = workload.total_replicas > 1
    changed = False
    for template in workload.templates:
        gpus = pod_gpu_count(template)
        if gpus == 0 or (gpus < params.min_gpus_per_pod and not distributed):
            continue
        if any(m.get("mountPath") == SHM_PATH for _, _, c in template.containers()
               for m in c.get("volumeMounts") or [] if isinstance(m, dict)):
            continue
        names = {v.get("name") for v in template.spec.get("volumes") or [] if isinstance(v, dict)}
        if SHM_VOLUME not in names:
            empty_dir: dict[str, Any] = {"medium": "Memory"}
            if params.size_limit:
                empty_dir["sizeLimit"] = params.size_limit
            ensure(template.pod_target(), "volumes", list).append({"name": SHM_VOLUME, "emptyDir": empty_dir})
            changed = True
        for key, _, container, limits, _, _ in regular_gpus(template):
            if key == "containers" and limits:
                target = template.container_target(str(container.get("name")))
                ensure(target, "volumeMounts", list).append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
                changed = True
    return changed


class CheckpointEnvParams(Params):
    env_name: str = "CHECKPOINT_DIR"
    claim_patterns: list[str] = Field(default_factory=lambda: ["*checkpoint*", "*ckpt*"])


@mutation("defaults.checkpoint-env", "the checkpoint directory as an env var", CheckpointEnvParams, order=60,
          reports_changes=True)
def checkpoint_env(workload: Workload, params: CheckpointEnvParams, context: Context) -> bool:
    changed = False
    for template in workload.templates:
        for name, directory in _checkpoint_dirs(workload, template, params):
            container = next((c for _, _, c in template.regular_containers() if c.get("name") == name), {})
            if any(isinstance(e, dict) and e.get("name") == params.env_name for e in container.get("env") or []):
                continue
            env = ensure(template.container_target(name), "env", list)
            env.append({"name": params.env_name, "value": directory})
            changed = True
    return changed


def _checkpoint_dirs(
    workload: Workload, template: PodTemplate, params: CheckpointEnvParams
) -> list[tuple[str, str]]:
    checkpoint = workload.checkpoint
    if checkpoint is not None and template.main_container:
        directory = checkpoint.mount_path or checkpoint.uri
        return [(template.main_container, directory)] if directory else []
    claims = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName", "")
        for v in template.spec.get("volumes") or []
        if isinstance(v, dict) and v.get("persistentVolumeClaim")
    }
    found = []
    for _, _, container in template.regular_containers():
        for mount in container.get("volumeMounts") or []:
            claim = claims.get(mount.get("name")) if isinstance(mount, dict) else None
            if claim and any(fnmatch.fnmatchcase(claim, p) for p in params.claim_patterns):
                found.append((str(container.get("name")), str(mount.get("mountPath"))))
                break
    return found


def _set_default(obj: dict[str, Any], ptr: str, value: Any) -> bool:
    """Set the field at `ptr` (parents created) unless present; True if it was set."""
    tokens = pointer.split(ptr)
    node = obj
    for token in tokens[:-1]:
        node = ensure(node, token)
    if tokens[-1] in node:
        return False
    node[tokens[-1]] = value
    return True
