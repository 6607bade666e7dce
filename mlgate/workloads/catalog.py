"""The kinds the engine knows: the shipped table (`kinds.yaml`) plus the policy set's own `WorkloadKind`s.

A kind is looked up by API group, kind and version. A description from the policy set replaces a shipped one
for the same group and kind, so a platform team can correct or narrow what ships.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from mlgate.model.kinds import KindSpec

SHIPPED_TABLE = Path(__file__).with_name("kinds.yaml")


@dataclass(frozen=True)
class KindCatalog:
    kinds: tuple[KindSpec, ...] = ()
    _index: dict[tuple[str, str], tuple[KindSpec, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for spec in self.kinds:
            key = (spec.group, spec.kind)
            self._index[key] = (*self._index.get(key, ()), spec)

    @cached_property
    def cluster_scoped(self) -> frozenset[str]:
        """The names of the kinds described as cluster-scoped."""
        return frozenset(s.kind for s in self.kinds if s.scope == "Cluster")

    def find(self, api_version: str, kind: str) -> KindSpec | None:
        group, _, version = api_version.rpartition("/")
        for spec in self._index.get((group, kind), ()):
            if not spec.versions or version in spec.versions:
                return spec
        return None

    def with_kinds(self, extra: Iterable[KindSpec]) -> KindCatalog:
        """This catalog with `extra` added; an extra kind replaces every shipped one of its group and kind."""
        extra = tuple(extra)
        if not extra:
            return self
        replaced = {(s.group, s.kind) for s in extra}
        return KindCatalog((*extra, *(s for s in self.kinds if (s.group, s.kind) not in replaced)))


def load_table(path: Path = SHIPPED_TABLE) -> KindCatalog:
    """The table in `path`; a broken table is a bug of the package, so it raises."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return KindCatalog(tuple(KindSpec.model_validate(entry) for entry in data["kinds"]))


SHIPPED = load_table()
