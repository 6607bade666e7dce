"""The loader builds plain documents itself (fast path) and leaves the rest to PyYAML: both must give what
yaml.safe_load gives, and the node tree must still carry line numbers."""

import datetime

import pytest
import yaml

from mlgate.loading.linemap import compose_with_lines, load_with_node

DOCUMENTS = {
    "plain": "kind: Pod\nspec:\n  containers:\n  - name: a\n    image: x:1\n",
    "scalars": "a: 1\nb: 1.5\nc: .inf\nd: true\ne: null\nf: ~\ng: 0o17\nh: 0x1F\ni: '1'\nj: 2001-12-14\nk: yes\n",
    "timestamp": "t: 2001-12-14t21:59:43.10-05:00\n",
    "duplicate keys": "a: 1\na: 2\n",
    "non-string keys": "1: one\ntrue: yes\nnull: none\n",
    "anchors and merge": "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "explicit tags": "s: !!str 123\nb: !!binary aGVsbG8=\nset: !!set {a, b}\n",
    "omap": "o: !!omap [a: 1, b: 2]\n",
    "nested": "a: [[1, [2, {b: [3]}]], {}]\n",
    "empty values": "a:\nb: []\nc: {}\nd: ''\n",
}


@pytest.mark.parametrize("text", DOCUMENTS.values(), ids=DOCUMENTS.keys())
def test_a_document_loads_exactly_as_pyyaml_safe_load_builds_it(text: str) -> None:
    value, node = load_with_node(text)
    assert value == yaml.safe_load(text)
    assert node is not None


def test_bytes_and_text_load_alike() -> None:
    text = DOCUMENTS["anchors and merge"]
    assert load_with_node(text.encode())[0] == load_with_node(text)[0]


def test_timestamps_become_datetimes_on_the_fast_path_too() -> None:
    value, _ = load_with_node("d: 2001-12-14\n")
    assert value == {"d": datetime.date(2001, 12, 14)}


def test_line_numbers_point_at_the_field() -> None:
    _, lines = compose_with_lines(DOCUMENTS["plain"])
    assert lines["/spec/containers/0/image"] == 5
