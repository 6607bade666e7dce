"""Linter for NVIDIA mig-parted configuration files.

Format (NVIDIA/mig-parted `api/spec/v1/spec.go`): `version: v1` and `mig-configs: {<name>: [entry, ...]}`, each
entry `{devices: all | [indices], mig-enabled: bool, mig-devices: {<profile>: <count>}, device-filter: <id> | [ids]}`
with ids written as `0x<device><vendor>` (e.g. `0x20B010DE`). `devices` and `mig-enabled` are required;
`mig-devices` is required when MIG is enabled and must be empty when it is not.

Each entry's `mig-devices` must fit on ONE GPU of every model its `device-filter` selects (without a filter: of
every model that offers all the named profiles), by the tables and placement model in `mig_tables`: known
profile, count within the model's maximum, at most one media-extension instance (`+me`, `+me.all`), and an NVML
placement for every instance (non-overlapping memory slices, compute slices within the GPU's budget). A 4g next to
a 3g is valid (NVIDIA MIG User Guide: refused only by drivers before R510); `driver_before="R510"` refuses it
again on the GPUs that ran such drivers (A100, A30), for fleets that still do.

Only entries that enable MIG are held against the tables. An entry with `mig-enabled: false` names GPUs that stay
whole, often ones without MIG at all (mig-parted's `examples/dgx-station-80gb-config.yaml` filters the DGX
Station's display GPU, 0x1FB010DE, that way), so its device ids are not looked up. A MIG-enabled entry whose
filter names a GPU the tables lack is a warning, not an error: the GPU may be newer than the tables (or an RTX
PRO 6000 edition other than the Server Edition), and only its layout goes unchecked.

`lint_mig_config` returns problems with JSON pointers into the file and a severity; a caller that parsed the YAML
with line marks fills in `line` (see `with_lines`) and prints them with `render`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from mlgate.model import pointer
from mlgate.rules.mig_tables import (
    BY_DEVICE_ID,
    EXCLUSIVE_BEFORE_R510,
    MAX_MEDIA_PER_GPU,
    MODELS,
    PRE_R510_MODELS,
    PROFILE_NAME,
    DriverBefore,
    GpuModel,
    Profile,
    Shape,
)

VERSION = "v1"
ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_DEVICE_ID = re.compile(r"^0x([0-9A-Fa-f]{4})([0-9A-Fa-f]{4})(:0x[0-9A-Fa-f]{8})?$")
NVIDIA_VENDOR = 0x10DE

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class LayoutProblem:
    path: str  # JSON pointer into the file
    message: str
    line: int | None = None
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def render(self, filename: str) -> str:
        where = filename if self.line is None else f"{filename}:{self.line}"
        label = "" if self.is_error else f"{self.severity}: "
        return f"{where}: {self.path or '/'}: {label}{self.message}"


@dataclass(frozen=True)
class _DeviceId:
    """One well-formed `device-filter` id: where it is written, as written, and its device and vendor halves."""

    path: str
    text: str
    device: int
    vendor: int


def with_lines(problems: Iterable[LayoutProblem], line_of: Callable[[str], int | None]) -> list[LayoutProblem]:
    """The problems with `line` filled in by the caller's pointer -> line lookup."""
    return [replace(p, line=line_of(p.path)) for p in problems]


def lint_mig_config(data: Any, driver_before: DriverBefore | None = None) -> list[LayoutProblem]:
    """The problems of one parsed mig-parted config; `driver_before="R510"` for GPUs on drivers older than R510."""
    if not isinstance(data, dict):
        return [LayoutProblem("", "a mig-parted config is a mapping with `version` and `mig-configs`")]
    problems: list[LayoutProblem] = []
    if data.get("version") != VERSION:
        problems.append(LayoutProblem("/version", f"version must be {VERSION!r}, got {data.get('version')!r}"))
    for key in data:
        if key not in ("version", "mig-configs"):
            problems.append(LayoutProblem(pointer.join("", str(key)), f"unexpected field {key!r}"))
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        problems.append(LayoutProblem("/mig-configs", "mig-configs must map config names to lists of entries"))
        return problems
    for name, entries in configs.items():
        base = pointer.join("/mig-configs", str(name))
        if not isinstance(entries, list) or not entries:
            problems.append(LayoutProblem(base, f"config {name!r} needs a list of at least one entry"))
            continue
        for index, entry in enumerate(entries):
            problems.extend(_entry(entry, pointer.join(base, index), driver_before))
    return problems


