"""NVIDIA MIG GPU-instance profiles per GPU model, as data.

Sources (mlgate reference ml-domain.md section 1):
- Profiles and the most instances of each on one GPU: NVIDIA MIG user guide, "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) for A30 and A100;
  NVIDIA/mig-parted `deployments/systemd/config-default.yaml` ("all-<profile>" counts) for the others;
  NVIDIA/go-nvml `pkg/nvml/mock/gpus/*.go` (InstanceCount per profile).
- Placements: NVML `nvmlGpuInstancePlacement_t` (start, size) over memory slices; an instance fits iff its slices
  do not overlap the ones already taken. A100 placements as `nvidia-smi mig -lgipp` lists them; A30 from go-nvml
  `pkg/nvml/mock/gpus/a30.go`. H100, H200, B200, GB200, B300 and GB300 are taken to share the A100 topology
  (7 compute slices, 8 memory slices); that is inferred, not documented.
- PCI device ids: the `device-filter` groups of mig-parted's config-default.yaml (device id without the 0x10DE
  vendor half). Where mig-parted lists A800/H800 ids with the A100/H100 80GB models, both models have identical
  tables, so which of the two an id is filed under only changes the name in messages.

- Models behind a GPU feature discovery product label (`nvidia.com/gpu.product`): the NVML device name with its
  spaces written as `-` (k8s-device-plugin `internal/lm/resource.go`), e.g. `NVIDIA-A100-SXM4-40GB`,
  `NVIDIA-H100-80GB-HBM3`, `NVIDIA-A30`; under the single MIG strategy followed by `-MIG-<profile>`. `model_of_product`
  reads the GPU token (A100, H100, ...) and, where one GPU comes in several sizes, the memory or form token
  (40GB, 80GB, NVL, ...); that reading is inferred from the naming scheme, and a name it cannot place is left unplaced.

Pinned interpretations: a 4g and a 3g instance never share one GPU, although memory placement alone would allow it
(NVIDIA/mig-parted#29 "Insufficient Resources"); at most one `+me` instance per GPU; `1g.10gb` means different
profiles on different models, so validity is always per model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MEDIA_SUFFIX = "+me"
MAX_MEDIA_PER_GPU = 1
EXCLUSIVE_COMPUTE_SIZES = frozenset({4, 3})  # pinned: a 4g and a 3g instance never share a GPU


@dataclass(frozen=True)
class Shape:
    """Where an instance may sit: its compute slices, memory slices, and allowed first memory slices."""

    compute: int
    size: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    name: str
    shape: Shape
    max_count: int

    @property
    def media(self) -> bool:
        return self.name.endswith(MEDIA_SUFFIX)


@dataclass(frozen=True)
class GpuModel:
    key: str
    title: str
    device_ids: tuple[int, ...]  # PCI device ids, e.g. 0x20B0 (mig-parted writes 0x20B010DE)
    compute_slices: int
    memory_slices: int
    profiles: Mapping[str, Profile]


# A100-class topology: 7 compute slices over 8 memory slices.
_1G = Shape(1, 1, (0, 1, 2, 3, 4, 5, 6))
_1G_WIDE = Shape(1, 2, (0, 2, 4, 6))  # one compute slice with two memory slices (1g.10gb on A100-40GB)
_2G = Shape(2, 2, (0, 2, 4))
_3G = Shape(3, 4, (0, 4))
_4G = Shape(4, 4, (0,))
_7G = Shape(7, 8, (0,))
# A30 topology: 4 compute slices over 4 memory slices.
_A30_1G = Shape(1, 1, (0, 1, 2, 3))
_A30_2G = Shape(2, 2, (0, 2))
_A30_4G = Shape(4, 4, (0,))


def _model(key: str, title: str, ids: tuple[int, ...], slices: tuple[int, int],
           rows: list[tuple[str, Shape, int]]) -> GpuModel:
    profiles = {name: Profile(name, shape, most) for name, shape, most in rows}
    return GpuModel(key, title, ids, slices[0], slices[1], profiles)


def _seven(key: str, title: str, ids: tuple[int, ...], gb: tuple[int, int, int, int, int, int],
           media: bool = True) -> GpuModel:
    """A 7-slice model; `gb` = the memory figures in the names of 1g, wide 1g, 2g, 3g, 4g and 7g."""
    one, wide, two, three, four, seven = gb
    rows = [
        (f"1g.{one}gb", _1G, 7),
        (f"1g.{wide}gb", _1G_WIDE, 4),
        (f"2g.{two}gb", _2G, 3),
        (f"3g.{three}gb", _3G, 2),
        (f"4g.{four}gb", _4G, 1),
        (f"7g.{seven}gb", _7G, 1),
    ]
    if media:
        rows.append((f"1g.{one}gb{MEDIA_SUFFIX}", _1G, 1))
    return _model(key, title, ids, (7, 8), rows)


ModelKey = Literal[
    "a30-24gb", "a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl-94gb", "h100-96gb",
    "gh200-144gb", "h200-141gb", "b200-180gb", "gb200", "b300", "gb300",
]

_ALL = (
    _model("a30-24gb", "A30-24GB", (0x20B7,), (4, 4), [
        ("1g.6gb", _A30_1G, 4), ("1g.6gb+me", _A30_1G, 1), ("2g.12gb", _A30_2G, 2),
        ("2g.12gb+me", _A30_2G, 1), ("4g.24gb", _A30_4G, 1),
    ]),
    _seven("a100-40gb", "A100/A800-40GB", (0x20B0, 0x20B1, 0x20F1, 0x20F6), (5, 10, 10, 20, 20, 40)),
    _seven("a100-80gb", "A100/A800-80GB", (0x20B2, 0x20B5, 0x20F3, 0x20F5), (10, 20, 20, 40, 40, 80)),
    _seven("h100-80gb", "H100/H800-80GB", (0x2330, 0x2331, 0x2322, 0x2324), (10, 20, 20, 40, 40, 80)),
    _seven("h100-nvl-94gb", "H100/H800 NVL 94GB", (0x2321, 0x233A), (12, 24, 24, 47, 47, 94)),
    _seven("h100-96gb", "H100-96GB/GH200 96GB", (0x2342, 0x233D, 0x20B6, 0x2329), (12, 24, 24, 48, 48, 96)),
    _seven("gh200-144gb", "GH200 144G HBM3e", (0x2348,), (18, 36, 36, 72, 72, 144)),
    _seven("h200-141gb", "H200-141GB/H200 NVL", (0x2335, 0x233B), (18, 35, 35, 71, 71, 141)),
    _seven("b200-180gb", "B200-180GB", (0x2901,), (23, 45, 45, 90, 90, 180)),
    _seven("gb200", "GB200", (0x2941,), (23, 47, 47, 93, 93, 186)),
    _seven("b300", "B300", (0x3182,), (34, 67, 67, 135, 135, 269), media=False),
    _seven("gb300", "GB300", (0x31C2,), (35, 70, 70, 139, 139, 278), media=False),
)

MODELS: Mapping[str, GpuModel] = {m.key: m for m in _ALL}
BY_DEVICE_ID: Mapping[int, GpuModel] = {i: m for m in _ALL for i in m.device_ids}


# (GPU token, the token that tells its size apart or None for "any") -> model key; see the module docstring
_PRODUCT_TOKENS: Mapping[tuple[str, str | None], str] = {
    ("A30", None): "a30-24gb",
    ("A100", "40GB"): "a100-40gb", ("A800", "40GB"): "a100-40gb",
    ("A100", "80GB"): "a100-80gb", ("A800", "80GB"): "a100-80gb",
    ("H100", "80GB"): "h100-80gb", ("H100", "PCIE"): "h100-80gb", ("H800", None): "h100-80gb",
    ("H100", "NVL"): "h100-nvl-94gb", ("H100", "94GB"): "h100-nvl-94gb", ("H800", "NVL"): "h100-nvl-94gb",
    ("H100", "96GB"): "h100-96gb", ("GH200", "96GB"): "h100-96gb",
    ("GH200", "144G"): "gh200-144gb", ("GH200", "144GB"): "gh200-144gb",
    ("H200", None): "h200-141gb",
    ("B200", None): "b200-180gb",
    ("GB200", None): "gb200",
    ("B300", None): "b300",
    ("GB300", None): "gb300",
}
_GPU_TOKENS = frozenset(gpu for gpu, _ in _PRODUCT_TOKENS)


def model_of_product(product: str) -> GpuModel | None:
    """The model a product label names (`NVIDIA-H100-80GB-HBM3` -> H100-80GB), or None where the name does not say."""
    tokens = product.upper().split("-")
    gpus = [t for t in tokens if t in _GPU_TOKENS]
    if len(gpus) != 1:
        return None
    sized = [key for t in tokens if (key := _PRODUCT_TOKENS.get((gpus[0], t))) is not None]
    if len(set(sized)) > 1:
        return None
    key = sized[0] if sized else _PRODUCT_TOKENS.get((gpus[0], None))
    return MODELS[key] if key is not None else None


def resource_name(profile: str) -> str:
    """Mixed-strategy resource of a profile: `+` is written as `.` (k8s-device-plugin rm.go)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def profile_of_resource(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`; None for anything that is not a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource[len(MIG_RESOURCE_PREFIX):]
    return profile[: -len(".me")] + MEDIA_SUFFIX if profile.endswith(".me") else profile


def models_with(profile: str, keys: Sequence[str] | None = None) -> list[GpuModel]:
    """The models (among `keys`, default all) that offer `profile`."""
    chosen = [MODELS[k] for k in keys] if keys is not None else list(MODELS.values())
    return [m for m in chosen if profile in m.profiles]
