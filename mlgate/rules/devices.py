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

Not GPUs: `<name>.shared` (k8s-device-plugin `renameByDefault` time-slicing and MPS replicas,
`DefaultSharedResourceNameSuffix`); HAMi's `nvidia.com/gpumem`, `gpumem-percentage`, `gpucores`, `priority`
(charts/hami/values.yaml); Intel's `gpu.intel.com/millicores`, `memory.max`, `tiles` (GPU Aware Scheduling) and
`monitoring`. The `gpu.sharing` rule judges those when a policy asks for it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import lru_cache

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
