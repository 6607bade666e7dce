"""The text report: what people read in a terminal and in CI logs.

One block per object: a head line with its verdict, then one entry per finding (the rule and reason, the
detail, where it is, the fix on its own line), wrapped to stay readable at 100 columns. Colour only marks
the verdicts and labels, and only when asked for: `Style(color=False)` writes no escape codes at all, so
plain output is stable enough for golden files.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO

import click

from mlgate.cli.review import Dropped, Item, Record, Unlooked
from mlgate.model.results import unchecked_text

WIDTH = 100
INDENT = " " * 7  # under the text after the label: "  DENY " is 7 characters, "  WARN " too
# what each verdict and label looks like in colour
COLOURS: Mapping[str, dict[str, object]] = {
    "ALLOWED": {"fg": "green", "bold": True},
    "DENIED": {"fg": "red", "bold": True},
    "ERROR": {"fg": "red", "bold": True},
    "skipped": {"fg": "yellow"},
    "DENY": {"fg": "red"},
    "WARN": {"fg": "yellow"},
    "AUDIT": {"fg": "cyan"},
    "SKIP": {"fg": "yellow"},
    "fix:": {"fg": "green"},
}


def use_colour(asked: bool | None, out: IO[str]) -> bool:
    """Colour when asked (click's `color=True`), else only on a terminal and without NO_COLOR (no-color.org)."""
    if asked is not None:
        return asked
    return bool(out.isatty()) and not os.environ.get("NO_COLOR")


@dataclass(frozen=True)
class Style:
    color: bool = False
    quiet: bool = False  # only denied and failed objects, and only what blocks them

    def paint(self, word: str) -> str:
        return click.style(word, **COLOURS[word]) if self.color else word  # type: ignore[arg-type]

    def wrapped(self, text: str, indent: str, word: str, after: int = 0) -> str:
        """`text` wrapped, then the first `word` from `after` on painted: wrapping counts visible characters."""
        text = _wrap(text, indent)
        at = text.find(word, after)
        if not self.color or at < 0:
            return text
        return text[:at] + self.paint(word) + text[at + len(word):]


PLAIN = Style()


def text_record(record: Record, style: Style = PLAIN) -> str:
    if style.quiet and record.status in ("allowed", "skipped"):
        return ""
    head = f"{record.where} [{record.position}]"
    if record.status == "error":
        subject = f" {record.identity}:" if record.kind else ""  # known when evaluation, not parsing, failed
        return style.wrapped(f"{head}{subject} ERROR {record.error}", "  ", "ERROR", head.rfind("]")) + "\n"
    if record.status == "skipped":
        return f"{head} {record.identity}: {style.paint('skipped')} ({record.note})\n"
    lines = [f"{head} {record.identity}: {style.paint(record.status.upper())}"]
    if not style.quiet:
        lines += [_wrap(f"  NOTE {note}", INDENT) for note in record.notes]
    lists = [("violations", record.violations)]
    if not style.quiet:
        lists += [("warnings", record.warnings), ("audit", record.audit)]
    for level, items in lists:
        lines += _entries(record.source, level, items, record.dropped, style)
    if not style.quiet:
        lines += [_skip(u, style) for u in record.unchecked]
        lines += [style.wrapped(f"  {e.label} {e.message()}", INDENT, "SKIP") if not e.expired
                  else _wrap(f"  {e.label} {e.message()}", INDENT) for e in record.excepted]
        if record.patch:
            lines.append(f"  MUTATE {len(record.patch)} patch operation(s); `mlgate mutate` shows the result")
    return "\n".join(lines) + "\n"


def _entries(source: str, level: str, items: list[Item], dropped: list[Dropped], style: Style) -> Iterator[str]:
    more = {(d.policy, d.rule): d.count for d in dropped if d.level == level}
    for index, item in enumerate(items):
        yield _entry(source, level, item, style)
        following = items[index + 1] if index + 1 < len(items) else None
        key = (item.policy, item.rule)
        if key in more and (following is None or (following.policy, following.rule) != key):
            label = _label(level, item)
            yield style.wrapped(f"  {label} [{item.policy}/{item.rule}] and {more[key]:,} more findings", INDENT, label)


def _label(level: str, item: Item) -> str:
    """What the entry does to admission: a rule that could not evaluate is an ERROR only where it blocks."""
    if level == "violations":
        return "ERROR" if item.action == "error" else "DENY"
    return "WARN" if level == "warnings" else "AUDIT"


def _entry(source: str, level: str, item: Item, style: Style) -> str:
    label = _label(level, item)
    if item.action == "error":
        return style.wrapped(f"  {label} [{item.policy}/{item.rule}] {item.reason}: {item.detail}", INDENT, label)
    note = f" ({item.note})" if item.note else ""
    lines = [style.wrapped(f"  {label} [{item.policy}/{item.rule}] {item.reason}{note}", INDENT, label),
             _wrap(INDENT + item.detail, INDENT),
             f"{INDENT}at {source}:{item.line} {item.path}" if item.line else f"{INDENT}at {source} {item.path}"]
    if item.fix:
        lines.append(style.wrapped(f"{INDENT}fix: {item.fix}", INDENT + "     ", "fix:"))
    return "\n".join(lines)


def _skip(unlooked: Unlooked, style: Style) -> str:
    return style.wrapped(f"  SKIP [{unlooked.policy}/{unlooked.rule}] {unchecked_text(unlooked.reason)}",
                         INDENT, "SKIP")


def _wrap(text: str, indent: str) -> str:
    # paths and URIs stay whole: a pointer cut in two cannot be searched for
    if len(text) <= WIDTH:
        return text
    return textwrap.fill(text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def text_summary(counts: Mapping[str, int]) -> str:
    return (
        f"{counts['documents']} document(s): {counts['allowed']} allowed, {counts['denied']} denied, "
        f"{counts['skipped']} skipped, {counts['errors']} error(s); {counts['warnings']} warning(s)\n"
    )
