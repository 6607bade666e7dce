"""`mlgate mig-lint`: mig-parted layout files checked before they reach a node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml

from mlgate.loading.linemap import compose_with_lines, line_for
from mlgate.rules.mig_layout import LayoutProblem, lint_mig_config, with_lines


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


def lint_paths(paths: Sequence[str]) -> tuple[list[FileProblem], list[str]]:
    """(the layout problems found, errors and warnings in file order; the files that could not be read or parsed):
    a report and its input errors, which the command keeps apart (stdout, exit 1 if any problem is an error;
    stderr and exit 2)."""
    problems: list[FileProblem] = []
    errors: list[str] = []
    for path in paths:
        try:
            data, lines = compose_with_lines(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{path}: cannot read: {exc}")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else path
            errors.append(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}")
            continue
        found = with_lines(lint_mig_config(data), partial(line_for, lines))
        problems.extend(FileProblem(path, problem) for problem in found)
    return problems, errors
