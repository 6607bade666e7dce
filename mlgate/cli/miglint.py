"""`mlgate mig-lint`: mig-parted layout files checked before they reach a node.

A file is either a mig-parted config (`version`, `mig-configs`) or a ConfigMap holding one as a data value, as the
GPU Operator ships its default (`default-mig-parted-config`, key `config.yaml`; NVIDIA/gpu-operator
`assets/state-mig-manager/0400_configmap.yaml`). In a ConfigMap every data value that holds `mig-configs` is linted;
its problems point into it (`/data/config.yaml/mig-configs/...`), at the file's own lines when the value is a
literal block (`|`), whose lines are the file's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from mlgate.loading.documents import InputError, expand
from mlgate.loading.linemap import compose_with_lines, line_for, lines_of, load_with_node
from mlgate.model import pointer
from mlgate.rules.mig_layout import LayoutProblem, lint_mig_config, with_lines
from mlgate.rules.mig_tables import DriverBefore

LineOf = Callable[[str], int | None]
STDIN = "-"


@dataclass(frozen=True)
class FileProblem:
    """A layout problem in one file. Prints as its report line, `file:line: pointer: [warning: ]message`; only
    errors fail the command (exit 1), warnings are reported and pass."""

    filename: str
    problem: LayoutProblem

    @property
    def is_error(self) -> bool:
        return self.problem.is_error

    def __str__(self) -> str:
        return self.problem.render(self.filename)


def mig_files(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the files to lint: each file as given, each directory's YAML and JSON files walked in sorted order, `-` for
    stdin; a line for each path that does not exist or is a directory without one)."""
    files: list[str] = []
    errors: list[str] = []
    for path in paths:
        try:
            found = list(expand([path]))
        except InputError as exc:
            errors.append(f"{exc.path}: cannot read: {exc.problem}")
            continue
        if not found:
            errors.append(f"{path}: a directory without .yaml, .yml or .json files")
        files += found
    return files, errors


def summary(files: int, problems: Sequence[FileProblem]) -> str:
    """One line for stderr after the report: how many files were linted and what was found."""
    errors = sum(p.is_error for p in problems)
    warnings = len(problems) - errors
    counted = ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((errors, "error"), (warnings, "warning"))
                        if n) or "no problems"
    return f"mig-lint: {files} file{'' if files == 1 else 's'} checked: {counted}"


def lint_paths(paths: Sequence[str], driver_before: DriverBefore | None = None) -> tuple[list[FileProblem], list[str]]:
    """(the layout problems found, errors and warnings in file order; the files that could not be read or parsed):
    a report and its input errors, which the command keeps apart (stdout, exit 1 if any problem is an error;
    stderr and exit 2). `driver_before="R510"` restores the pre-R510 rule (no 4g beside a 3g) for A100 and A30."""
    problems: list[FileProblem] = []
    errors: list[str] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == STDIN else Path(path).read_text(encoding="utf-8")
            path = "<stdin>" if path == STDIN else path  # noqa: PLW2901 - the name the report lines carry
            data, node = load_with_node(text)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{path}: cannot read: {exc}")
            continue
        except yaml.YAMLError as exc:
            errors.append(_yaml_error(path, exc))
            continue
        lines = lines_of(node) if node is not None else {}
        for found in _lint_document(data, node, partial(line_for, lines), driver_before):
            problems.append(FileProblem(path, found))
    return problems, errors


def _lint_document(data: Any, node: yaml.Node | None, line_of: LineOf,
                   driver_before: DriverBefore | None) -> list[LayoutProblem]:
    if not _is_config_map(data):
        return with_lines(lint_mig_config(data, driver_before), line_of)
    found: list[LayoutProblem] = []
    linted = False
    for key, value, value_node in _data_values(data, node):
        base = pointer.join("/data", key)
        try:
            embedded, lines = compose_with_lines(value, first_line=_first_line(value_node) or 1)
        except yaml.YAMLError as exc:
            found.append(LayoutProblem(base, f"not valid YAML: {getattr(exc, 'problem', exc)}", line_of(base)))
            continue
        if not (isinstance(embedded, dict) and "mig-configs" in embedded):
            continue  # another file the ConfigMap carries
        linted = True
        at_value = line_of(base)  # a quoted or folded value: its lines are not the file's
        found += [replace(p, path=base + p.path, line=line_for(lines, p.path) if _first_line(value_node) else at_value)
                  for p in lint_mig_config(embedded, driver_before)]
    if not linted:
        found.append(LayoutProblem("/data", "this ConfigMap holds no mig-parted config (a data value with "
                                            "`version` and `mig-configs`)", line_of("/data")))
    return found


def _is_config_map(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "ConfigMap" and "mig-configs" not in data


def _data_values(data: dict[str, Any], node: yaml.Node | None) -> Iterator[tuple[str, str, yaml.Node | None]]:
    """(key, text, value node) of each string in the ConfigMap's `data`."""
    values = data.get("data")
    if not isinstance(values, dict):
        return
    nodes = _children(_children(node).get("data"))
    for key, value in values.items():
        if isinstance(value, str):
            yield str(key), value, nodes.get(str(key))


def _children(node: yaml.Node | None) -> dict[str, yaml.Node]:
    """The value nodes of a mapping node by key; none for anything else."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): v for k, v in node.value}


def _first_line(node: yaml.Node | None) -> int | None:
    """The file line of a literal block's first line of text (the line after its `|`), None for other styles."""
    if isinstance(node, yaml.ScalarNode) and node.style == "|":
        return node.start_mark.line + 2
    return None


def _yaml_error(path: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}" if mark else path
    return f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}"
