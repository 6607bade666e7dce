"""What the built-in kinds' schema check costs `mlgate validate`, per object; prints figures, asserts nothing.

    .venv/bin/python bench/builtin_schema_bench.py [--rounds N]

- one-time: reading mlgate/loading/kube_openapi.json
- per object: the built-in objects of tests/fixtures/real (Pods, Jobs, Deployments, StatefulSets, DaemonSets...)
  with mlgate's own walker, and, for the choice between the two, with jsonschema (the `schema` extra) over the same
  schemas turned into JSON Schema with additionalProperties false, so that both look for the same things
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlgate.loading.builtin_schemas import BuiltinSchemas  # noqa: E402
from mlgate.loading.documents import read_documents  # noqa: E402


def timed(what: Callable[[], Any]) -> float:
    start = time.perf_counter()
    what()
    return time.perf_counter() - start


def as_json_schema(node: Any) -> Any:
    """A shipped OpenAPI node as JSON Schema: references under #/definitions, closed objects."""
    if isinstance(node, list):
        return [as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: (f"#/definitions/{v}" if k == "$ref" else
               {p: as_json_schema(c) for p, c in v.items()} if k == "properties" else as_json_schema(v))
           for k, v in node.items()}
    if node.get("properties") and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    load = timed(BuiltinSchemas.load)
    shipped = BuiltinSchemas.load()
    objects = [d.data for d in read_documents(sorted(str(p) for p in (ROOT / "tests/fixtures/real").glob("*.yaml")))
               if isinstance(d.data, dict) and shipped.served(str(d.data.get("apiVersion")), str(d.data.get("kind")))]
    print(f"one-time: reading kube_openapi.json {load * 1e3:.1f} ms ({len(shipped.schemas)} schemas)")
    walker = timed(lambda: [shipped.check(o) for _ in range(rounds) for o in objects]) / rounds / len(objects)
    print(f"walker: {walker * 1e6:.0f} µs per object ({len(objects)} real built-in objects x {rounds})")
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        print("jsonschema: not installed (the light install); the walker needs none")
        return
    definitions = {name: as_json_schema(s) for name, s in shipped.schemas.items()}
    validators = {key: jsonschema.Draft4Validator({"definitions": definitions, "$ref": f"#/definitions/{name}"})
                  for key, name in shipped.kinds.items()}

    def check(obj: dict[str, Any]) -> list[Any]:
        return list(validators[f"{obj['apiVersion']}/{obj['kind']}"].iter_errors(obj))

    other = timed(lambda: [check(o) for _ in range(rounds) for o in objects]) / rounds / len(objects)
    print(f"jsonschema {importlib.metadata.version('jsonschema')}: "
          f"{other * 1e6:.0f} µs per object, same objects")


if __name__ == "__main__":
    main()
