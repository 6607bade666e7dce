"""Storage drivers as data (storage_drivers.yaml): what each one shares, per volumeMode, and where a claim's
driver comes from.

A claim's driver is found as the API server and the volume controllers record it (ml-domain reference §5):
the claim's `pv.kubernetes.io/migrated-to` and `volume.kubernetes.io/storage-provisioner` annotations
(`volume.beta.kubernetes.io/storage-provisioner` on older clusters), then the PersistentVolume the claim names
in `spec.volumeName` (its `spec.csi.driver`, or its in-tree source), then the claim's StorageClass. In-tree
names become the CSI drivers they migrate to (kubernetes/csi-translation-lib).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from mlgate.model.facts import ClusterFacts

Sharing = Literal["rwx", "rwo", "conditional", "none"]
TABLE = Path(__file__).with_name("storage_drivers.yaml")
PROVISIONER_ANNOTATIONS = ("pv.kubernetes.io/migrated-to", "volume.kubernetes.io/storage-provisioner",
                           "volume.beta.kubernetes.io/storage-provisioner")


@dataclass(frozen=True)
class Driver:
    driver: str
    filesystem: Sharing
    block: Sharing
    posix: bool = True
    condition: str = ""
    source: str = ""

    def sharing(self, volume_mode: str) -> Sharing:
        return self.block if volume_mode == "Block" else self.filesystem


@dataclass(frozen=True)
class DriverTable:
    drivers: tuple[Driver, ...]
    in_tree: Mapping[str, str]  # in-tree provisioner -> CSI driver
    pv_sources: Mapping[str, str]  # a PersistentVolume's in-tree source field -> driver

    def find(self, name: str | None, extra_rwx: Sequence[str] = ()) -> Driver | None:
        """The row of a driver or provisioner name; `<prefix>.<driver>` (Rook) matches `<driver>`. A driver the
        policy lists in `extra_rwx` shares file systems across nodes."""
        if not name:
            return None
        name = self.in_tree.get(name, name)
        if _matches(name, extra_rwx):
            return Driver(name, "rwx", "rwx", source="the policy's extraRwxProvisioners")
        return next((d for d in self.drivers if _matches(name, (d.driver,))), None)


def _matches(name: str, drivers: Sequence[str]) -> bool:
    return any(name == d or name.endswith("." + d) for d in drivers)


def load_table(path: Path = TABLE) -> DriverTable:
    """The shipped table; a broken one is a bug of the package, so it raises."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    drivers = tuple(Driver(**row) for row in data["drivers"])
    return DriverTable(drivers, dict(data["in-tree"]), dict(data["pv-sources"]))


DRIVERS = load_table()


@dataclass(frozen=True)
class ClaimStorage:
    """What the facts say about one claim: its access modes, volume mode and driver, and where the driver
    name came from."""

    modes: tuple[str, ...]
    volume_mode: str
    driver: str | None
    found_in: str  # "claim annotation", "PersistentVolume <name>", "StorageClass <name>" or ""


def claim_storage(pvc: Mapping[str, Any], facts: ClusterFacts) -> ClaimStorage:
    spec = _dict(pvc.get("spec"))
    status = _dict(pvc.get("status"))
    bound = status.get("phase") == "Bound" and isinstance(status.get("accessModes"), list)
    # once bound, the volume's own modes (status) are what the claim has
    modes = tuple(str(m) for m in (status["accessModes"] if bound else _list(spec.get("accessModes"))))
    volume_mode = str(spec.get("volumeMode") or "Filesystem")
    driver, found_in = _driver(pvc, spec, facts)
    return ClaimStorage(modes, volume_mode, driver, found_in)


def _driver(pvc: Mapping[str, Any], spec: Mapping[str, Any], facts: ClusterFacts) -> tuple[str | None, str]:
    annotations = _dict(_dict(pvc.get("metadata")).get("annotations"))
    for key in PROVISIONER_ANNOTATIONS:
        if annotations.get(key):
            return str(annotations[key]), f"annotation {key}"
    volume_name = spec.get("volumeName")
    if isinstance(volume_name, str) and volume_name:
        pv = facts.persistent_volume(volume_name)
        if pv is not None:
            return _pv_driver(_dict(pv.get("spec"))), f"PersistentVolume {volume_name}"
    class_name = spec.get("storageClassName")
    if class_name == "":  # explicitly no class: a pre-provisioned volume, and none named
        return None, ""
    storage_class = facts.storage_class(str(class_name) if class_name else None)
    if storage_class is None:
        return None, ""
    name = _dict(storage_class.get("metadata")).get("name") or class_name or "default"
    value = storage_class.get("provisioner")
    return (str(value) if value else None), f"StorageClass {name}"


def _pv_driver(spec: Mapping[str, Any]) -> str | None:
    csi = _dict(spec.get("csi"))
    if csi.get("driver"):
        return str(csi["driver"])
    return next((driver for field, driver in DRIVERS.pv_sources.items() if field in spec), None)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
