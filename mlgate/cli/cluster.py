"""`mlgate validate --cluster` and `mlgate facts dump`: the local policies against what a cluster stores.

"Would my new policy break running jobs?" is answered before the policy is applied: the stored objects of every
kind the engine knows (mlgate/kube/stored.py) are judged as file manifests are, with the cluster's facts
(mlgate/kube/facts.py), and reported in the same formats with the same exit codes. Only GET requests: nothing in
the cluster changes. A record's source is the object's API path (`/apis/batch/v1/namespaces/team-a/jobs/train`),
so reports name what `kubectl get --raw` would show; stored objects have no lines.

The Kubernetes client comes with mlgate[cluster]; without it both commands say so and exit 2.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, TypeVar

from mlgate.cli.review import Record, Render, Settings, review_document
from mlgate.engine import PolicySet
from mlgate.kube.facts import read_facts
from mlgate.kube.listing import Served, served
from mlgate.kube.reach import describe, unreachable
from mlgate.kube.stored import (
    OPT_OUT,
    KindFilterError,
    cluster_workload_kinds,
    opted_out,
    stored_objects,
    wanted_kinds,
    with_cluster_kinds,
)
from mlgate.kube.watch import ApiError, Get, api_client, api_get
from mlgate.loading.documents import Document, dump_yaml
from mlgate.model.facts import LOOKUP_KINDS, StaticFacts
from mlgate.model.kinds import KindSpec

EXTRA = "cluster"
T = TypeVar("T")
DUMP_HEADER = """\
# Cluster facts for `mlgate validate --facts`, written by `mlgate facts dump` from {server}.
# Kept: Namespaces (labels), PersistentVolumeClaims (spec, status), PersistentVolumes (access and volume modes,
# CSI driver name), StorageClasses (provisioner, parameters, binding mode), Nodes (labels, spec, capacity,
# allocatable), ResourceQuotas, LimitRanges, PriorityClasses, Trainer runtimes (spec); of annotations only a
# claim's provisioner and the default-class marker. No Secrets, ConfigMaps, managedFields, last-applied
# configuration, node images or conditions.
"""


class ClusterError(Exception):
    """The cluster could not be read: no kubeconfig, unreachable, forbidden. The message says which."""


@dataclass
class Connection:
    get: Get
    server: str
    namespace: str  # the context's namespace, as kubectl would use it
    notes: list[str] = field(default_factory=list)  # said on stderr: kinds not served, broken descriptions


def missing_client() -> str | None:
    """The module name of the Kubernetes client when it is not installed."""
    return None if importlib.util.find_spec("kubernetes") is not None else "kubernetes"


def connect(kubeconfig: str | None, context: str | None) -> Connection:
    from kubernetes.config import ConfigException, list_kube_config_contexts
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

    for path in (kubeconfig or os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)).split(os.pathsep):
        _check_kubeconfig(path)
    try:
        api = api_client(kubeconfig, False, context)
        contexts, active = list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as exc:
        raise ClusterError(f"kubeconfig: {exc}") from exc
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    return Connection(api_get(None, False, api=api), str(api.configuration.host), namespace)


def _check_kubeconfig(path: str) -> None:
    """A kubeconfig the client would crash on (bad YAML, not a mapping) is refused here, with its line: the
    client lets PyYAML's errors and TypeErrors through. A missing file is left to the client's own message."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterError(f"kubeconfig {path}: cannot read: {exc}") from exc
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise ClusterError(f"kubeconfig {where}: invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    if value is not None and not isinstance(value, dict):
        raise ClusterError(f"kubeconfig {path}: must be a mapping (apiVersion, clusters, contexts, users), "
                           f"not a {type(value).__name__}")


def cluster_policies(connection: Connection, policies: PolicySet, local: Sequence[KindSpec]) -> PolicySet:
    """The local policy set, judging also the kinds the cluster's ClusterWorkloadKinds describe."""
    kinds = _read(connection, "ClusterWorkloadKinds", lambda: cluster_workload_kinds(connection.get, connection.notes))
    return replace(policies, kinds=with_cluster_kinds(policies.kinds, kinds, local))


def cluster_facts(connection: Connection) -> StaticFacts:
    unserved: set[str] = set()
    facts = StaticFacts.from_objects(_read(connection, "facts", lambda: list(read_facts(connection.get,
                                                                                          connection.notes, unserved))))
    facts.served_groups |= {group for kind, (_, group) in LOOKUP_KINDS.items() if kind not in unserved}
    return facts


def served_kinds(connection: Connection, policies: PolicySet, kinds: Sequence[str]) -> list[Served]:
    try:
        wanted = wanted_kinds(policies.kinds, kinds)
    except KindFilterError as exc:
        raise ClusterError(str(exc)) from exc
    found, missing = _read(connection, "discovery", lambda: served(connection.get, wanted))
    if missing:
        names = ", ".join(f"{w.kind} ({w.group or 'core'})" for w in missing)
        connection.notes.append(f"not served by the API server, skipped: {names}")
    return found


def review_cluster(connection: Connection, settings: Settings, kinds: Sequence[Served], namespace: str | None, *,
                   render: Render | None = None) -> Iterator[Record]:
    """A record per stored object, kind by kind, as the pages arrive."""
    owned, ignored = [0], 0
    objects = stored_objects(connection.get, kinds, namespace, settings.policies.kinds, owned)
    index = 0
    while True:
        obj = _read(connection, "stored objects", lambda: next(objects, None))
        if obj is None:
            break
        if opted_out(settings.facts.namespace_labels(str((obj.get("metadata") or {}).get("namespace") or ""))):
            ignored += 1
            continue
        for record in review_document(Document(api_path(obj, kinds), index, 0, data=obj), settings):
            yield render(record) if render is not None else record
        index += 1
    if ignored:
        connection.notes.append(f"{ignored} object(s) in namespaces labelled {'='.join(OPT_OUT)} not judged: "
                                "admission never sees them")
    if owned[0]:
        connection.notes.append(f"{owned[0]} object(s) controlled by a judged object (a Job's Pods, a CronJob's "
                                "Jobs) judged through their owner, not on their own")


def api_path(obj: dict[str, Any], kinds: Sequence[Served]) -> str:
    """The object's own API path, e.g. /apis/batch/v1/namespaces/team-a/jobs/train."""
    meta = obj.get("metadata") or {}
    kind = next((s for s in kinds if s.api_version == obj.get("apiVersion") and s.kind == obj.get("kind")), None)
    collection = kind.path(meta.get("namespace")) if kind else f"/{obj.get('apiVersion')}/{obj.get('kind')}"
    return f"{collection}/{meta.get('name')}"


def dump_facts(connection: Connection, out: IO[str]) -> int:
    """The cluster's facts as `--facts` reads them; the number of objects written."""
    objects = _read(connection, "facts", lambda: list(read_facts(connection.get, connection.notes)))
    objects.sort(key=lambda o: (o["kind"], o["metadata"].get("namespace") or "", o["metadata"].get("name") or ""))
    out.write(DUMP_HEADER.format(server=connection.server))
    dump_yaml(objects, out)
    return len(objects)


def _read(connection: Connection, what: str, call: Callable[[], T]) -> T:
    """`call()`, its API and network failures turned into one ClusterError that names the server and what was read."""
    try:
        result = call()
    except ApiError as exc:
        hint = " (the user lacks list on it)" if exc.status == 403 else ""
        raise ClusterError(f"{connection.server}: reading {what}: {exc.status}{hint}: {_first(exc.message)}") from exc
    except Exception as exc:
        if not unreachable(exc):
            raise
        raise ClusterError(f"{connection.server}: reading {what}: cannot reach the API server: {describe(exc)}") \
            from exc
    return result


def _first(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else "(no message)"
