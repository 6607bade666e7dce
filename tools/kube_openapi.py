"""Regenerates mlgate/loading/kube_openapi.json: the OpenAPI v3 schemas of the built-in kinds `mlgate validate`
checks before any policy (mlgate/loading/builtin_schemas.py), taken from the pinned kube-apiserver itself.

It starts etcd and the kube-apiserver of tools/control-plane/VERSION with the e2e harness (tests/e2e), reads
`/openapi/v3/<group-version>` for every group-version in KINDS, and keeps the schemas the kinds reach, without
the words only people read (descriptions). Every process it starts is stopped by PID before it returns.

    .venv/bin/python tools/kube_openapi.py [--check]

`--check` compares instead of writing, and exits 1 when the shipped file differs (a new pinned version).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the harness is a test helper, not an installed package

from control_plane import ControlPlane, HarnessError, find_binaries, pinned_version  # noqa: E402

OUTPUT = REPO / "mlgate" / "loading" / "kube_openapi.json"
# apiVersion -> the kinds of it mlgate judges or reads: kinds.yaml's built-in workloads, and the objects its rules and
# facts take (namespaces, storage, quotas, nodes, DRA claims) or that sit beside workloads in the same manifests
KINDS = {
    "v1": ["Pod", "Service", "ConfigMap", "Secret", "Namespace", "ServiceAccount", "PersistentVolumeClaim",
           "PersistentVolume", "LimitRange", "ResourceQuota", "Node"],
    "apps/v1": ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"],
    "batch/v1": ["Job", "CronJob"],
    "storage.k8s.io/v1": ["StorageClass"],
    "resource.k8s.io/v1": ["ResourceClaim", "ResourceClaimTemplate", "DeviceClass"],
    "scheduling.k8s.io/v1": ["PriorityClass"],
}
REF_PREFIX = "#/components/schemas/"
# what the check reads; descriptions, examples and the rest only make the file larger
KEPT = ("type", "properties", "items", "additionalProperties", "required", "$ref", "allOf", "anyOf", "oneOf",
        "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-group-version-kind")


class ApiServerOnly(ControlPlane):
    """etcd and kube-apiserver: the built-in kinds' schemas need no CRD."""

    def install_crds(self) -> None:
        pass


def path_of(api_version: str) -> str:
    return f"/openapi/v3/{'api/v1' if api_version == 'v1' else 'apis/' + api_version}"


def trimmed(node: Any) -> Any:
    """A schema node with only the keywords the check reads; `$ref`s by name alone."""
    if isinstance(node, list):
        return [trimmed(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key in KEPT:
        if key not in node:
            continue
        value = node[key]
        if key == "$ref":
            out[key] = value.removeprefix(REF_PREFIX)
        elif key == "properties":
            out[key] = {name: trimmed(child) for name, child in value.items()}
        else:
            out[key] = trimmed(value)
    return out


def references(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*map(references, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
    return found.union(*(references(v) for k, v in node.items() if k != "$ref"))


def kind_names(schemas: dict[str, Any], api_version: str, kinds: list[str]) -> dict[str, str]:
    """`apiVersion/kind` -> the schema the API server names for it (x-kubernetes-group-version-kind)."""
    group, _, version = api_version.rpartition("/")
    found: dict[str, str] = {}
    for name, schema in schemas.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if gvk.get("group") == group and gvk.get("version") == version and gvk.get("kind") in kinds:
                found[f"{api_version}/{gvk['kind']}"] = name
    missing = [k for k in kinds if f"{api_version}/{k}" not in found]
    if missing:
        raise SystemExit(f"kube_openapi: {path_of(api_version)} has no schema for {', '.join(missing)}")
    return found


def generate(plane: ControlPlane) -> dict[str, Any]:
    everything: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for api_version, wanted in KINDS.items():
        status, body = plane.get(path_of(api_version))
        if status != 200:
            raise SystemExit(f"kube_openapi: GET {path_of(api_version)}: {status} {body[:200]!r}")
        schemas = json.loads(body)["components"]["schemas"]
        everything.update(schemas)
        kinds.update(kind_names(schemas, api_version, wanted))
    kept: dict[str, Any] = {}
    todo = list(kinds.values())
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = trimmed(everything[name])
        kept[name].pop("x-kubernetes-group-version-kind", None)
        todo += sorted(references(kept[name]) - kept.keys())
    return {
        "kubernetes": pinned_version(),
        "source": f"kube-apiserver v{pinned_version()} {', '.join(map(path_of, KINDS))}, without descriptions; "
                  "written by tools/kube_openapi.py",
        "kinds": dict(sorted(kinds.items())),
        "schemas": dict(sorted(kept.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    args = parser.parse_args()
    try:
        binaries = find_binaries()
    except HarnessError as exc:
        raise SystemExit(f"kube_openapi: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="mlgate-openapi-") as directory:
        plane = ApiServerOnly(binaries, Path(directory))
        try:
            plane.start()
            data = generate(plane)
        except (HarnessError, AssertionError, OSError) as exc:
            raise SystemExit(f"kube_openapi: the control plane did not start: {exc}") from exc
        finally:
            plane.stop()
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"kube_openapi: {OUTPUT.relative_to(REPO)} {'matches' if same else 'differs from'} "
              f"kube-apiserver v{pinned_version()}")
        sys.exit(0 if same else 1)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"kube_openapi: wrote {OUTPUT.relative_to(REPO)}: {len(data['kinds'])} kinds, "
          f"{len(data['schemas'])} schemas, {len(text) // 1024} KiB")


if __name__ == "__main__":
    main()
