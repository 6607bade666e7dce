"""`pip install mlgate` is the CLI alone: the engine and the CLI import only the core dependencies, and a
transport whose extra is missing says which extra to install instead of failing with a traceback."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from click.testing import CliRunner

from mlgate.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
# import name -> distribution, for the core dependencies
CORE_IMPORTS = {"click": "click", "jsonpatch": "jsonpatch", "orjson": "orjson", "pydantic": "pydantic",
                "yaml": "pyyaml"}


def module_level_imports(path: Path) -> set[str]:
    """Top-level names imported at module level (a function's own imports run only when it is called)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_engine_and_the_cli_import_only_the_core_dependencies():
    imported = set().union(*(module_level_imports(p) for p in (ROOT / "mlgate").rglob("*.py")))
    third_party = {n for n in imported if n not in sys.stdlib_module_names and n != "mlgate"}
    assert third_party <= set(CORE_IMPORTS), third_party - set(CORE_IMPORTS)


def test_the_core_dependencies_are_those_imports_in_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {d.split(">")[0].split("<")[0].split("=")[0] for d in project["dependencies"]}
    assert names == set(CORE_IMPORTS.values())
    assert all("==" not in d and "<" in d for d in project["dependencies"]), project["dependencies"]


def test_every_extra_the_cli_checks_for_is_declared():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert set(cli_main.EXTRAS) <= set(extras)


def test_a_transport_without_its_extra_says_which_extra_to_install(monkeypatch):
    # the missing module alone: under the light install fastapi is missing too, and would be named first
    monkeypatch.setitem(cli_main.EXTRAS, "server", ("no_such_module_for_mlgate",))
    result = CliRunner().invoke(cli_main.cli, ["serve", "--port", "0"])
    assert result.exit_code == 2
    assert "`mlgate serve` needs no_such_module_for_mlgate, which comes with mlgate[server]" in result.output
    listed = CliRunner().invoke(cli_main.cli, ["--help"])
    assert "serve             (needs mlgate[server])" in listed.output


def test_the_wheel_lists_every_package_of_the_checkout():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {v: k for k, v in config["package-dir"].items()}  # reconciler/ is mlgate_reconciler, ...
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if parts[0] in ("tests", "bench", "tools", "build") or parts[0].startswith("."):
            continue
        top = folders.get(parts[0], parts[0])
        found.add(".".join((top, *parts[1:])))
    assert found <= set(config["packages"]), found - set(config["packages"])
