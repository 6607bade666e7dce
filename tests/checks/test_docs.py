"""The README and docs/: every relative link resolves (file and heading), and what the README shows the CLI
printing is what it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path):
    (tmp_path / "a.md").write_text("# Install here\n\n[ok](a.md#install-here) [gone](b.md) [no anchor](a.md#nope)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md: no such file", "a.md#nope: no heading #nope in a.md"]


def test_the_readme_reads_in_two_minutes():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 200


def test_every_docs_page_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    assert [p.name for p in PAGES[1:] if p.name != "README.md" and f"({p.name})" not in index] == []


def console_blocks(page: Path) -> list[tuple[str, str]]:
    """(command, output) of each ```console block: one `$ mlgate ...` line, then what it prints."""
    blocks = re.findall(r"^```console\n\$ (.+?)\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
    return [(command, output) for command, output in blocks]


def test_what_the_readme_shows_mlgate_printing_is_what_it_prints():
    blocks = console_blocks(ROOT / "README.md")
    assert blocks, "the README shows no mlgate output"
    for command, shown in blocks:
        program, *args = command.split()
        assert program == "mlgate", command
        done = subprocess.run([sys.executable, "-m", "mlgate", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
        assert done.stdout == shown, f"README shows for `{command}`:\n{shown}\nmlgate prints:\n{done.stdout}"
