"""`mlgate cel` lists what expressions may use, from the tables the CEL environment is built from."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.rules.cel import env, library
from mlgate.rules.cel.env import CompileError


def listed() -> dict[str, object]:
    result = CliRunner().invoke(cli, ["cel", "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_every_function_the_library_declares_is_listed_with_a_signature():
    methods = {name for table in (library.QUANTITY_METHODS, library.URL_METHODS, library.IP_METHODS,
                                  library.CIDR_METHODS) for name in table}
    names = {f["name"]: f["signatures"] for f in listed()["functions"]}  # type: ignore[attr-defined]
    assert methods | {"sum", "min", "max", "isSorted", "find", "findAll", "quantity", "isQuantity", "url", "isURL",
                      "ip", "isIP", "cidr", "isCIDR"} <= set(names)
    assert all(names.values())


LITERALS = {"string": "'a'", "int": "1", "map<string, string>": "{'a': 'b'}", "list<dyn>": "[1]",
            "list<string>": "['a']", "dyn": "1"}
SIGNATURE = re.compile(r"^(?:(?P<receiver>[^.(]+)\.)?(?P<name>\w+)\((?P<args>[^)]*)\) -> ")


def test_every_listed_signature_compiles_in_the_environment():
    refused = []
    for function in listed()["functions"]:  # type: ignore[attr-defined]
        for signature in function["signatures"]:
            parts = SIGNATURE.match(signature)
            assert parts is not None, signature
            args = ", ".join(LITERALS[a] for a in re.findall(r"\w+<[^>]*>|\w+", parts["args"]))
            receiver = f"{LITERALS[parts['receiver']]}." if parts["receiver"] else ""
            try:
                env.compile_expression(f"{receiver}{parts['name']}({args})")
            except CompileError as exc:
                refused.append(f"{signature}: {exc}")
    assert refused == []


def test_every_variable_is_listed_once_in_the_environments_order():
    assert [v["name"] for v in listed()["variables"]] == list(env.ROOTS)  # type: ignore[attr-defined]


def test_the_text_listing_names_the_mutation_syntax_and_what_is_refused():
    result = CliRunner().invoke(cli, ["cel"])
    assert "JSONPatch{...}" in result.output and "Object{...}" in result.output
    assert "semver" in result.output
