"""`mlgate mig-lint`: mig-parted layout files checked before they reach a node."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import yaml

from mlgate.loading.linemap import compose_with_lines, line_for
from mlgate.rules.mig_layout import lint_mig_config, render, with_lines


def lint_paths(paths: Sequence[str]) -> list[str]:
    messages: list[str] = []
    for path in paths:
        try:
            data, lines = compose_with_lines(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            messages.append(f"{path}: cannot read: {exc}")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else path
            messages.append(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}")
            continue
        problems = with_lines(lint_mig_config(data), partial(line_for, lines))
        messages.extend(render(problems, path))
    return messages
