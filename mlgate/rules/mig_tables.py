"""NVIDIA MIG GPU-instance profiles per GPU model, as data.

Reads: profile names (`<g>g.<gb>gb` with an optional `+attr` or `-attr`, go-nvlib `pkg/nvlib/device/mig_profile.go`),
PCI device ids, and GPU feature discovery product labels (`nvidia.com/gpu.product`).
Allowed values: the rows of `_ALL` below; each names its source in a comment. Sources, by short name:
- GUIDE: NVIDIA MIG User Guide, "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) and "Supported GPUs".
- DEFAULT: NVIDIA/mig-parted `deployments/systemd/config-default.yaml` @ bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d
  ("all-<profile>" counts are maxima; `device-filter` groups give the device ids, written without the 0x10DE
  vendor half). The GPU Operator's `assets/state-mig-manager/0400_configmap.yaml`
  @ a22dbf671f2e26f9a1e342f8eea28e196235e110 carries the same configs.
- BUILDER: NVIDIA/mig-parted `pkg/mig/builder/builder_test.go` @ bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d (the
  profile tables its config generator is tested against, after GUIDE).
- OPERATOR <version>: NVIDIA GPU Operator release notes (NVIDIA/cloud-native-docs `gpu-operator/release-notes.rst`
  @ 52dcb7b8d956784344e241df476de17094a4574c), "Added support for new MIG profiles".
- PCIIDS: go-nvlib `pkg/pciids/default_pci.ids` @ 3c161560521e3208792199f2ed0d559a5f3ae4f4 (device names).

Placements: NVML `nvmlGpuInstancePlacement_t` (start, size) over memory slices; an instance fits iff its slices do
not overlap the ones already taken. A100 placements as `nvidia-smi mig -lgipp` lists them; A30 from go-nvml
`pkg/nvml/mock/gpus/a30.go`. The Hopper and Blackwell data-center GPUs are taken to share the A100 topology (7
compute slices over 8 memory slices), and the RTX PRO 6000 the A30's (4 over 4, GUIDE "Supported GPUs": at most 4
instances); both are inferred, not documented.

Product labels: the NVML device name with its spaces written as `-` (k8s-device-plugin `internal/lm/resource.go`
`sanitise`), e.g. `NVIDIA-A100-SXM4-40GB`, `NVIDIA-H100-80GB-HBM3`; under the single MIG strategy followed by
`-MIG-<profile>`. `model_of_product` reads the GPU token (A100, H100, ...) and, where one GPU comes in several sizes,
the memory or form token (40GB, 80GB, NVL, ...); that reading is inferred from the naming scheme, and a name it
cannot place is left unplaced.

Pinned interpretations (mlgate reference ml-domain.md, section 1): a 4g and a 3g instance share a GPU on drivers
R510 and later (GUIDE, concepts: "prior to NVIDIA driver release R510, the combination of a (4 memory, 4 compute)
and a (4 memory, 3 compute) profile was not supported"); only Ampere GPUs ran older drivers, so
`PRE_R510_MODELS` keeps the old rule for them on request. At most one media-extension instance (`+me`, `+me.all`)
per GPU; `1g.10gb` means different profiles on different models, so validity is always per model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MAX_MEDIA_PER_GPU = 1
MEDIA_ATTRIBUTES = frozenset({"me", "me.all"})  # go-nvlib AttributeMediaExtensions, AttributeMediaExtensionsAll
# "<c>c." compute-instance prefix, "<g>g.<gb>gb", then "+attr" or "-attr" (go-nvlib MigProfileInfo.String)
PROFILE_NAME = re.compile(r"^((?:\d+c\.)?(\d+)g\.(\d+)gb)(?:([+-])([a-z][a-z.]*))?$")
PROFILE_STEM = re.compile(r"^(?:\d+c\.)?\d+g\.\d+gb")
# Before R510 a 4g and a 3g instance could not share a GPU (GUIDE, concepts, "Partitioning"). Hopper needs R525
# and Blackwell R570 or later, so only Ampere fleets can still run such a driver.
DriverBefore = Literal["R510"]
EXCLUSIVE_BEFORE_R510 = frozenset({4, 3})
PRE_R510_MODELS = frozenset({"a30-24gb", "a100-40gb", "a100-80gb"})


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
        """Whether the instance holds media engines: `+me` or `+me.all` (`-me` is the profile without them)."""
        found = PROFILE_NAME.match(self.name)
        return bool(found and found[4] == "+" and found[5] in MEDIA_ATTRIBUTES)


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
_Q1G = Shape(1, 1, (0, 1, 2, 3))
_Q2G = Shape(2, 2, (0, 2))
_Q4G = Shape(4, 4, (0,))


def _model(key: str, title: str, ids: tuple[int, ...], slices: tuple[int, int],
           rows: list[tuple[str, Shape, int]]) -> GpuModel:
    profiles = {name: Profile(name, shape, most) for name, shape, most in rows}
    return GpuModel(key, title, ids, slices[0], slices[1], profiles)


def _seven(key: str, title: str, ids: tuple[int, ...], gb: tuple[int, int, int, int, int, int],
           also: Sequence[tuple[str, Shape, int]] = ()) -> GpuModel:
    """A 7-slice model; `gb` = the memory figures in the names of 1g (and 1g+me), wide 1g, 2g, 3g, 4g and 7g."""
    one, wide, two, three, four, seven = gb
    rows = [
        (f"1g.{one}gb", _1G, 7),
        (f"1g.{one}gb+me", _1G, 1),
        (f"1g.{wide}gb", _1G_WIDE, 4),
        (f"2g.{two}gb", _2G, 3),
        (f"3g.{three}gb", _3G, 2),
        (f"4g.{four}gb", _4G, 1),
        (f"7g.{seven}gb", _7G, 1),
        *also,
    ]
    return _model(key, title, ids, (7, 8), rows)


ModelKey = Literal[
    "a30-24gb", "a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl-94gb", "h100-96gb",
    "gh200-144gb", "h200-141gb", "b200-180gb", "gb200", "b300", "gb300", "rtx-pro-6000",
]

_ALL = (
    # GUIDE A30 table (1g.6gb+me from R470, 2g.12gb+me from R525); DEFAULT all-balanced filter 0x20B7
    _model("a30-24gb", "A30-24GB", (0x20B7,), (4, 4), [
        ("1g.6gb", _Q1G, 4), ("1g.6gb+me", _Q1G, 1), ("2g.12gb", _Q2G, 2),
        ("2g.12gb+me", _Q2G, 1), ("4g.24gb", _Q4G, 1),
    ]),
    # GUIDE A100 table (A100-SXM4-40GB); DEFAULT all-1g.10gb filter for the 40GB ids
    _seven("a100-40gb", "A100/A800-40GB", (0x20B0, 0x20B1, 0x20F1, 0x20F6), (5, 10, 10, 20, 20, 40)),
    # GUIDE A100 table, note "For A100-SXM4-80GB ... 1g.10gb, 1g.10gb+me, 1g.20gb, ..."; DEFAULT 80GB filter
    _seven("a100-80gb", "A100/A800-80GB", (0x20B2, 0x20B5, 0x20F3, 0x20F5), (10, 20, 20, 40, 40, 80)),
    # BUILDER "H100-80GB"; DEFAULT all-1g.10gb / all-balanced filter for H100-80GB, H800-80GB
    _seven("h100-80gb", "H100/H800-80GB", (0x2330, 0x2331, 0x2322, 0x2324), (10, 20, 20, 40, 40, 80)),
    # BUILDER "H100-94GB"; DEFAULT all-balanced filter "H100 NVL, H800 NVL"
    _seven("h100-nvl-94gb", "H100/H800 NVL 94GB", (0x2321, 0x233A), (12, 24, 24, 47, 47, 94)),
    # BUILDER "H100-96GB"; DEFAULT all-balanced filter "H100-96GB, PG506-96GB, GH200, H20"; PCIIDS 2342
    # "GH200 120GB / 480GB"
    _seven("h100-96gb", "H100-96GB/GH200 96GB", (0x2342, 0x233D, 0x20B6, 0x2329), (12, 24, 24, 48, 48, 96)),
    # OPERATOR v24.9.0 ("GH200 NVL2 144GB HBM3e"); DEFAULT all-balanced filter 0x2348
    _seven("gh200-144gb", "GH200 144G HBM3e", (0x2348,), (18, 36, 36, 72, 72, 144)),
    # BUILDER "H200-141GB"; OPERATOR v24.6.0; DEFAULT all-balanced filter "H200 141GB, H200 NVL"
    _seven("h200-141gb", "H200-141GB/H200 NVL", (0x2335, 0x233B), (18, 35, 35, 71, 71, 141)),
    # BUILDER "B200-180GB"; OPERATOR v25.3.0 (HGX B200); DEFAULT all-balanced filter 0x2901
    _seven("b200-180gb", "B200-180GB", (0x2901,), (23, 45, 45, 90, 90, 180)),
    # DEFAULT "GB200 HGX" configs and all-balanced filter 0x2941. OPERATOR v25.3.0 and DEFAULT's all-1g.24gb.me,
    # all-3g.95gb, all-4g.95gb, all-7g.189gb name the same instances after a little more memory: a profile's
    # name carries the memory the driver reports (go-nvlib getMigMemorySizeGB), which moves between drivers,
    # so a GB200 node shows one set or the other and both are accepted.
    _seven("gb200", "GB200", (0x2941,), (23, 47, 47, 93, 93, 186), also=[
        ("1g.24gb", _1G, 7), ("1g.24gb+me", _1G, 1), ("3g.95gb", _3G, 2), ("4g.95gb", _4G, 1),
        ("7g.189gb", _7G, 1),
    ]),
    # OPERATOR v25.10.0 (HGX B300, with 1g.34gb+me); DEFAULT all-1g.34gb.me and all-balanced filter 0x3182
    _seven("b300", "B300", (0x3182,), (34, 67, 67, 135, 135, 269)),
    # OPERATOR v25.10.0 (GB300 NVL72, with 1g.35gb+me); DEFAULT all-1g.35gb.me, all-1g.35gb and all-balanced
    # filter 0x31C2
    _seven("gb300", "GB300", (0x31C2,), (35, 70, 70, 139, 139, 278)),
    # BUILDER "RTX-PRO-6000" (after GUIDE); DEFAULT "RTX PRO 6000 Blackwell" configs and all-balanced filter
    # 0x2BB5 (PCIIDS "RTX PRO 6000 Blackwell Server Edition"). `+gfx` adds graphics, `+me.all` takes every media
    # engine, `-me` has none (go-nvlib AttributeGraphics, AttributeMediaExtensionsAll, NegAttributes).
    _model("rtx-pro-6000", "RTX PRO 6000 Blackwell", (0x2BB5,), (4, 4), [
        ("1g.24gb", _Q1G, 4), ("1g.24gb+me", _Q1G, 1), ("1g.24gb+gfx", _Q1G, 4), ("1g.24gb+me.all", _Q1G, 1),
        ("1g.24gb-me", _Q1G, 4), ("2g.48gb", _Q2G, 2), ("2g.48gb+gfx", _Q2G, 2), ("2g.48gb+me.all", _Q2G, 1),
        ("2g.48gb-me", _Q2G, 2), ("4g.96gb", _Q4G, 1), ("4g.96gb+gfx", _Q4G, 1),
    ]),
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
    # PCIIDS 2342 "GH200 120GB / 480GB": the 96GB-HBM3 GH200 names itself after the superchip's memory
    ("H100", "96GB"): "h100-96gb", ("GH200", "96GB"): "h100-96gb", ("GH200", "480GB"): "h100-96gb",
    ("GH200", "120GB"): "h100-96gb",
    ("GH200", "144G"): "gh200-144gb", ("GH200", "144GB"): "gh200-144gb",
    ("H200", None): "h200-141gb",
    ("B200", None): "b200-180gb",
    ("GB200", None): "gb200",
    ("B300", None): "b300",
    ("GB300", None): "gb300",
}
_GPU_TOKENS = frozenset(gpu for gpu, _ in _PRODUCT_TOKENS)
# Whole product labels where tokens would not tell one GPU from another (RTX 6000 Ada has no MIG); only the
# edition whose profile table is known (PCIIDS 2bb5)
_PRODUCT_NAMES: Mapping[str, str] = {"NVIDIA-RTX-PRO-6000-BLACKWELL-SERVER-EDITION": "rtx-pro-6000"}


def model_of_product(product: str) -> GpuModel | None:
    """The model a product label names (`NVIDIA-H100-80GB-HBM3` -> H100-80GB), or None where the name does not say."""
    named = _PRODUCT_NAMES.get(product.upper())
    if named is not None:
        return MODELS[named]
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
    """Mixed-strategy resource of a profile: every `+` is written as `.` (k8s-device-plugin `internal/rm/rm.go`,
    `strings.ReplaceAll("mig-"+p.String(), "+", ".")`), so `1g.24gb+me.all` -> `nvidia.com/mig-1g.24gb.me.all`;
    `-me` stays as it is."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def profile_of_resource(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`, `...-1g.24gb.me.all` -> `1g.24gb+me.all`; None for anything that
    is not a MIG resource. A name holds one `+` at most, right after `gb`, so only that `.` goes back."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource[len(MIG_RESOURCE_PREFIX):]
    stem = PROFILE_STEM.match(profile)
    if stem and profile[stem.end():].startswith("."):
        return f"{stem[0]}+{profile[stem.end() + 1:]}"
    return profile


def profile_of_label(text: str) -> str:
    """The profile a GPU feature discovery label value names: its sanitiser drops `+` (k8s-device-plugin
    `internal/lm/resource.go`), so `1g.24gbme.all` is `1g.24gb+me.all`; `-me` is kept as it is."""
    stem = PROFILE_STEM.match(text)
    if stem and text[stem.end():][:1].isalpha():
        return f"{stem[0]}+{text[stem.end():]}"
    return text


def models_with(profile: str, keys: Sequence[str] | None = None) -> list[GpuModel]:
    """The models (among `keys`, default all) that offer `profile`."""
    chosen = [MODELS[k] for k in keys] if keys is not None else list(MODELS.values())
    return [m for m in chosen if profile in m.profiles]