def _entry(entry: Any, base: str, driver_before: DriverBefore | None) -> list[LayoutProblem]:
    if not isinstance(entry, dict):
        return [LayoutProblem(base, "an entry is a mapping with devices, mig-enabled and mig-devices")]
    problems = [LayoutProblem(pointer.join(base, str(k)), f"unexpected field {k!r}")
                for k in entry if k not in ENTRY_FIELDS]
    problems += [LayoutProblem(base, f"missing required field {k!r}")
                 for k in ("devices", "mig-enabled") if k not in entry]
    problems += _devices(entry.get("devices", "all"), pointer.join(base, "devices"))
    enabled = entry.get("mig-enabled", False)
    if not isinstance(enabled, bool):
        problems.append(LayoutProblem(pointer.join(base, "mig-enabled"), f"must be true or false, got {enabled!r}"))
    devices_ptr = pointer.join(base, "mig-devices")
    mig_devices = entry.get("mig-devices")
    if enabled is True and "mig-devices" not in entry:
        problems.append(LayoutProblem(base, "mig-devices is required when mig-enabled is true (use {} for none)"))
    if mig_devices is not None and not isinstance(mig_devices, dict):
        return [*problems, LayoutProblem(devices_ptr, "must map profile names to counts")]
    counts, count_problems = _counts(mig_devices or {}, devices_ptr)
    problems += count_problems
    if enabled is False and counts:
        problems.append(LayoutProblem(devices_ptr, "MIG devices are listed but mig-enabled is false"))
    ids, filter_problems = _filter_ids(entry.get("device-filter"), pointer.join(base, "device-filter"))
    problems += filter_problems
    if enabled is False:
        return problems  # GPUs kept whole need no MIG model, and many have none (display GPUs)
    models, unknown = _models(ids)
    problems += unknown
    wanted = {p: n for p, n in counts.items() if n > 0}
    if wanted and models != []:  # [] = a filter that selects no GPU mlgate knows
        problems += _layout(wanted, models, devices_ptr, driver_before)
    return problems


def _devices(value: Any, ptr: str) -> list[LayoutProblem]:
    if value == "all":
        return []
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        return []
    return [LayoutProblem(ptr, f"devices must be 'all' or a list of GPU indices, got {value!r}")]


def _counts(mig_devices: dict[Any, Any], base: str) -> tuple[dict[str, int], list[LayoutProblem]]:
    counts: dict[str, int] = {}
    problems: list[LayoutProblem] = []
    for profile, count in mig_devices.items():
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            counts[str(profile)] = count
        else:
            problems.append(LayoutProblem(pointer.join(base, str(profile)),
                                          f"count must be a whole number >= 0, got {count!r}"))
    return counts, problems


def _filter_ids(value: Any, ptr: str) -> tuple[list[_DeviceId] | None, list[LayoutProblem]]:
    """The well-formed ids of a device-filter (None = no filter: every GPU), and problems with their form."""
    if value is None or value == "":
        return None, []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        return [], [LayoutProblem(ptr, f"device-filter must be an id or a list of ids, got {value!r}")]
    ids: list[_DeviceId] = []
    problems: list[LayoutProblem] = []
    for index, text in enumerate(items):
        item_ptr = ptr if isinstance(value, str) else pointer.join(ptr, index)
        match = _DEVICE_ID.match(text.strip())
        if match:
            ids.append(_DeviceId(item_ptr, text, int(match.group(1), 16), int(match.group(2), 16)))
        else:
            problems.append(LayoutProblem(item_ptr, f"device id {text!r} is not of the form 0x20B010DE"))
    return ids, problems


def _models(ids: list[_DeviceId] | None) -> tuple[list[GpuModel] | None, list[LayoutProblem]]:
    """The models the ids select (None = no filter), and a warning per id the tables lack."""
    if ids is None:
        return None, []
    models: list[GpuModel] = []
    warnings: list[LayoutProblem] = []
    for device_id in ids:
        model = BY_DEVICE_ID.get(device_id.device) if device_id.vendor == NVIDIA_VENDOR else None
        if model is None:
            # newer than the tables, or without MIG: only mig-parted on the node can tell
            warnings.append(LayoutProblem(device_id.path, f"device id {device_id.text} is not in mlgate's MIG tables; "
                                                          "whether it takes this layout is not checked",
                                          severity="warning"))
        elif model not in models:
            models.append(model)
    return models, warnings


