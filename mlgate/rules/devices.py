"""Which extended resources are GPUs: exact names and documented patterns, checked against each device plugin.

A GPU resource counts whole devices (or whole partitions of one). Sharing resources are not GPUs: a memory
amount, a share of cores, a time-slice replica. Counting them as GPUs would make HAMi's `nvidia.com/gpumem: 8000`
a pod that "asks for 8000 GPUs". A policy may add names or shell patterns (`spec.gpuResources`) for its own rules.

Built in, with where each name comes from:
- `nvidia.com/gpu`: NVIDIA k8s-device-plugin `internal/rm/rm.go` (`AddGPUResource("*", "gpu")`), also under
  HAMi, GKE (`container-engine-accelerators` `pkg/gpu/nvidia/manager.go`) and the NVIDIA DRA driver's
  `extendedResourceName`.
- `nvidia.com/mig-<g>g.<gb>gb[suffix]`: the "mixed" MIG strategy, `+` written as `.` (`mig-1g.10gb.me`,
  `mig-1g.24gb.me.all`, `mig-1g.24gb-me`); rm.go `strings.ReplaceAll("mig-"+p.String(), "+", ".")`.
- `amd.com/gpu`, and `amd.com/<compute>_<memory>` partitions (`cpx_nps4`) under the ROCm plugin's "mixed"
  resource naming strategy (ROCm/k8s-device-plugin `internal/pkg/amdgpu/amdgpu.go`).
- `gpu.intel.com/i915`, `gpu.intel.com/xe`: intel-device-plugins-for-kubernetes `cmd/gpu_plugin/gpu_plugin.go`.

Through DRA (`rules/claims.py`), a DeviceClass is a GPU class when its `extendedResourceName` is a GPU name, or a
selector tests `device.driver` against a GPU driver: `gpu.nvidia.com` (NVIDIA k8s-dra-driver-gpu; a MIG class also
tests `.type == 'mig'`), `gpu.amd.com` (ROCm k8s-gpu-dra-driver), `gpu.intel.com` (intel-resource-drivers-for-
kubernetes). A class not in the facts is known by the names those drivers' charts give their classes:
`gpu.nvidia.com`, `vfio.gpu.nvidia.com`, `mig.nvidia.com` (k8s-dra-driver-gpu v25.12.0
`deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-*.yaml`), `gpu.amd.com`, `gpu.intel.com`.

Not GPUs: `<name>.shared` (k8s-device-plugin `renameByDefault` time-slicing and MPS replicas,
`DefaultSharedResourceNameSuffix`); HAMi's `nvidia.com/gpumem`, `gpumem-percentage`, `gpucores`, `priority`
(charts/hami/values.yaml); Intel's `gpu.intel.com/millicores`, `memory.max`, `tiles` (GPU Aware Scheduling) and
`monitoring`. The `gpu.sharing` rule judges those when a policy asks for it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

FULL_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"  # k8s-device-plugin DefaultSharedResourceNameSuffix
GPU_NAMES = frozenset({FULL_GPU, "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe"})
# go-nvlib mig_profile.go "%dg.%dgb%s", the suffix `+attr[.attr]` or `-attr` with `+` written as `.`; a `+`
# left as it is (no valid resource name) is seen too, so that mig.profile-exists can say how to write it
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-[1-9][0-9]*g\.[0-9]+gb(?:[.+-][a-z]+(?:[.+][a-z]+)*)?$")
AMD_PARTITION = re.compile(r"^amd\.com/(?:spx|dpx|tpx|qpx|cpx)_nps[0-9]+$")
# The same, as RE2 for the webhook's CEL match conditions (manifests/webhooks.yaml mirrors these; a test checks)
CEL_PATTERNS = (MIG_RESOURCE.pattern, AMD_PARTITION.pattern)


@dataclass(frozen=True, slots=True)
class GpuResources:
    """The resource names one policy's rules count as GPUs: the built-in ones and `extra` (names or shell
    patterns the policy lists)."""

    extra: tuple[str, ...] = ()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _is_gpu(name, self.extra)


@lru_cache(maxsize=4096)
def _is_gpu(name: str, extra: tuple[str, ...]) -> bool:
    # every rule reads the same few resource names on every object
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in extra):
        return True
    if name.endswith(SHARED_SUFFIX):
        return False
    return name in GPU_NAMES or bool(MIG_RESOURCE.match(name) or AMD_PARTITION.match(name))


BUILT_IN = GpuResources()


def is_mig(name: str) -> bool:
    return name.startswith(MIG_PREFIX)


DraGpu = Literal["gpu", "mig"]
DRA_GPU_DRIVERS = ("gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com")
DRA_GPU_CLASSES: dict[str, DraGpu] = {"gpu.nvidia.com": "gpu", "vfio.gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig",
                                      "gpu.amd.com": "gpu", "gpu.intel.com": "gpu"}
_CLASS_DRIVERS = {"vfio.gpu.nvidia.com": "gpu.nvidia.com", "mig.nvidia.com": "gpu.nvidia.com"}  # else the same name
_DRIVER_TEST = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_MIG_TEST = re.compile(r"""\.type\s*==\s*["']mig["']""")


def dra_gpu_class(name: str, device_class: Mapping[str, Any] | None, gpus: GpuResources = BUILT_IN) -> DraGpu | None:
    """Whether DeviceClass `name` (its object from the facts, if known) hands out whole GPUs, MIG devices, or
    neither (None)."""
    if device_class is None:
        return DRA_GPU_CLASSES.get(name)
    spec = device_class.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    extended = spec.get("extendedResourceName")
    if isinstance(extended, str) and extended in gpus:
        return "mig" if is_mig(extended) else "gpu"
    for selector in spec.get("selectors") or ():
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if isinstance(expression, str) and any(d in DRA_GPU_DRIVERS for d in _DRIVER_TEST.findall(expression)):
            return "mig" if _MIG_TEST.search(expression) else "gpu"
    return None


def dra_driver(name: str, device_class: Mapping[str, Any] | None) -> str | None:
    """The DRA driver whose devices DeviceClass `name` hands out, when its selector (or its known name) says."""
    if device_class is None:
        return _CLASS_DRIVERS.get(name, name) if name in DRA_GPU_CLASSES else None
    spec = device_class.get("spec")
    for selector in (spec.get("selectors") or ()) if isinstance(spec, Mapping) else ():
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        drivers = _DRIVER_TEST.findall(expression) if isinstance(expression, str) else []
        if len(set(drivers)) == 1:
            return str(drivers[0])
    return None
