"""`mlgate mig-lint`: mig-parted layout files checked before they reach a node."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import yaml

from mlgate.loading.linemap import compose_with_lines, line_for
from mlgate.rules.mig_layout import lint_mig_config, render, with_lines


def lint_paths(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the layout problems found, the files that could not be read or parsed): a report and its input errors,
    which the command keeps apart (stdout and exit 1, stderr and exit 2)."""
    problems: list[str] = []
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
        problems.extend(render(with_lines(lint_mig_config(data), partial(line_for, lines)), path))
    return problems, errors