def _layout(wanted: dict[str, int], models: list[GpuModel] | None, base: str,
            driver_before: DriverBefore | None = None) -> list[LayoutProblem]:
    if models is None:
        unknown = [p for p in wanted if not any(p in m.profiles for m in MODELS.values())]
        if unknown:
            return [LayoutProblem(pointer.join(base, p), f"unknown MIG profile {p!r}; closest: "
                                  f"{', '.join(closest(p, MODELS.values()))}") for p in unknown]
        models = [m for m in MODELS.values() if all(p in m.profiles for p in wanted)]
        if not models:
            return [LayoutProblem(base, f"no GPU model offers all of {', '.join(sorted(wanted))} "
                                        "(add a device-filter and split the entry per model)")]
    found: dict[tuple[str, str], list[str]] = {}
    for model in models:
        for ptr, message in _on_model(wanted, model, base, driver_before):
            found.setdefault((ptr, message), []).append(model.title)
    return [LayoutProblem(ptr, f"{message} (on {', '.join(titles)})") for (ptr, message), titles in found.items()]


def _on_model(wanted: dict[str, int], model: GpuModel, base: str,
              driver_before: DriverBefore | None = None) -> list[tuple[str, str]]:
    """(pointer, message) for what keeps `wanted` off one GPU of `model`."""
    missing = [p for p in wanted if p not in model.profiles]
    if missing:
        return [(pointer.join(base, p), f"{p} is not a profile of this GPU; closest: "
                                        f"{', '.join(closest(p, [model]))}") for p in missing]
    profiles = {model.profiles[p]: n for p, n in wanted.items()}
    problems = [(pointer.join(base, p.name), f"{n} x {p.name} is more than the {p.max_count} that fit on one GPU")
                for p, n in profiles.items() if n > p.max_count]
    media = sum(n for p, n in profiles.items() if p.media)
    if media > MAX_MEDIA_PER_GPU:
        problems.append((base, f"{media} +me instances asked for; a GPU has at most {MAX_MEDIA_PER_GPU}"))
    sizes = {p.shape.compute for p in profiles}
    if driver_before == "R510" and model.key in PRE_R510_MODELS and sizes >= EXCLUSIVE_BEFORE_R510:
        problems.append((base, "a 4g and a 3g instance cannot share one GPU on drivers before R510 "
                               "(NVIDIA MIG User Guide)"))
    if not problems and not placeable(profiles, model):
        problems.append((base, f"{describe(wanted)} cannot be placed on one GPU: memory or compute slices run out"))
    return problems


def placeable(profiles: Mapping[Profile, int], model: GpuModel) -> bool:
    """Whether every instance gets an NVML placement on one GPU: disjoint memory slices, compute within budget."""
    if sum(p.shape.compute * n for p, n in profiles.items()) > model.compute_slices:
        return False
    instances = sorted((p.shape for p, n in profiles.items() for _ in range(n)), key=lambda s: -s.size)
    return _place(instances, 0)


def _place(shapes: list[Shape], taken: int) -> bool:
    if not shapes:
        return True
    shape, rest = shapes[0], shapes[1:]
    for start in shape.starts:
        mask = ((1 << shape.size) - 1) << start
        if not taken & mask and _place(rest, taken | mask):
            return True
    return False


def closest(profile: str, models: Iterable[GpuModel], n: int = 3) -> list[str]:
    """The `n` profile names of `models` nearest to `profile`: compute slices first, then memory."""
    names = sorted({name for m in models for name in m.profiles})
    wanted = PROFILE_NAME.match(profile)
    if not wanted:
        return difflib.get_close_matches(profile, names, n=n, cutoff=0.0)
    g, gb, suffix = int(wanted[2]), int(wanted[3]), profile[len(wanted[1]):]

    def distance(name: str) -> tuple[int, bool, int, str]:
        found = PROFILE_NAME.match(name)
        assert found is not None  # table names are well formed
        return abs(int(found[2]) - g), name[len(found[1]):] != suffix, abs(int(found[3]) - gb), name

    return sorted(names, key=distance)[:n]


def describe(wanted: Mapping[str, int]) -> str:
    return " + ".join(f"{n} x {p}" for p, n in sorted(wanted.items()))


def render(problems: Iterable[LayoutProblem], filename: str) -> list[str]:
    """`file:line: path: message` per problem (line left out where unknown)."""
    return [p.render(filename) for p in problems]
